package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestQuotaForgotten: a quota's key holds memory only while its period has
// a count. A peek at a fresh key stores nothing; a charged key is dropped
// by the first call after its period ends, as a full bucket is.
func TestQuotaForgotten(t *testing.T) {
	clk := storetest.NewClock()
	clk.Set(time.Date(2028, 2, 29, 23, 0, 0, 0, time.UTC))
	s := newStore(t, memstore.Config{Clock: clk})
	p := algo.Quota(10, algo.Month, 0)
	take(t, s, "k", p, 0)
	if n := s.Len(); n != 0 {
		t.Fatalf("a peek stored %d keys", n)
	}
	if res := take(t, s, "k", p, 3); !res.Allowed || res.ResetAfter != time.Hour {
		t.Fatalf("take = %+v, want admitted, reset in 1h (March 1st)", res)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d after a charge, want 1", n)
	}
	clk.Set(time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC))
	if res := take(t, s, "k", p, 0); res.Remaining != 10 || res.ResetAfter != 0 {
		t.Fatalf("peek on March 1st = %+v, want a fresh period", res)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after the period ended, want 0", n)
	}
}

// BenchmarkTakeQuota measures a Take on one hot key holding a monthly
// quota, alone and beside a token bucket in a multi-limit take.
func BenchmarkTakeQuota(b *testing.B) {
	ctx := context.Background()
	q := algo.Quota(algo.MaxCapacity, algo.Month, 0)
	b.Run("hot key", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		take(b, s, "q", q, 1)
		b.ReportAllocs()
		for b.Loop() {
			s.Take(ctx, store.Request{Key: "q", Policy: q, Cost: 1})
		}
	})
	b.Run("multi with a bucket", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		reqs := []store.Request{{Key: "user:1", Policy: benchPolicy, Cost: 1}, {Key: "month:1", Policy: q, Cost: 1}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.TakeMulti(ctx, reqs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
