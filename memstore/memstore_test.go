package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// newStore builds a memstore for a test, closed at cleanup.
func newStore(t testing.TB, cfg memstore.Config) *memstore.Store {
	t.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatalf("memstore.New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestMain fails the run if any goroutine outlives the tests.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		return newStore(t, memstore.Config{Clock: clk})
	})
}

func TestNewConfig(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // the default shard count follows it
	tests := []struct {
		name   string
		cfg    memstore.Config
		shards int // at GOMAXPROCS 2
		err    error
	}{
		{"zero value: 32 a core", memstore.Config{}, 64, nil},
		{"small MaxKeys: 4 a core", memstore.Config{MaxKeys: 1000}, 8, nil},
		{"MaxKeys for 20 shards of 1024, rounded up", memstore.Config{MaxKeys: 20 << 10}, 32, nil},
		{"one shard", memstore.Config{Shards: 1}, 1, nil},
		{"rounded up to a power of two", memstore.Config{Shards: 5}, 8, nil},
		{"largest", memstore.Config{Shards: 1 << 16}, 1 << 16, nil},
		{"too many shards", memstore.Config{Shards: 1<<16 + 1}, 0, memstore.ErrInvalidConfig},
		{"negative shards", memstore.Config{Shards: -1}, 0, memstore.ErrInvalidConfig},
		{"negative MaxKeys", memstore.Config{MaxKeys: -1}, 0, memstore.ErrInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := memstore.New(tc.cfg)
			if !errors.Is(err, tc.err) {
				t.Fatalf("New(%+v) error %v, want %v", tc.cfg, err, tc.err)
			}
			if err != nil {
				return
			}
			defer s.Close()
			if got := s.Shards(); got != tc.shards {
				t.Fatalf("%d shards, want %d", got, tc.shards)
			}
		})
	}
}

// countingAlgo is the token bucket, counting calls: it shows the store runs
// the configured Algorithm.
type countingAlgo struct {
	algo.TokenBucket
	calls *atomic.Int64
}

func (c countingAlgo) Take(p algo.Policy, s algo.State, now, cost int64) (algo.State, algo.Result, error) {
	c.calls.Add(1)
	return c.TokenBucket.Take(p, s, now, cost)
}

func TestConfigAlgorithmIsUsed(t *testing.T) {
	var calls atomic.Int64
	s := newStore(t, memstore.Config{Algorithm: countingAlgo{calls: &calls}})
	p := algo.PerSecond(1).Burst(2)
	take(t, s, "k", p, 1)
	if _, err := s.TakeMulti(context.Background(), []store.Request{{Key: "k", Policy: p, Cost: 1}, {Key: "j", Policy: p, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("the configured Algorithm ran %d times, want 3", n)
	}
}

func TestTakeExistingKeyAllocatesNothing(t *testing.T) {
	s := newStore(t, memstore.Config{Clock: storetest.NewClock()})
	p := algo.PerSecond(1_000_000).Burst(1_000_000)
	ctx := context.Background()
	take(t, s, "hot", p, 1) // the bucket exists from here on
	if n := testing.AllocsPerRun(1000, func() { s.Take(ctx, store.Request{Key: "hot", Policy: p, Cost: 1}) }); n != 0 {
		t.Fatalf("Take on an existing key: %v allocations, want 0", n)
	}
	reqs := []store.Request{{Key: "hot", Policy: p, Cost: 1}, {Key: "global", Policy: p, Cost: 1}}
	if n := testing.AllocsPerRun(1000, func() { s.TakeMulti(ctx, reqs) }); n != 1 {
		t.Fatalf("TakeMulti on existing keys: %v allocations, want 1 (the Results)", n)
	}
}

// TestTakeMultiNoDeadlock runs multi-takes over overlapping keys in
// opposite orders, with single takes, from many goroutines.
func TestTakeMultiNoDeadlock(t *testing.T) {
	s := newStore(t, memstore.Config{Shards: 4})
	p := algo.PerSecond(1000).Burst(1000)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				reqs := make([]store.Request, 0, 3)
				for j := range 3 {
					k := keys[(g+i+j*(1+g%2))%len(keys)]
					if g%2 == 1 {
						k = keys[len(keys)-1-(i+j)%len(keys)]
					}
					reqs = append(reqs, store.Request{Key: k, Policy: p, Cost: 1})
				}
				_, err := s.TakeMulti(context.Background(), reqs)
				if err != nil && !errors.Is(err, store.ErrDuplicateKey) {
					t.Errorf("TakeMulti: %v", err)
					return
				}
				take(t, s, keys[i%len(keys)], p, 1)
			}
		})
	}
	wg.Wait()
}

func TestTakeMultiEmpty(t *testing.T) {
	s := newStore(t, memstore.Config{})
	res, err := s.TakeMulti(context.Background(), nil)
	if err != nil || !res.Allowed || res.Denied != -1 || len(res.Results) != 0 {
		t.Fatalf("TakeMulti(nil) = %+v, %v; want allowed with no results", res, err)
	}
	s.Close()
	if _, err := s.TakeMulti(context.Background(), nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("TakeMulti(nil) after Close: %v, want store.ErrClosed", err)
	}
}

func TestTakeMultiDuplicateKeys(t *testing.T) {
	p := algo.PerSecond(1).Burst(5)
	reqs := func(n int, dup ...int) []store.Request {
		r := make([]store.Request, n)
		for i := range r {
			r[i] = store.Request{Key: fmt.Sprint("k", i), Policy: p, Cost: 1}
		}
		for _, i := range dup {
			r[i].Key = "dup"
		}
		return r
	}
	tests := []struct {
		name string
		reqs []store.Request
		want error
	}{
		{"few distinct", reqs(3), nil},
		{"few with a repeat", reqs(3, 0, 2), store.ErrDuplicateKey},
		{"many distinct", reqs(40), nil},
		{"many with a repeat", reqs(40, 3, 39), store.ErrDuplicateKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, memstore.Config{})
			res, err := s.TakeMulti(context.Background(), tc.reqs)
			if !errors.Is(err, tc.want) {
				t.Fatalf("TakeMulti error %v, want %v", err, tc.want)
			}
			if err == nil && !res.Allowed {
				t.Fatalf("TakeMulti = %+v, want allowed", res)
			}
			if err != nil && s.Len() != 0 {
				t.Fatalf("refused TakeMulti stored %d buckets", s.Len())
			}
		})
	}
}
