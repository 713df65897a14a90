package observe

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/obscache"
	"github.com/ratebucket/ratebucket/store"
)

// active is set by the first Wrap with an Observer.
var active atomic.Bool

// Active reports whether any store of this process has been given an
// Observer with [Wrap]. Entry points check it before they build
// [Labels], so that a process that observes nothing pays nothing.
func Active() bool { return active.Load() }

// Timing: see Decision.Latency.
const (
	slowCall    = 10 * time.Microsecond
	sampleOneIn = 64 // a power of two
)

// epoch is the origin of the monotonic readings: time.Since(epoch) reads
// only the monotonic clock, half the cost of time.Now.
var epoch = time.Now()

// observed is the wrapper Wrap returns.
type observed struct {
	s     store.Store
	name  string
	o     Observer
	every uint32 // sampleOneIn; 1 in tests that time every call
	// flags: slowBit, nextBit, pushBit. One load tells a DecisionCounter's
	// call that it is neither timed nor pushed.
	flags atomic.Uint32
	// counts are the store's decisions, for a DecisionCounter; nil for
	// another Observer. fast finds a label set's counts there by the
	// addresses of its strings (see tally), bare those of calls without
	// labels.
	counts *DecisionCounts
	fast   [fastSlots]atomic.Pointer[fastTally]
	bare   atomic.Pointer[tally]
}

// The bits of observed.flags.
const (
	slowBit = 1 << iota // the last timed call took slowCall or more
	nextBit             // with counts: time the next call to begin
	pushBit             // no counts: report every call
)

// Wrap returns s reporting its calls to o: a [Decision] for every call
// of an operation that decides (Take, TakeMulti, TakeAtMost, Reserve,
// AcquireLease) and for every call of the others that fails, under the
// store label name ("redis", "memory": a name from configuration). Labels
// in the call's context ([WithLabels]) name the policy and route.
//
// The result is a store.Store and a [FailureReporter], for the calls that fail
// above s; it changes no
// answer, no error and no charge: Close closes s. Other methods of s's
// concrete type (redisstore's Reset, say) are not reachable through it:
// keep s for those.
//
// A nil o returns s itself: without an Observer the hot path is exactly
// s's. With one, a call costs what o spends, an interface call and, now
// and then, two readings of the monotonic clock (see Decision.Latency);
// with a [DecisionCounter], an atomic addition instead of what o spends
// and the interface call, but for the calls timed and the errors. Call
// Wrap once per store, when the program starts: a DecisionCounter
// keeps every store's counts for as long as it lives. Wrap the
// outermost store (a hybrid.Fallback rather than what it wraps): the
// decisions it reports are the ones callers act on.
func Wrap(s store.Store, name string, o Observer) store.Store {
	if s == nil || o == nil {
		return s
	}
	active.Store(true)
	w := &observed{s: s, name: name, o: o, every: sampleOneIn}
	w.flags.Store(slowBit) // the first call is timed, and tells which kind s is
	if dc, ok := o.(DecisionCounter); ok {
		w.counts = new(DecisionCounts)
		dc.CountDecisions(w.counts)
	} else {
		w.flags.Or(pushBit)
	}
	if sc, ok := s.(SelfCounter); ok && w.counts != nil {
		return sc.CountTakes(w, &TakeTap{w})
	}
	return w
}

// begin starts timing a call, if this one is timed: the monotonic reading,
// or -1.
func (w *observed) begin() time.Duration {
	f := w.flags.Load()
	switch {
	case f&slowBit != 0:
	case f&pushBit == 0:
		if !w.takeTurn() {
			return -1
		}
	case rand.Uint32()&(w.every-1) != 0:
		return -1
	}
	return time.Since(epoch)
}

// takeTurn clears nextBit, and reports whether this call did.
func (w *observed) takeTurn() bool {
	for f := w.flags.Load(); f&nextBit != 0; f = w.flags.Load() {
		if w.flags.CompareAndSwap(f, f&^nextBit) {
			return true
		}
	}
	return false
}

// slow reports whether the last timed call took slowCall or more.
func (w *observed) slow() bool { return w.flags.Load()&slowBit != 0 }

// tally is the count of one label set by Outcome, in a DecisionCounts.
type tally = [outcomes]atomic.Uint64

const (
	fastBits  = 6
	fastSlots = 1 << fastBits
)

// fastTally is a label set of a wrapper's counts, found by its strings'
// addresses: label values come from configuration, so each call of one
// label set carries the very same strings, and comparing two pointers
// and two lengths costs less than hashing the strings.
type fastTally struct {
	policy, route string // held, so their addresses cannot be reused
	n             *tally
}

