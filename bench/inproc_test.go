package bench

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/internal/benchkeys"
)

// numKeys is the size of the distinct-key set.
const numKeys = 100_000

// hotKey is the key of the single-key benchmarks.
const hotKey = "rl:user:000000000042"

// distinctKeys are the 100k keys, 20 bytes each, shared by every
// implementation.
var distinctKeys = Keys(numKeys, "")

// TestKeys checks the shared key set: 100k distinct keys of KeyLen bytes.
func TestKeys(t *testing.T) {
	seen := make(map[string]bool, len(distinctKeys))
	for _, k := range distinctKeys {
		if len(k) != KeyLen {
			t.Fatalf("key %q is %d bytes, want %d", k, len(k), KeyLen)
		}
		seen[k] = true
	}
	if len(seen) != numKeys {
		t.Fatalf("%d distinct keys, want %d", len(seen), numKeys)
	}
}

// open builds impl under p and closes it when the test ends.
func open(tb testing.TB, impl Impl, p Policy) Limiter {
	tb.Helper()
	return mustOpen(tb, impl.Name, func() (Limiter, func() error, error) { return impl.New(p) })
}

// mustOpen calls newFn, fails tb on error and releases the limiter when tb
// ends.
func mustOpen(tb testing.TB, name string, newFn func() (Limiter, func() error, error)) Limiter {
	tb.Helper()
	l, closeFn, err := newFn()
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	tb.Cleanup(func() {
		if err := closeFn(); err != nil {
			tb.Errorf("%s: close: %v", name, err)
		}
	})
	return l
}

// TestSamePolicy checks that every implementation enforces the same
// policy: a fresh key of burst 100 admits exactly 100 calls at once.
func TestSamePolicy(t *testing.T) {
	for _, impl := range InProc {
		t.Run(impl.Name, func(t *testing.T) {
			checkBurst(t, open(t, impl, Article), hotKey)
		})
	}
}

