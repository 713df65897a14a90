package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/redis/go-redis/v9"
)

// frozen is a clock that never moves, so no batch expires while the keys
// are counted.
type frozen struct{}

func (frozen) Now() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }

// leasedKeys is how many keys BenchmarkLeasedKeyHeap leases: the default
// number whose demand hybrid.Leases measures at once.
const leasedKeys = hybrid.DefaultLeaseKeys

// heapOf returns the heap held per key after fill, by the stores it
// builds: HeapAlloc after a GC, before and after, over leasedKeys.
func heapOf(b *testing.B, fill func() (keep any)) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / leasedKeys
}

// BenchmarkLeasedKeyHeap reports the heap a leased key holds in
// hybrid.Leases beyond its bucket in memstore (heapB/leased-key): 10k keys
// (20 bytes, made beforehand), each taken from 5 times at one instant so
// that each holds a batch, against the same keys taken once from memstore
// alone (heapB/key, memstore's bucket).
func BenchmarkLeasedKeyHeap(b *testing.B) {
	p := algo.PerSecond(10_000).Burst(1_000) // a batch cap of 1,000
	keys := Keys(leasedKeys, "")
	ctx := context.Background()
	take := func(s store.Store, k string) {
		if res, err := s.Take(ctx, store.Request{Key: k, Policy: p, Cost: 1}); err != nil || !res.Allowed {
			b.Fatalf("take %s: %v, %v", k, res, err)
		}
	}
	for b.Loop() {
		var plain, leased float64
		plain = heapOf(b, func() any {
			ms, err := memstore.New(memstore.Config{Clock: frozen{}})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				take(ms, k)
			}
			return ms
		})
		var st hybrid.Stats
		leased = heapOf(b, func() any {
			ms, err := memstore.New(memstore.Config{Clock: frozen{}})
			if err != nil {
				b.Fatal(err)
			}
			ls, err := hybrid.NewLeases(ms, hybrid.LeasesConfig{Instances: 1, Keys: leasedKeys, SweepEvery: -1, Clock: frozen{}})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				for range 5 {
					take(ls, k)
				}
			}
			st = ls.Stats()
			return ls
		})
		if st.Batches != leasedKeys || st.Entries != leasedKeys {
			b.Fatalf("%d batches over %d keys, want one each of %d", st.Batches, st.Entries, leasedKeys)
		}
		b.ReportMetric(plain, "heapB/key")
		b.ReportMetric(leased-plain, "heapB/leased-key")
	}
}

// TestLeasedCountsCommands runs the global-limit load tiny on a real
// Redis: ratebucket with leases over 3 instances admits within the bound
// and sends fewer commands than it admits, which the hook counts.
func TestLeasedCountsCommands(t *testing.T) {
	srv := redistest.Start(t)
	var calls atomic.Int64
	var ls []Limiter
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { c.Close() })
		CountCommands(c, &calls)
		l, closeFn, err := Leased(3).New(c, Global)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := closeFn(); err != nil {
				t.Error(err)
			}
		})
		ls = append(ls, l)
	}
	ld, err := RunFleet(ls, "user:global", 4, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ap, _ := Global.Algo()
	if bound := ap.BatchBound(ld.Elapsed, hybrid.DefaultLifetime, 3); ld.Admitted > bound {
		t.Errorf("admitted %d in %v, above the bound %d", ld.Admitted, ld.Elapsed, bound)
	}
	if n := calls.Load(); n == 0 || n >= ld.Admitted {
		t.Errorf("%d commands for %d admitted: want some, and fewer", n, ld.Admitted)
	}
}
