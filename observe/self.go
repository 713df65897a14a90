package observe

import (
	"context"
	"sync"

	"github.com/ratebucket/ratebucket/store"
)

// A SelfCounter is a store.Store that counts its own Take decisions for a
// [DecisionCounter], at less cost than the wrapper of [Wrap] can: memstore,
// whose Take is so cheap that a layer of calls around it, with the copies
// of the Result they make and an atomic addition per call, would cost a
// quarter of it. A SelfCounter counts under the locks its Take holds
// anyway, with plain additions.
//
// When [Wrap] wraps a SelfCounter for a DecisionCounter, it builds its
// wrapper as for any store, then returns what CountTakes returns, given
// that wrapper (rest) and a [TakeTap] of it. The returned store.Store must
// answer every operation but Take by calling rest (so that each is
// reported as Wrap documents), be a [FailureReporter] as rest is, and
// Take as follows: when tap.Counting() is false, rest's Take (that call
// is timed, and reported); otherwise the store's own Take, counted once,
// either in one of the tap's slots (see TakeTap.Slot) or by tap.Count.
// Its answers, errors and charges are the store's.
type SelfCounter interface {
	store.Store
	CountTakes(rest store.Store, tap *TakeTap) store.Store
}

// TapSlots is the number of label sets a [SelfCounter] can count in slots
// of its own (see TakeTap.Slot).
const TapSlots = fastSlots

// SlotCounts are the counts of one lock of a [SelfCounter], by TakeTap
// slot and Outcome, kept under that lock.
type SlotCounts [TapSlots][outcomes]uint64

// TakeTap counts the Take decisions of a [SelfCounter] into the counts of
// the wrapper of [Wrap] it was made by. Its methods are safe for
// simultaneous use.
type TakeTap struct {
	w *observed
}

// Counting reports whether the next Take is only counted: if so, the
// store makes it and counts it; if not, it is to be timed, and goes
// through the wrapper, which times, counts and reports it.
func (t *TakeTap) Counting() bool { return t.w.flags.Load() == 0 }

// Slot returns the slot in which the store counts a Take with ctx's labels,
// below TapSlots, or -1 if the label set has none (call Count instead),
// and the Outcome a refusal has under those labels: OutcomeDenied, or
// OutcomeShadowDenied for a shadow limit's call. A store adds 1 to
// its SlotCounts[slot][outcome] under the lock that guards them, and calls
// Next when that count reaches a multiple of some fixed n (the wrapper's
// own counts use 64, memstore 256), so that the wrapper times a call now
// and then.
func (t *TakeTap) Slot(ctx context.Context) (int, Outcome) {
	w := t.w
	l := labelsOf(ctx)
	if l == nil {
		return -1, OutcomeDenied
	}
	deny := OutcomeDenied
	if l.Shadow {
		deny = OutcomeShadowDenied
	}
	i := fastSlot(l.Policy, l.Route)
	if e := w.fast[i].Load(); e != nil && same(e.policy, l.Policy) && same(e.route, l.Route) {
		return i, deny
	}
	w.slowTally(&w.fast[i], l.Policy, l.Route) // claims the slot if free: the next call uses it
	return -1, deny
}

// Next makes the next call to begin a timed one.
func (t *TakeTap) Next() { t.w.flags.Or(nextBit) }

// Count counts one Take with ctx's labels, cost, and its outcome: admitted
// or not, or failed with err, in the wrapper's own counts. A failed call
// is also reported to the Observer, as the wrapper reports one. A store
// calls it for the calls it does not count in a slot, and for every
// failed call.
func (t *TakeTap) Count(ctx context.Context, cost int64, allowed bool, err error) {
	if t.w.counted(ctx, -1, allowed, err) {
		t.w.report(ctx, OpTake, -1, -1, cost, false, true, err)
	}
}

// Collect registers read, which the tap calls whenever the counts are
// exported: read calls add with each of the store's SlotCounts, each read
// under the lock that guards it. A store calls Collect once, from
// CountTakes.
func (t *TakeTap) Collect(read func(add func(*SlotCounts))) {
	w := t.w
	c := w.counts
	c.mu.Lock()
	defer c.mu.Unlock()
	c.local = append(c.local, func(f func(n *tally, out Outcome, k uint64)) {
		read(func(sc *SlotCounts) {
			for i := range sc {
				e := w.fast[i].Load()
				if e == nil {
					continue
				}
				for out, k := range sc[i] {
					if k != 0 {
						f(e.n, Outcome(out), k)
					}
				}
			}
		})
	})
}

// localCounts are the counts a DecisionCounts holds outside its tallies:
// those of the SelfCounters it counts for.
type localCounts struct {
	mu    sync.Mutex
	local []func(f func(n *tally, out Outcome, k uint64))
}

// sums returns the local counts by tally.
func (c *localCounts) sums() map[*tally][outcomes]uint64 {
	c.mu.Lock()
	local := c.local
	c.mu.Unlock()
	if len(local) == 0 {
		return nil
	}
	m := map[*tally][outcomes]uint64{}
	for _, read := range local {
		read(func(n *tally, out Outcome, k uint64) {
			v := m[n]
			v[out] += k
			m[n] = v
		})
	}
	return m
}

// A FailureReporter reports a call that failed before it reached the
// store. Wrap's result implements it (whatever the store observed),
// so that an entry point whose resolver failed (ErrResolve) can report
// the request no store call decided; see [ReportFailure].
type FailureReporter interface {
	// ReportFailure reports a call of op asking for cost, under ctx's
	// labels, that failed with err before reaching the store: a Decision
	// with OutcomeError, counted for a DecisionCounter, and passed on to
	// the store observed if it is a FailureReporter too.
	ReportFailure(ctx context.Context, op Op, cost int64, err error)
}

// ReportFailure reports through s a call of op asking for cost that failed
// with err before reaching s, when s is a [FailureReporter] (a store made
// by [Wrap]); otherwise it does nothing. ratebucket.Limiter and httplimit
// call it when a resolver fails, so that the metrics of failed decisions
// include the requests no policy could be found for.
func ReportFailure(ctx context.Context, s store.Store, op Op, cost int64, err error) {
	if r, ok := s.(FailureReporter); ok && err != nil {
		r.ReportFailure(ctx, op, cost, err)
	}
}

// ReportFailure implements FailureReporter.
func (w *observed) ReportFailure(ctx context.Context, op Op, cost int64, err error) {
	w.report(ctx, op, -1, -1, cost, false, false, err)
	ReportFailure(ctx, w.s, op, cost, err)
}
