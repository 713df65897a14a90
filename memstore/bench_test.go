package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/benchkeys"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// benchPolicy never runs dry or refills to full during a benchmark, so every
// Take after the first finds its bucket and is admitted.
var benchPolicy = algo.PerSecond(1).Burst(1_000_000_000)

// benchKeys returns n distinct keys, each already holding a bucket in s.
func benchKeys(b *testing.B, s *memstore.Store, prefix string, n int) []string {
	b.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
		take(b, s, keys[i], benchPolicy, 1)
	}
	return keys
}

// BenchmarkTake measures Take on the real clock: one hot key, 100k distinct
// keys in turn, and goroutines on disjoint key sets (run with -cpu 1,2,4
// to see the scaling).
func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	b.Run("hot key", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		keys := benchKeys(b, s, "hot", 1)
		b.ReportAllocs()
		for b.Loop() {
			s.Take(ctx, store.Request{Key: keys[0], Policy: benchPolicy, Cost: 1})
		}
	})
	b.Run("100k keys", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		keys := benchKeys(b, s, "k", 100_000)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Take(ctx, store.Request{Key: keys[i], Policy: benchPolicy, Cost: 1})
			if i++; i == len(keys) {
				i = 0
			}
		}
		if n := s.Len(); n != len(keys) {
			b.Fatalf("Len = %d, want %d: keys did not really vary", n, len(keys))
		}
	})
	b.Run("parallel distinct keys", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		const perG = 1024
		keys := benchKeys(b, s, "p", 64*perG) // up to 64 goroutines
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1)-1) % 64
			mine, i := keys[g*perG:(g+1)*perG], 0
			for pb.Next() {
				s.Take(ctx, store.Request{Key: mine[i], Policy: benchPolicy, Cost: 1})
				if i++; i == perG {
					i = 0
				}
			}
		})
	})
}

// BenchmarkTakeMulti measures a two-bucket take (a per-user and a global
// limit), on existing buckets.
func BenchmarkTakeMulti(b *testing.B) {
	s := newStore(b, memstore.Config{})
	ctx := context.Background()
	reqs := []store.Request{{Key: "user:1", Policy: benchPolicy, Cost: 1}, {Key: "global", Policy: benchPolicy, Cost: 1}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.TakeMulti(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeKeys measures Take over 100k keys, each holding a bucket
// before the timer starts: admitted (policy=admit, benchPolicy) or denied
// (policy=deny: burst 1, 1 a minute), the keys in order or at random, from
// one goroutine or from GOMAXPROCS (par=true), each walking its own
// stretch of the keys or its own random order (bench/ runs the same
// patterns against the in-process peers). With keys=same a Take's key is
// the very string the key was filled with, so a Store that keeps the
// caller's string compares it by its pointer; with keys=fresh it is
// another string with the same bytes, as a caller that builds its key
// per request passes, and the bytes are compared.
//
// Besides ns/op it reports heapB/key, the heap a Store holds per key,
// the key's bytes included (filled with keys the caller then drops), and
// cpu-ns/op, the CPU time of the goroutines' threads per Take: a machine
// shared with other work inflates ns/op with the time a thread waited for
// a core, not cpu-ns/op, and a parallel row's cpu-ns/op above its
// sequential one is time the cores spent waiting on each other's cache
// lines.
func BenchmarkTakeKeys(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	deny := algo.PerMinute(1).Burst(1)
	orders := []struct {
		name string
		walk func(g, procs int) benchkeys.Walk
	}{
		{"walk", func(g, procs int) benchkeys.Walk { return benchkeys.Stretch(g, procs, n) }},
		{"random", func(g, _ int) benchkeys.Walk { return benchkeys.Random(g, n) }},
	}
	heap := map[string]float64{}
	for _, pol := range []struct {
		name string
		p    algo.Policy
	}{{"admit", benchPolicy}, {"deny", deny}} {
		for _, order := range orders {
			for _, par := range []bool{false, true} {
				for _, fresh := range []bool{false, true} {
					name := fmt.Sprintf("policy=%s/order=%s/par=%v/keys=%s", pol.name, order.name, par, map[bool]string{false: "same", true: "fresh"}[fresh])
					b.Run(name, func(b *testing.B) {
						if _, ok := heap[pol.name]; !ok {
							heap[pol.name] = heapPerKey(b, n, pol.p)
						}
						s := newStore(b, memstore.Config{})
						keys := fill(b, s, n, pol.p, fresh)
						procs := 1
						if par {
							procs = runtime.GOMAXPROCS(0)
						}
						b.ReportAllocs()
						b.ResetTimer()
						var next, cpu atomic.Int64
						b.SetParallelism(1)
						run := func(more func() bool) {
							w := order.walk(int(next.Add(1)-1), procs)
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
							c0 := threadCPU()
							for more() {
								s.Take(ctx, store.Request{Key: keys[w.Next()], Policy: pol.p, Cost: 1})
							}
							cpu.Add(threadCPU() - c0)
						}
						if par {
							b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
						} else {
							run(b.Loop)
						}
						b.ReportMetric(float64(cpu.Load())/float64(b.N), "cpu-ns/op")
						b.ReportMetric(heap[pol.name], "heapB/key")
					})
				}
			}
		}
	}
}

// benchKey returns the i-th key of BenchmarkTakeKeys, 20 bytes, in a
// string of its own.
func benchKey(i int) string { return fmt.Sprintf("rl:user:%012d", i) }

// fill takes once under p from each of n keys and returns the keys for
// the benchmark to take with: the very strings it filled with, or with
// fresh set other strings with the same bytes (the ones filled with are
// dropped).
func fill(b *testing.B, s *memstore.Store, n int, p algo.Policy, fresh bool) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = benchKey(i)
		if !take(b, s, keys[i], p, 1).Allowed {
			b.Fatalf("the first take of %q was denied: keys share buckets", keys[i])
		}
	}
	if fresh {
		for i := range keys {
			keys[i] = benchKey(i)
		}
	}
	return keys
}

// heapPerKey returns the heap that a Store filled with n keys under p
// holds per key, the keys' bytes included: it is filled with strings its
// caller then drops.
func heapPerKey(b *testing.B, n int, p algo.Policy) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		take(b, s, benchKey(i), p, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}
