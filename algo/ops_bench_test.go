package algo_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/algo"
)

// BenchmarkOps measures each operation on a bucket that refills between
// calls, next to Take on the same traffic: a reservation and its cancel,
// a refund after a take, a partial grant.
func BenchmarkOps(b *testing.B) {
	p := algo.PerSecond(1000).Burst(100)
	var tb algo.TokenBucket
	run := func(name string, op func(s algo.State, now int64) algo.State) {
		b.Run(name, func(b *testing.B) {
			var s algo.State
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 700
				s = op(s, now)
			}
		})
	}
	run("take", func(s algo.State, now int64) algo.State { s, sink, _ = tb.Take(p, s, now, 1); return s })
	run("refund", func(s algo.State, now int64) algo.State {
		s, sink, _ = tb.Take(p, s, now, 2)
		s, sink, _ = tb.Refund(p, s, now, 1)
		return s
	})
	run("takeAtMost", func(s algo.State, now int64) algo.State { s, _, sink, _ = tb.TakeAtMost(p, s, now, 2); return s })
	run("reserve+cancel", func(s algo.State, now int64) algo.State {
		s, r, _ := tb.Reserve(p, s, now, 2, 10_000)
		s, _, sink, _ = tb.Cancel(p, s, now, r.Ticket)
		return s
	})
}

// TestOpsAllocs: the operations allocate nothing.
func TestOpsAllocs(t *testing.T) {
	p := algo.PerSecond(1000).Burst(100)
	var tb algo.TokenBucket
	var s algo.State
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now += 700
		s, sink, _ = tb.Refund(p, s, now, 1)
		s, _, sink, _ = tb.TakeAtMost(p, s, now, 3)
		next, r, _ := tb.Reserve(p, s, now, 5, 100_000)
		s, _, sink, _ = tb.Cancel(p, next, now, r.Ticket)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per round, want 0", allocs)
	}
}
