package memstore_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/memstore"
)

// BenchmarkOps measures each operation on one hot key next to Take, on the
// real clock, as BenchmarkTake's "hot key": issue 14 asks that a refund and
// a reservation cost no more than 1.2× a Take. The bucket (benchPolicy, a
// billion tokens at 1/s) never fills up or runs dry during a run. Besides
// ns/op it reports cpu-ns/op, the CPU time of the benchmark's own thread
// per call, which a loaded machine does not inflate with the time the
// thread waited for a core: compare that one, with benchstat over
// alternating runs (BENCHMARKS.md says how).
func BenchmarkOps(b *testing.B) {
	ctx := context.Background()
	half := benchPolicy.Capacity() / 2
	bench := func(name string, setup int64, op func(s *memstore.Store, key string)) {
		b.Run(name, func(b *testing.B) {
			s := newStore(b, memstore.Config{})
			key := benchKeys(b, s, name, 1)[0]
			take(b, s, key, benchPolicy, setup)
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu := threadCPU()
			for b.Loop() {
				op(s, key)
			}
			if cpu >= 0 {
				b.ReportMetric(float64(threadCPU()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
	bench("take", 0, func(s *memstore.Store, key string) {
		s.Take(ctx, store.Request{Key: key, Policy: benchPolicy, Cost: 1})
	})
	bench("refund", half, func(s *memstore.Store, key string) {
		s.Refund(ctx, store.Request{Key: key, Policy: benchPolicy, Cost: 1})
	})
	bench("takeAtMost", 0, func(s *memstore.Store, key string) {
		s.TakeAtMost(ctx, store.Request{Key: key, Policy: benchPolicy, Cost: 2})
	})
	bench("reserve", 0, func(s *memstore.Store, key string) {
		s.Reserve(ctx, store.Request{Key: key, Policy: benchPolicy, Cost: 1}, 0)
	})
	bench("reserve in debt", benchPolicy.Capacity()-1, func(s *memstore.Store, key string) {
		s.Reserve(ctx, store.Request{Key: key, Policy: benchPolicy, Cost: 1}, benchPolicy.MaxDelay())
	})
	bench("reserve+cancel", benchPolicy.Capacity()-1, func(s *memstore.Store, key string) {
		r, _ := s.Reserve(ctx, store.Request{Key: key, Policy: benchPolicy, Cost: 1}, benchPolicy.MaxDelay())
		s.CancelReservation(ctx, key, benchPolicy, r.Ticket)
	})
}