// tally returns the counts of request i of the call (-1: a single call)
// under ctx's labels, and the outcome of a denial: OutcomeShadowDenied
// for a shadow limit's call.
func (w *observed) tally(ctx context.Context, i int) (*tally, Outcome) {
	l := labelsOf(ctx)
	if l == nil {
		return w.bareTally(), OutcomeDenied
	}
	deny := OutcomeDenied
	if l.Shadow {
		deny = OutcomeShadowDenied
	}
	policy := l.Policy
	if i >= 0 && i < len(l.Policies) {
		policy = l.Policies[i]
	}
	f := &w.fast[fastSlot(policy, l.Route)]
	if e := f.Load(); e != nil && same(e.policy, policy) && same(e.route, l.Route) {
		return e.n, deny
	}
	return w.slowTally(f, policy, l.Route), deny
}

// fastSlot returns the index in observed.fast of a label set: one
// multiplication of the strings' addresses and lengths.
func fastSlot(policy, route string) int {
	pp, rp := uintptr(unsafe.Pointer(unsafe.StringData(policy))), uintptr(unsafe.Pointer(unsafe.StringData(route)))
	return int(uint64(pp^rp<<1^uintptr(len(policy))^uintptr(len(route))<<32) * 0x9e3779b97f4a7c15 >> (64 - fastBits))
}

// bareTally returns the counts of the calls without labels.
func (w *observed) bareTally() *tally {
	if n := w.bare.Load(); n != nil {
		return n
	}
	n := w.counts.c.Get(obscache.Key{Store: w.name})
	w.bare.Store(n)
	return n
}

// slowTally finds the counts of a label set in the map, and claims the
// fast slot f for it if f is free.
func (w *observed) slowTally(f *atomic.Pointer[fastTally], policy, route string) *tally {
	n := w.counts.c.Get(obscache.Key{Policy: policy, Route: route, Store: w.name})
	if f.Load() == nil {
		f.CompareAndSwap(nil, &fastTally{policy, route, n}) // at most fastSlots allocations, ever
	}
	return n
}

// same reports whether a and b are the same string: one length at one
// address, so equal (a string's bytes never change).
func same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// report sends the event of a call of request i (-1: a single call),
// begun at t0 (see begin), that admitted or not, or failed with err. For
// a DecisionCounter it counts the call first, unless counted, and sends
// only timed calls and errors. The event is built in place and passed
// once: it is large enough for copies to show beside a memstore Take.
func (w *observed) report(ctx context.Context, op Op, t0 time.Duration, i int, cost int64, allowed, counted bool, err error) {
	if w.counts != nil && !counted {
		w.counted(ctx, i, allowed, err)
	}
	if w.counts != nil && t0 < 0 && err == nil {
		return
	}
	l := labelsOf(ctx)
	var d Decision
	d.Op, d.Store, d.Cost, d.Err, d.Counted = op, w.name, cost, err, w.counts != nil
	switch {
	case err != nil:
		d.Outcome = OutcomeError
	case allowed:
		d.Outcome = OutcomeAllowed
	case l != nil && l.Shadow:
		d.Outcome = OutcomeShadowDenied
	default:
		d.Outcome = OutcomeDenied
	}
	if t0 >= 0 {
		d.Latency, d.Timed = time.Since(epoch)-t0, true
		if slow := d.Latency >= slowCall; slow != w.slow() {
			if slow {
				w.flags.Or(slowBit)
			} else {
				w.flags.And(^uint32(slowBit))
			}
		}
	}
	if l != nil {
		d.Route, d.Policy = l.Route, l.policy(i)
	}
	w.o.ObserveDecision(ctx, d)
}

// failed reports a failed call of an operation that does not decide.
func (w *observed) failed(ctx context.Context, op Op, t0 time.Duration, cost int64, err error) {
	if err != nil {
		w.report(ctx, op, t0, 0, cost, false, false, err)
	}
}

// The operations that decide on one key, for a DecisionCounter, count
// the call and report only the calls timed and the errors. The fast path
// is for a call not timed: one load and branch before the store call, so
// that the arguments go to it as they came, then the count.

// onlyCount reports whether a call is counted only: the Observer is a
// DecisionCounter, and the call is not to be timed.
func (w *observed) onlyCount() bool { return w.flags.Load() == 0 }

// counted counts a call of request i (-1: a single call) under ctx's
// labels that admitted or not, or failed with err, for a
// DecisionCounter, and reports whether it failed. After every 64th count
// of a label set and outcome, it gives the turn to be timed to the next
// call to begin.
func (w *observed) counted(ctx context.Context, i int, allowed bool, err error) bool {
	n, out := w.tally(ctx, i)
	if err != nil {
		out = OutcomeError
	} else if allowed {
		out = OutcomeAllowed
	}
	if n[out].Add(1)&uint64(w.every-1) == 0 {
		w.flags.Or(nextBit)
	}
	return err != nil
}

