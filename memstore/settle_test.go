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

// TestHoldRecordsBounded: the records of open holds count against MaxKeys
// and are swept at their deadlines, so holds that are never settled (dead
// workers) cost bounded memory; a full store with nothing idle refuses a
// hold, charging nothing, with the wait until its first entry is idle.
func TestHoldRecordsBounded(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 2048})
	p := algo.PerSecond(1000).Burst(1000)
	ctx := context.Background()
	peak := 0
	for i := range 20_000 { // about 1000 holds open at a time, none settled
		if _, res, err := s.Hold(ctx, store.Request{Key: "tenant", Policy: p, Cost: 1}, time.Second); err != nil || !res.Allowed {
			t.Fatalf("hold %d: %+v, %v", i, res, err)
		}
		clk.Add(time.Millisecond)
		peak = max(peak, s.Len())
	}
	if peak > 2048 {
		t.Fatalf("Len peaked at %d over MaxKeys 2048: hold records are not bounded", peak)
	}
	full := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 4})
	for i := range 3 {
		if _, res, _ := full.Hold(ctx, store.Request{Key: "k", Policy: p, Cost: 1}, 10*time.Second); !res.Allowed {
			t.Fatalf("hold %d of 3 refused in a store of 4 keys", i)
		}
	}
	h, res, err := full.Hold(ctx, store.Request{Key: "k", Policy: p, Cost: 1}, 10*time.Second)
	if err != nil || res.Allowed || h != (algo.Hold{}) || res.RetryAfter <= 0 || res.RetryAfter > 10*time.Second {
		t.Fatalf("hold at a full store = %+v %+v %v, want refused until an entry is idle", h, res, err)
	}
	if got := take(t, full, "k", p, 0); got.Remaining != 997 {
		t.Fatalf("after the refused hold the bucket holds %d, want 997", got.Remaining)
	}
}

// TestSettleRacesOnce: of many goroutines settling one hold at once,
// exactly one settles it; the others are refused and change nothing.
func TestSettleRacesOnce(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk})
	p := algo.PerSecond(1).Burst(100)
	ctx := context.Background()
	h, _, err := s.Hold(ctx, store.Request{Key: "k", Policy: p, Cost: 50}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	for range 16 {
		go func() { _, err := s.Settle(ctx, "k", p, h, 10); errs <- err }()
	}
	ok := 0
	for range 16 {
		if err := <-errs; err == nil {
			ok++
		} else if !store.IsInputError(err) {
			t.Errorf("a losing Settle: %v", err)
		}
	}
	if got := take(t, s, "k", p, 0); ok != 1 || got.Remaining != 90 {
		t.Fatalf("%d settles succeeded, bucket holds %d; want 1 and 90", ok, got.Remaining)
	}
}
