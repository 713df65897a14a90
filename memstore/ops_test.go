package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// What storetest cannot see of Refund, TakeAtMost, Reserve and
// CancelReservation: allocations, stored buckets, the overflow bucket, the
// configured algorithm.

// TestOpsAllocateNothing: on a key that has a bucket, every operation
// allocates nothing; RefundMulti allocates only its Results.
func TestOpsAllocateNothing(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk})
	p := algo.PerSecond(1).Burst(1_000_000)
	ctx := context.Background()
	take(t, s, "hot", p, 500_000)
	cases := map[string]func(){
		"Refund":     func() { s.Refund(ctx, store.Request{Key: "hot", Policy: p, Cost: 1}) },
		"TakeAtMost": func() { s.TakeAtMost(ctx, store.Request{Key: "hot", Policy: p, Cost: 1}) },
		"Reserve at once": func() {
			s.Reserve(ctx, store.Request{Key: "hot", Policy: p, Cost: 1}, time.Second)
		},
		"Reserve and cancel": func() {
			r, _ := s.Reserve(ctx, store.Request{Key: "hot", Policy: p, Cost: 600_000}, time.Hour)
			s.CancelReservation(ctx, "hot", p, r.Ticket)
		},
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s on an existing key: %v allocations, want 0", name, n)
		}
	}
	reqs := []store.Request{{Key: "hot", Policy: p, Cost: 1}, {Key: "global", Policy: p, Cost: 1}}
	if n := testing.AllocsPerRun(1000, func() { s.RefundMulti(ctx, reqs) }); n != 1 {
		t.Errorf("RefundMulti: %v allocations, want 1 (the Results)", n)
	}
}

// TestRefundCreatesNothing: a refund to a key without a bucket, or of 0,
// stores nothing; one that fills a bucket drops it.
func TestRefundCreatesNothing(t *testing.T) {
	s := newStore(t, memstore.Config{Clock: storetest.NewClock()})
	p := algo.PerSecond(1).Burst(5)
	ctx := context.Background()
	if res, err := s.Refund(ctx, store.Request{Key: "absent", Policy: p, Cost: 3}); err != nil || res.Remaining != 5 || s.Len() != 0 {
		t.Fatalf("Refund on an absent key = %+v, %v, %d buckets; want full, none stored", res, err, s.Len())
	}
	take(t, s, "k", p, 2)
	if res, err := s.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 0}); err != nil || res.Remaining != 3 || s.Len() != 1 {
		t.Fatalf("Refund(0) = %+v, %v", res, err)
	}
	if res, err := s.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 2}); err != nil || res.Remaining != 5 || s.Len() != 0 {
		t.Fatalf("Refund(2) after Take(2) = %+v, %v, %d buckets; want full and forgotten", res, err, s.Len())
	}
	if _, err := s.RefundMulti(ctx, []store.Request{{Key: "x", Policy: p, Cost: 1}, {Key: "y", Policy: p, Cost: 0}}); err != nil || s.Len() != 0 {
		t.Fatalf("RefundMulti on absent keys: %v, %d buckets; want none stored", err, s.Len())
	}
}

// TestOpsNeedTheTokenBucket: under a window algorithm the operations are
// unsupported, and charge nothing.
func TestOpsNeedTheTokenBucket(t *testing.T) {
	s := newStore(t, memstore.Config{Algorithm: algo.SlidingWindow{}})
	p := algo.PerSecond(1).Burst(5)
	ctx := context.Background()
	calls := map[string]func() error{
		"Refund":     func() error { _, err := s.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); return err },
		"TakeAtMost": func() error { _, _, err := s.TakeAtMost(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); return err },
		"Reserve": func() error {
			_, err := s.Reserve(ctx, store.Request{Key: "k", Policy: p, Cost: 1}, time.Second)
			return err
		},
		"CancelReservation": func() error {
			_, _, err := s.CancelReservation(ctx, "k", p, algo.Ticket{})
			return err
		},
		"RefundMulti": func() error {
			_, err := s.RefundMulti(ctx, []store.Request{{Key: "k", Policy: p, Cost: 1}})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrUnsupported) {
			t.Errorf("%s under SlidingWindow: %v, want store.ErrUnsupported", name, err)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("%d buckets stored", s.Len())
	}
}

// TestOpsAtFullStore: at MaxKeys, TakeAtMost and Reserve on a new key are
// served from the overflow bucket, as Take is; the reservation has no
// ticket, since the key has no bucket of its own to cancel on.
func TestOpsAtFullStore(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 2})
	p := algo.PerSecond(1).Burst(3)
	ctx := context.Background()
	for i := range 2 {
		take(t, s, fmt.Sprint("old", i), p, 3)
	}
	g, res, err := s.TakeAtMost(ctx, store.Request{Key: "new0", Policy: p, Cost: 2})
	if err != nil || g != 2 || res.Remaining != 1 {
		t.Fatalf("TakeAtMost(2) on a new key at a full store = %d, %+v, %v; want 2 from overflow", g, res, err)
	}
	r, err := s.Reserve(ctx, store.Request{Key: "new1", Policy: p, Cost: 3}, time.Hour)
	if err != nil || !r.Allowed || r.Delay != 2*time.Second || r.Ticket != (algo.Ticket{}) {
		t.Fatalf("Reserve(3) on a new key at a full store = %+v, %v; want the overflow's delay of 2s, no ticket", r, err)
	}
	if g, res, _ := s.TakeAtMost(ctx, store.Request{Key: "new2", Policy: p, Cost: 1}); g != 0 || res.RetryAfter != 3*time.Second {
		t.Fatalf("TakeAtMost(1) behind the overflow's reservation = %d, %+v; want none, retry after 3s", g, res)
	}
	if s.Len() != 2 {
		t.Fatalf("%d buckets, want the 2 old ones", s.Len())
	}
}

// TestRefundMultiClosed: after Close, RefundMulti fails, even empty.
func TestRefundMultiClosed(t *testing.T) {
	s := newStore(t, memstore.Config{})
	if res, err := s.RefundMulti(context.Background(), nil); err != nil || len(res) != 0 {
		t.Fatalf("RefundMulti(nil) = %v, %v", res, err)
	}
	s.Close()
	if _, err := s.RefundMulti(context.Background(), nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("RefundMulti(nil) after Close: %v, want store.ErrClosed", err)
	}
}