func (w *observed) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	cost := req.Cost
	if !w.onlyCount() {
		t0 := w.begin()
		res, err := w.s.Take(ctx, req)
		w.report(ctx, OpTake, t0, -1, cost, res.Allowed, false, err)
		return res, err
	}
	res, err := w.s.Take(ctx, req)
	if w.counted(ctx, -1, res.Allowed, err) {
		w.report(ctx, OpTake, -1, -1, cost, false, true, err)
	}
	return res, err
}

func (w *observed) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	t0 := w.begin()
	mr, err := w.s.TakeMulti(ctx, reqs)
	if errors.Is(err, store.ErrNotTogether) {
		// Not a decision: the caller takes the keys one by one, and
		// those Takes are reported.
		return mr, err
	}
	i := decider(mr)
	var cost int64
	if i < len(reqs) {
		cost = reqs[i].Cost
	}
	w.report(ctx, OpTakeMulti, t0, i, cost, mr.Allowed, false, err)
	return mr, err
}

// decider returns the index of the request that decided mr: the one that
// denied, or the one closest to denying; 0 for an error.
func decider(mr store.MultiResult) int {
	if !mr.Allowed && mr.Denied >= 0 {
		return mr.Denied
	}
	i := 0
	for j, r := range mr.Results {
		if r.Remaining < mr.Results[i].Remaining {
			i = j
		}
	}
	return i
}

func (w *observed) TakeAtMost(ctx context.Context, req store.Request) (int64, algo.Result, error) {
	n := req.Cost
	if !w.onlyCount() {
		t0 := w.begin()
		g, res, err := w.s.TakeAtMost(ctx, req)
		w.report(ctx, OpTakeAtMost, t0, -1, n, res.Allowed, false, err)
		return g, res, err
	}
	g, res, err := w.s.TakeAtMost(ctx, req)
	if w.counted(ctx, -1, res.Allowed, err) {
		w.report(ctx, OpTakeAtMost, -1, -1, n, false, true, err)
	}
	return g, res, err
}

func (w *observed) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	cost := req.Cost
	if !w.onlyCount() {
		t0 := w.begin()
		r, err := w.s.Reserve(ctx, req, maxWait)
		w.report(ctx, OpReserve, t0, -1, cost, r.Allowed, false, err)
		return r, err
	}
	r, err := w.s.Reserve(ctx, req, maxWait)
	if w.counted(ctx, -1, r.Allowed, err) {
		w.report(ctx, OpReserve, -1, -1, cost, false, true, err)
	}
	return r, err
}

func (w *observed) Hold(ctx context.Context, req store.Request, ttl time.Duration) (algo.Hold, algo.Result, error) {
	cost := req.Cost
	if !w.onlyCount() {
		t0 := w.begin()
		h, res, err := w.s.Hold(ctx, req, ttl)
		w.report(ctx, OpHold, t0, -1, cost, res.Allowed, false, err)
		return h, res, err
	}
	h, res, err := w.s.Hold(ctx, req, ttl)
	if w.counted(ctx, -1, res.Allowed, err) {
		w.report(ctx, OpHold, -1, -1, cost, false, true, err)
	}
	return h, res, err
}

func (w *observed) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error) {
	t0 := w.begin()
	res, err := w.s.Settle(ctx, key, p, h, actual)
	w.failed(ctx, OpSettle, t0, actual, err)
	return res, err
}

func (w *observed) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	if !w.onlyCount() {
		t0 := w.begin()
		res, err := w.s.AcquireLease(ctx, key, p, id)
		w.report(ctx, OpAcquireLease, t0, -1, 1, res.Allowed, false, err)
		return res, err
	}
	res, err := w.s.AcquireLease(ctx, key, p, id)
	if w.counted(ctx, -1, res.Allowed, err) {
		w.report(ctx, OpAcquireLease, -1, -1, 1, false, true, err)
	}
	return res, err
}

func (w *observed) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	n := req.Cost
	t0 := w.begin()
	res, err := w.s.Refund(ctx, req)
	w.failed(ctx, OpRefund, t0, n, err)
	return res, err
}

func (w *observed) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	t0 := w.begin()
	res, err := w.s.RefundMulti(ctx, reqs)
	w.failed(ctx, OpRefundMulti, t0, 0, err)
	return res, err
}

func (w *observed) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	t0 := w.begin()
	ok, res, err := w.s.CancelReservation(ctx, key, p, t)
	w.failed(ctx, OpCancelReservation, t0, 0, err)
	return ok, res, err
}

func (w *observed) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	t0 := w.begin()
	ok, err := w.s.ReleaseLease(ctx, key, id)
	w.failed(ctx, OpReleaseLease, t0, 1, err)
	return ok, err
}

func (w *observed) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	t0 := w.begin()
	ok, err := w.s.RenewLease(ctx, key, p, id)
	w.failed(ctx, OpRenewLease, t0, 1, err)
	return ok, err
}

// Close closes the wrapped store.
func (w *observed) Close() error { return w.s.Close() }
