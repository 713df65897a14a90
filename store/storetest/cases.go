package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// testConcurrent: goroutines hammering one key admit exactly capacity with
// the clock frozen, and never more than the law allows while it moves.
func testConcurrent(t *testing.T, e *env) {
	const goroutines, attempts = 8, 25
	p := algo.PerSecond(10).Burst(50)
	hammer := func(t *testing.T, key string, during func()) int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range attempts {
					res, err := e.s.Take(context.Background(), store.Request{Key: key, Policy: p, Cost: 1})
					if err != nil {
						t.Errorf("Take: %v", err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		if during != nil {
			during()
		}
		wg.Wait()
		return admitted.Load()
	}

	t.Run("frozen", func(t *testing.T) {
		if got := hammer(t, e.key(), nil); got != p.Capacity() {
			t.Fatalf("%d goroutines × %d takes at a frozen clock admitted %d, want exactly %d",
				goroutines, attempts, got, p.Capacity())
		}
	})
	t.Run("moving", func(t *testing.T) {
		start := e.clk.Now()
		got := hammer(t, e.key(), func() {
			for range 40 {
				e.clk.Add(25 * time.Millisecond)
			}
		})
		elapsed := e.clk.Now().Sub(start)
		bound := p.Capacity() + int64(elapsed/(100*time.Millisecond))
		if got > bound {
			t.Fatalf("admitted %d over %v, law allows %d", got, elapsed, bound)
		}
	})
}

// testBadInput: invalid requests are errors matching their sentinel and
// charge nothing.
func testBadInput(t *testing.T, e *env) {
	p := algo.PerSecond(1).Burst(5)
	tests := []struct {
		name   string
		key    string
		policy algo.Policy
		cost   int64
		want   error
	}{
		{"empty key", "", p, 1, store.ErrEmptyKey},
		{"key too long", e.sized(store.DefaultMaxKeyLen + 1), p, 1, store.ErrKeyTooLong},
		{"zero policy", e.key(), algo.Policy{}, 1, algo.ErrInvalidPolicy},
		{"zero rate", e.key(), algo.PerSecond(0).Burst(5), 1, algo.ErrInvalidPolicy},
		{"zero capacity", e.key(), algo.PerSecond(1).Burst(0), 1, algo.ErrInvalidPolicy},
		{"negative cost", e.key(), p, -1, algo.ErrInvalidCost},
		{"cost above capacity", e.key(), p, 6, algo.ErrCostExceedsCapacity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.s.Take(context.Background(), store.Request{Key: tc.key, Policy: tc.policy, Cost: tc.cost})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Take(%q, %v, %d) = %+v, %v; want an error matching %v", tc.key, tc.policy, tc.cost, res, err, tc.want)
			}
			if tc.key != "" && !errors.Is(err, store.ErrKeyTooLong) {
				e.full(t, tc.key, p)
			}
		})
	}
	t.Run("longest key", func(t *testing.T) {
		key := e.sized(store.DefaultMaxKeyLen)
		if res := e.take(t, key, p, 1); !res.Allowed || res.Remaining != p.Capacity()-1 {
			t.Fatalf("Take on a key of %d bytes = %+v, want admitted with %d left", len(key), res, p.Capacity()-1)
		}
		if res := e.take(t, key, p, 0); res.Remaining != p.Capacity()-1 {
			t.Fatalf("peek on a key of %d bytes = %+v, want %d left: the bucket was not kept", len(key), res, p.Capacity()-1)
		}
	})
}

// testContext: a context that has already ended is an error matching its
// cause, and charges nothing.
func testContext(t *testing.T, e *env) {
	p := algo.PerSecond(1).Burst(5)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	tests := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"canceled", canceled, context.Canceled},
		{"deadline exceeded", expired, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := e.key()
			res, err := e.s.Take(tc.ctx, store.Request{Key: key, Policy: p, Cost: 1})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Take with a done context = %+v, %v; want an error matching %v", res, err, tc.want)
			}
			e.full(t, key, p)
		})
	}
}

// testClose: after Close every call fails with store.ErrClosed.
func testClose(t *testing.T, e *env) {
	p := algo.PerSecond(1).Burst(5)
	key := e.key()
	e.take(t, key, p, 1)
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if res, err := e.s.Take(context.Background(), store.Request{Key: key, Policy: p, Cost: 1}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Take after Close = %+v, %v; want store.ErrClosed", res, err)
	}
	if res, err := e.s.Take(context.Background(), store.Request{Key: e.key(), Policy: p, Cost: 0}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("peek of a new key after Close = %+v, %v; want store.ErrClosed", res, err)
	}
	reqs := []store.Request{{Key: key, Policy: p, Cost: 1}}
	if res, err := e.s.TakeMulti(context.Background(), reqs); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("TakeMulti after Close = %+v, %v; want store.ErrClosed", res, err)
	}
	if err := e.s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Fatalf("second Close: %v, want nil or store.ErrClosed", err)
	}
}