// checkBurst fails t unless 150 calls at once on a fresh key of l, under
// the Article policy, admit its burst of 100, plus at most what 2/s refills
// while they run (nothing, unless the machine stalls).
func checkBurst(t *testing.T, l Limiter, key string) {
	t.Helper()
	admitted, start := 0, time.Now()
	for range 150 {
		ok, err := l.Allow(key)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if refill := int(math.Ceil(2 * time.Since(start).Seconds())); admitted < 100 || admitted > 100+refill {
		t.Fatalf("admitted %d of 150 calls at once, want the burst of 100 (+%d refilled)", admitted, refill)
	}
}

// TestSpread checks that every implementation keeps one bucket per key
// over the benchmark's key set.
func TestSpread(t *testing.T) {
	for _, impl := range InProc {
		t.Run(impl.Name, func(t *testing.T) {
			if err := CheckSpread(open(t, impl, Deny), distinctKeys); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRatebucketZeroAllocs pins the claim of the tables: a Take on an
// existing key of ratebucket's memstore allocates nothing, admitted or
// denied.
func TestRatebucketZeroAllocs(t *testing.T) {
	for _, p := range []Policy{Admit, Deny} {
		t.Run(p.Name, func(t *testing.T) {
			l := open(t, InProc[0], p)
			if _, err := l.Allow(hotKey); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(1000, func() { l.Allow(hotKey) }); n != 0 {
				t.Fatalf("Take allocates %v times per call, want 0", n)
			}
		})
	}
}

// eachImpl runs bench once per policy and implementation, as
// policy=.../impl=... sub-benchmarks.
func eachImpl(b *testing.B, bench func(b *testing.B, l Limiter, p Policy)) {
	for _, p := range []Policy{Admit, Deny} {
		for _, impl := range InProc {
			b.Run("policy="+p.Name+"/impl="+impl.Name, func(b *testing.B) {
				b.ReportAllocs()
				bench(b, open(b, impl, p), p)
			})
		}
	}
}

// allow is one measured call; an error ends the benchmark.
func allow(b *testing.B, l Limiter, key string) bool {
	ok, err := l.Allow(key)
	if err != nil {
		b.Fatal(err)
	}
	return ok
}

// reportAdmitted reports the fraction of measured calls admitted, so the
// tables show which path each row exercised.
func reportAdmitted(b *testing.B, admitted, calls int64) {
	if calls > 0 {
		b.ReportMetric(float64(admitted)/float64(calls), "admit/op")
	}
}

// BenchmarkHotKey takes from one key, again and again.
func BenchmarkHotKey(b *testing.B) {
	eachImpl(b, func(b *testing.B, l Limiter, _ Policy) {
		allow(b, l, hotKey) // the Deny policy's one token goes here
		var admitted, calls int64
		for b.Loop() {
			if allow(b, l, hotKey) {
				admitted++
			}
			calls++
		}
		reportAdmitted(b, admitted, calls)
	})
}

// prefill takes once from every key before the timer starts, so each
// measured call finds its key's bucket in place, and returns the heap bytes
// the limiter holds per key (reported after the loop: b.Loop and
// ResetTimer clear metrics reported before). Under Deny each key must admit its one call:
// otherwise keys share buckets.
func prefill(b *testing.B, l Limiter, p Policy) (heapPerKey float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	admitted := 0
	for _, k := range distinctKeys {
		if allow(b, l, k) {
			admitted++
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if admitted != len(distinctKeys) {
		b.Fatalf("pre-fill admitted %d of %d distinct keys under %s: keys share buckets", admitted, len(distinctKeys), p.Name)
	}
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / numKeys
}

// BenchmarkDistinctKeys takes from the 100k pre-filled keys in turn.
func BenchmarkDistinctKeys(b *testing.B) { walkKeys(b, false, stretch) }

// BenchmarkParallelDistinctKeys takes from the 100k pre-filled keys from
// GOMAXPROCS goroutines, each walking the whole set from its own offset,
// 7919 keys apart: each bucket is taken from by every goroutine in turn.
func BenchmarkParallelDistinctKeys(b *testing.B) {
	walkKeys(b, true, func(g, _ int) benchkeys.Walk { return benchkeys.From((g+1)*7919, numKeys) })
}

// walkKeys takes from the 100k pre-filled keys in the order of the walk
// that mk returns for goroutine g of procs: from one goroutine (g 0 of 1),
// or with parallel set from GOMAXPROCS goroutines under RunParallel.
func walkKeys(b *testing.B, parallel bool, mk func(g, procs int) benchkeys.Walk) {
	eachImpl(b, func(b *testing.B, l Limiter, p Policy) {
		heap := prefill(b, l, p)
		var admitted, calls atomic.Int64
		if !parallel {
			w := mk(0, 1)
			var a, c int64
			for b.Loop() {
				if allow(b, l, distinctKeys[w.Next()]) {
					a++
				}
				c++
			}
			admitted.Add(a)
			calls.Add(c)
		} else {
			procs := runtime.GOMAXPROCS(0)
			b.ResetTimer()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				w := mk(int(next.Add(1)-1), procs)
				var a, c int64
				for pb.Next() {
					ok, err := l.Allow(distinctKeys[w.Next()])
					if err != nil {
						b.Error(err) // FailNow may not run off the benchmark goroutine
						return
					}
					if ok {
						a++
					}
					c++
				}
				admitted.Add(a)
				calls.Add(c)
			})
		}
		reportAdmitted(b, admitted.Load(), calls.Load())
		b.ReportMetric(heap, "heapB/key")
	})
}

// stretch walks goroutine g's own stretch of the key set in order.
func stretch(g, procs int) benchkeys.Walk { return benchkeys.Stretch(g, procs, numKeys) }

// random walks the whole key set at random, in goroutine g's own order.
func random(g, _ int) benchkeys.Walk { return benchkeys.Random(g, numKeys) }

// BenchmarkParallelStretches takes from the 100k pre-filled keys from
// GOMAXPROCS goroutines, each walking its own stretch of the set (a
// GOMAXPROCS-th of it) in order, so that no two take from one bucket.
func BenchmarkParallelStretches(b *testing.B) { walkKeys(b, true, stretch) }

// BenchmarkRandomKeys takes from the 100k pre-filled keys in random order.
func BenchmarkRandomKeys(b *testing.B) { walkKeys(b, false, random) }

// BenchmarkParallelRandomKeys takes from the 100k pre-filled keys from
// GOMAXPROCS goroutines, each in a random order of its own.
func BenchmarkParallelRandomKeys(b *testing.B) { walkKeys(b, true, random) }
