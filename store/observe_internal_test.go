package store

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// full implements Store and every optional interface, counting calls; spin
// makes each Take take at least that long on the monotonic clock.
type full struct {
	calls atomic.Int64
	spin  time.Duration
}

func (f *full) Take(context.Context, string, algo.Policy, int64) (algo.Result, error) {
	f.calls.Add(1)
	for t := time.Now(); time.Since(t) < f.spin; {
	}
	return algo.Result{Allowed: true}, nil
}
func (f *full) TakeMulti(context.Context, []Request) (MultiResult, error) {
	f.calls.Add(1)
	return MultiResult{Allowed: true}, nil
}
func (f *full) Refund(context.Context, string, algo.Policy, int64) (algo.Result, error) {
	f.calls.Add(1)
	return algo.Result{}, nil
}
func (f *full) RefundMulti(context.Context, []Request) ([]algo.Result, error) {
	f.calls.Add(1)
	return nil, nil
}
func (f *full) TakeAtMost(context.Context, string, algo.Policy, int64) (int64, algo.Result, error) {
	f.calls.Add(1)
	return 0, algo.Result{}, nil
}
func (f *full) Reserve(context.Context, string, algo.Policy, int64, time.Duration) (algo.Reservation, error) {
	f.calls.Add(1)
	return algo.Reservation{}, nil
}
func (f *full) CancelReservation(context.Context, string, algo.Policy, algo.Ticket) (bool, algo.Result, error) {
	f.calls.Add(1)
	return false, algo.Result{}, nil
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

// shows returns the bit set of the optional interfaces s implements, in
// the order of optional, calling each method once.
func shows(s Store) (mask uint) {
	ctx := context.Background()
	if m, ok := s.(MultiTaker); ok {
		mask |= 1 << 0
		m.TakeMulti(ctx, nil)
	}
	if r, ok := s.(Refunder); ok {
		mask |= 1 << 1
		r.Refund(ctx, "k", algo.Policy{}, 0)
		r.RefundMulti(ctx, nil)
	}
	if a, ok := s.(AtMostTaker); ok {
		mask |= 1 << 2
		a.TakeAtMost(ctx, "k", algo.Policy{}, 0)
	}
	if r, ok := s.(Reserver); ok {
		mask |= 1 << 3
		r.Reserve(ctx, "k", algo.Policy{}, 0, 0)
		r.CancelReservation(ctx, "k", algo.Policy{}, algo.Ticket{})
	}
	if l, ok := s.(Leaser); ok {
		mask |= 1 << 4
		l.AcquireLease(ctx, "k", algo.LeasePolicy{}, "id")
		l.ReleaseLease(ctx, "k", "id")
		l.RenewLease(ctx, "k", algo.LeasePolicy{}, "id")
	}
	if c, ok := s.(io.Closer); ok {
		mask |= 1 << 5
		c.Close()
	}
	s.Take(ctx, "k", algo.Policy{}, 0)
	return mask
}

// methods is how many calls shows makes on a store showing mask.
func methods(mask uint) int64 {
	per := [...]int64{1, 2, 1, 2, 3, 1}
	n := int64(1)
	for i, c := range per {
		if mask&(1<<i) != 0 {
			n += c
		}
	}
	return n
}

// TestObserveShowsExactlyTheInterfaces builds, for every subset of the
// optional interfaces, a store implementing exactly that subset, and checks
// that Observe's wrapper implements exactly the same subset and forwards
// every method: a wrapper that hid an interface (a MultiTaker seen as a
// plain Store) would change what callers do, and one that showed an
// interface its store lacks would turn ErrUnsupported into a panic.
func TestObserveShowsExactlyTheInterfaces(t *testing.T) {
	if len(optional) > 30 {
		t.Fatal("too many optional interfaces for a bit set")
	}
	for mask := range uint(1) << len(optional) {
		f := &full{}
		// wrap of an unobserving wrapper: a store of exactly mask.
		w := &observed{s: f, o: ObserverFuncs{}, every: 1}
		w.flags.Store(pushBit)
		w.optional()
		base := w.wrap(mask)
		if got := shows(base); got != mask {
			t.Fatalf("wrap(%06b) shows %06b", mask, got)
		}
		var events atomic.Int64
		s := Observe(base, "x", ObserverFuncs{Decision: func(context.Context, Decision) { events.Add(1) }})
		f.calls.Store(0)
		if got := shows(s); got != mask {
			t.Errorf("Observe(a store of %06b) shows %06b", mask, got)
		}
		if n := f.calls.Load(); n != methods(mask) {
			t.Errorf("mask %06b: %d calls reached the store, want %d", mask, n, methods(mask))
		}
	}
}

// TestObserveTiming checks when calls are timed: every call of a store
// whose calls take slowCall or more, and one in every of a fast one.
func TestObserveTiming(t *testing.T) {
	f := &full{spin: 2 * slowCall}
	var timed, calls int
	w := &observed{s: f, name: "x", every: sampleOneIn}
	w.flags.Store(pushBit)
	w.o = ObserverFuncs{Decision: func(_ context.Context, d Decision) {
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
	s := w.wrap(w.optional())
	ctx := context.Background()
	w.flags.Or(slowBit) // as after a slow call
	for range 10 {
		s.Take(ctx, "k", algo.Policy{}, 1)
	}
	if timed != 10 {
		t.Fatalf("a slow store: %d of 10 calls timed, want every one", timed)
	}
	f.spin, timed, calls = 0, 0, 0
	for range 64 * 100 {
		s.Take(ctx, "k", algo.Policy{}, 1)
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
// costs over a store that does nothing: the wrapper's struct (which shows
// the optional interfaces), the observed methods, and the report.
func BenchmarkObserveLayers(b *testing.B) {
	f := nopStore{}
	w := &observed{s: f, name: "x", o: ObserverFuncs{}, every: sampleOneIn}
	w.flags.Store(pushBit)
	shown := w.wrap(w.optional())
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		s    Store
	}{{"bare", f}, {"observed", w}, {"wrapped", shown}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.s.Take(ctx, "k", algo.Policy{}, 1)
			}
		})
	}
}

// nopStore admits everything and does nothing else.
type nopStore struct{}

func (nopStore) Take(context.Context, string, algo.Policy, int64) (algo.Result, error) {
	return algo.Result{Allowed: true}, nil
}
