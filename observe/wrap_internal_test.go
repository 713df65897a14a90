package observe

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// full implements store.Store, counting calls; spin
// makes each Take take at least that long on the monotonic clock.
type full struct {
	calls atomic.Int64
	spin  time.Duration
}

func (f *full) Take(context.Context, store.Request) (algo.Result, error) {
	f.calls.Add(1)
	for t := time.Now(); time.Since(t) < f.spin; {
	}
	return algo.Result{Allowed: true}, nil
}
func (f *full) TakeMulti(context.Context, []store.Request) (store.MultiResult, error) {
	f.calls.Add(1)
	return store.MultiResult{Allowed: true}, nil
}
func (f *full) Refund(context.Context, store.Request) (algo.Result, error) {
	f.calls.Add(1)
	return algo.Result{}, nil
}
func (f *full) RefundMulti(context.Context, []store.Request) ([]algo.Result, error) {
	f.calls.Add(1)
	return nil, nil
}
func (f *full) TakeAtMost(context.Context, store.Request) (int64, algo.Result, error) {
	f.calls.Add(1)
	return 0, algo.Result{}, nil
}
func (f *full) Reserve(context.Context, store.Request, time.Duration) (algo.Reservation, error) {
	f.calls.Add(1)
	return algo.Reservation{}, nil
}
func (f *full) CancelReservation(context.Context, string, algo.Policy, algo.Ticket) (bool, algo.Result, error) {
	f.calls.Add(1)
	return false, algo.Result{}, nil
}
func (f *full) Hold(context.Context, store.Request, time.Duration) (algo.Hold, algo.Result, error) {
	f.calls.Add(1)
	return algo.Hold{}, algo.Result{}, nil
}
func (f *full) Settle(context.Context, string, algo.Policy, algo.Hold, int64) (algo.Settlement, error) {
	f.calls.Add(1)
	return algo.Settlement{}, nil
}
func (f *full) AcquireLease(context.Context, string, algo.LeasePolicy, string) (algo.LeaseResult, error) {
	f.calls.Add(1)
	return algo.LeaseResult{}, nil
}
func (f *full) ReleaseLease(context.Context, string, string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}
func (f *full) RenewLease(context.Context, string, algo.LeasePolicy, string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}
func (f *full) Close() error { f.calls.Add(1); return nil }

// callAll calls every method of s once.
func callAll(s store.Store) {
	ctx := context.Background()
	r := store.Request{Key: "k"}
	s.Take(ctx, r)
	s.TakeMulti(ctx, nil)
	s.TakeAtMost(ctx, r)
	s.Refund(ctx, r)
	s.RefundMulti(ctx, nil)
	s.Reserve(ctx, r, 0)
	s.CancelReservation(ctx, "k", algo.Policy{}, algo.Ticket{})
	s.Hold(ctx, r, 0)
	s.Settle(ctx, "k", algo.Policy{}, algo.Hold{}, 0)
	s.AcquireLease(ctx, "k", algo.LeasePolicy{}, "id")
	s.ReleaseLease(ctx, "k", "id")
	s.RenewLease(ctx, "k", algo.LeasePolicy{}, "id")
	s.Close()
}

// TestObserveForwardsEveryMethod: the wrapper of Wrap passes every call to
// the store it wraps, once.
func TestObserveForwardsEveryMethod(t *testing.T) {
	f := &full{}
	var events atomic.Int64
	s := Wrap(f, "x", Funcs{Decision: func(context.Context, Decision) { events.Add(1) }})
	callAll(s)
	if n := f.calls.Load(); n != 13 {
		t.Errorf("%d calls reached the store, want 13 (every method once)", n)
	}
	if n := events.Load(); n != 6 {
		t.Errorf("%d decisions reported, want 6 (the six operations that decide)", n)
	}
}

// TestObserveTiming checks when calls are timed: every call of a store
// whose calls take slowCall or more, and one in every of a fast one.
func TestObserveTiming(t *testing.T) {
	f := &full{spin: 2 * slowCall}
	var timed, calls int
	w := &observed{s: f, name: "x", every: sampleOneIn}
	w.flags.Store(pushBit)
	w.o = Funcs{Decision: func(_ context.Context, d Decision) {
		calls++
		if d.Timed {
			timed++
			if d.Latency < 0 || (f.spin > 0 && d.Latency < f.spin) {
				t.Errorf("Latency %v, the call took at least %v", d.Latency, f.spin)
			}
		} else if d.Latency != 0 {
			t.Errorf("Latency %v on a call not timed", d.Latency)
		}
	}}
	s := store.Store(w)
	ctx := context.Background()
	w.flags.Or(slowBit) // as after a slow call
	for range 10 {
		s.Take(ctx, store.Request{Key: "k", Policy: algo.Policy{}, Cost: 1})
	}
	if timed != 10 {
		t.Fatalf("a slow store: %d of 10 calls timed, want every one", timed)
	}
	f.spin, timed, calls = 0, 0, 0
	for range 64 * 100 {
		s.Take(ctx, store.Request{Key: "k", Policy: algo.Policy{}, Cost: 1})
	}
	// The first fast call, timed, makes the store fast; then 1 in 64 at
	// random: 100 expected, 10 the standard deviation.
	if timed < 40 || timed > 200 {
		t.Fatalf("a fast store: %d of %d calls timed, want about 1 in %d", timed, calls, sampleOneIn)
	}
	if w.slow() {
		t.Fatal("still slow after fast calls")
	}
}

// BenchmarkObserveLayers measures what each layer of an observed call
// costs over a store that does nothing: the observed methods and the
// report.
func BenchmarkObserveLayers(b *testing.B) {
	f := nopStore{}
	w := &observed{s: f, name: "x", o: Funcs{}, every: sampleOneIn}
	w.flags.Store(pushBit)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		s    store.Store
	}{{"bare", f}, {"observed", w}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.s.Take(ctx, store.Request{Key: "k", Policy: algo.Policy{}, Cost: 1})
			}
		})
	}
}

// nopStore admits every Take and does nothing else (its other methods are
// not for use).
type nopStore struct{ store.Store }

func (nopStore) Take(context.Context, store.Request) (algo.Result, error) {
	return algo.Result{Allowed: true}, nil
}
