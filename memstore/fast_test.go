package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestLockFreeTakeUnderChurn: Takes that update their slots without the
// shard's lock, from several goroutines, while another goroutine grows
// the same table (new keys) and shifts its slots (keys that a refund
// fills are removed, moving the keys after them), lose no update and make
// none twice: with the clock stopped each key admits exactly
// min(attempts, capacity), and holds what is left. One shard, so that
// every move passes the taken keys.
func TestLockFreeTakeUnderChurn(t *testing.T) {
	clk := storetest.NewClock()
	s, err := memstore.New(memstore.Config{Clock: clk, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := algo.PerHour(1).Burst(40)
	const keys, goroutines, takes = 300, 4, 6000
	admitted := make([]atomic.Int64, keys)
	attempts := make([]atomic.Int64, keys)
	// Every key exists before the race: its first Take is the locked path's.
	for k := range keys {
		if _, err := s.Take(ctx, store.Request{Key: fmt.Sprint("x", k), Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		admitted[k].Add(1)
		attempts[k].Add(1)
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			y := fmt.Sprint("y", i%5000)
			if _, err := s.Take(ctx, store.Request{Key: y, Policy: p, Cost: 1}); err != nil {
				t.Error(err)
				return
			}
			if i%3 != 0 { // filled again, so removed: the keys after it move back
				if _, err := s.Refund(ctx, store.Request{Key: y, Policy: p, Cost: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range takes {
				k := r.IntN(keys)
				res, err := s.Take(ctx, store.Request{Key: fmt.Sprint("x", k), Policy: p, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				attempts[k].Add(1)
				if res.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	for k := range keys {
		want := min(attempts[k].Load(), p.Capacity())
		if got := admitted[k].Load(); got != want {
			t.Errorf("key x%d admitted %d of %d takes, want %d", k, got, attempts[k].Load(), want)
		}
		res, err := s.Take(ctx, store.Request{Key: fmt.Sprint("x", k), Policy: p, Cost: 0})
		if err != nil || res.Remaining != p.Capacity()-admitted[k].Load() {
			t.Errorf("key x%d holds %d (%v), want %d", k, res.Remaining, err, p.Capacity()-admitted[k].Load())
		}
	}
}
