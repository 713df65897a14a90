package algo_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/algo"
)

// sink keeps the compiler from dropping the benchmarked calls.
var sink algo.Result

// BenchmarkTokenBucketTake measures one Take on an existing bucket that
// refills between calls (the common path: refill, admit or deny).
func BenchmarkTokenBucketTake(b *testing.B) {
	p := algo.PerSecond(1000).Burst(100)
	var s algo.State
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 700 // µs: a little under the rate, so some takes are denied
		s, sink, _ = algo.TokenBucket{}.Take(p, s, now, 1)
	}
}

// BenchmarkTake compares the three algorithms on the same traffic, called
// through the Algorithm interface as stores call them.
func BenchmarkTake(b *testing.B) {
	p := algo.PerSecond(1000).Burst(100)
	for _, a := range algorithms {
		b.Run(a.Name(), func(b *testing.B) {
			var s algo.State
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 700
				s, sink, _ = a.Take(p, s, now, 1)
			}
		})
	}
}

// TestTakeAllocs: the hot path allocates nothing, for every algorithm,
// admitted or denied, called directly or through the interface.
func TestTakeAllocs(t *testing.T) {
	p := algo.PerSecond(1000).Burst(100)
	for _, a := range algorithms {
		var s algo.State
		now := t0
		allocs := testing.AllocsPerRun(1000, func() {
			now += 700
			s, sink, _ = a.Take(p, s, now, 1)
			_, sink, _ = a.Take(p, s, now, 100) // denied
		})
		if allocs != 0 {
			t.Errorf("%s.Take: %v allocations per call, want 0", a.Name(), allocs)
		}
	}
	var s algo.State
	if allocs := testing.AllocsPerRun(1000, func() { s, sink, _ = algo.TokenBucket{}.Take(p, s, t0, 1) }); allocs != 0 {
		t.Errorf("TokenBucket{}.Take: %v allocations per call, want 0", allocs)
	}
}
