package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The operations around a take (Refund, TakeAtMost, Reserve and their
// kin) on both wrappers: see "Refunds, grants and reservations" in the
// package doc for what each does and what the DenyCache's bound then
// guarantees. Each call is an op, run on a store by opOn, so that the
// wrappers compose as their Takes do (opSourced tells a primary's answer
// from a local one).

// opKind names an operation around a take.
type opKind uint8

const (
	opRefund opKind = iota
	opRefundMulti
	opAtMost
	opReserve
	opCancel
	opHold
	opSettle
)

// op is one call of an operation around a take, with its arguments.
type op struct {
	kind    opKind
	key     string
	p       algo.Policy
	n       int64 // Refund's n, TakeAtMost's n, Reserve's cost
	refund  bool  // the request is marked Refundable
	reqs    []store.Request
	maxWait time.Duration // Reserve's maxWait, Hold's ttl
	ticket  algo.Ticket
	hold    algo.Hold // Settle's hold; n is its actual cost
}

// opResult is the answer to an op: the fields of its kind.
type opResult struct {
	res     algo.Result
	results []algo.Result // RefundMulti
	granted int64         // TakeAtMost
	rsv     algo.Reservation
	ok      bool // CancelReservation gave back
	hold    algo.Hold
	settled algo.Settlement
}

// opSourced is implemented by this package's wrappers: opFrom runs o and
// tells whether the answer came from the innermost primary store (see
// sourced).
type opSourced interface {
	opFrom(ctx context.Context, o op) (opResult, bool, error)
}

// opOn runs o on s, telling whether the answer came from a primary store.
func opOn(ctx context.Context, s store.Store, o op) (r opResult, primary bool, err error) {
	if w, ok := s.(opSourced); ok {
		return w.opFrom(ctx, o)
	}
	switch o.kind {
	case opRefund:
		r.res, err = s.Refund(ctx, o.request())
	case opRefundMulti:
		r.results, err = s.RefundMulti(ctx, o.reqs)
	case opAtMost:
		r.granted, r.res, err = s.TakeAtMost(ctx, o.request())
	case opReserve:
		r.rsv, err = s.Reserve(ctx, o.request(), o.maxWait)
		r.res = r.rsv.Result
	case opHold:
		r.hold, r.res, err = s.Hold(ctx, o.request(), o.maxWait)
	case opSettle:
		r.settled, err = s.Settle(ctx, o.key, o.p, o.hold, o.n)
		r.res = r.settled.Result
	default:
		r.ok, r.res, err = s.CancelReservation(ctx, o.key, o.p, o.ticket)
	}
	return r, true, err
}

// request returns o's single request.
func (o op) request() store.Request {
	return store.Request{Key: o.key, Policy: o.p, Cost: o.n, Refundable: o.refund}
}

// ops gives a wrapper the operations around a take, each run by the
// wrapper's opFrom. The package doc says what each wrapper does with them.
type ops struct {
	run func(ctx context.Context, o op) (opResult, bool, error)
}

// Refund gives n tokens back to the bucket at key under p: see
// store.Store, and "Refunds, grants and reservations" in the package
// doc for what the wrapper adds.
func (w *ops) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	r, _, err := w.run(ctx, op{kind: opRefund, key: req.Key, p: req.Policy, n: req.Cost, refund: req.Refundable})
	return r.res, err
}

// RefundMulti gives tokens back to several buckets at once, atomically
// in the primary: see store.Store and the package doc.
func (w *ops) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	r, _, err := w.run(ctx, op{kind: opRefundMulti, reqs: reqs})
	return r.results, err
}

// TakeAtMost takes as many whole tokens of the bucket at key under p as it
// holds, up to n: see store.Store and the package doc.
func (w *ops) TakeAtMost(ctx context.Context, req store.Request) (int64, algo.Result, error) {
	r, _, err := w.run(ctx, op{kind: opAtMost, key: req.Key, p: req.Policy, n: req.Cost, refund: req.Refundable})
	return r.granted, r.res, err
}

// Reserve reserves cost tokens of the bucket at key under p, admitted if
// they exist within maxWait: see store.Store and the package doc.
func (w *ops) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	r, _, err := w.run(ctx, op{kind: opReserve, key: req.Key, p: req.Policy, n: req.Cost, refund: req.Refundable, maxWait: maxWait})
	return r.rsv, err
}

// CancelReservation gives back the tokens of a reservation on key under p
// that is still the last in line: see store.Store and the package doc.
func (w *ops) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	r, _, err := w.run(ctx, op{kind: opCancel, key: key, p: p, ticket: t})
	return r.ok, r.res, err
}

// Hold takes cost tokens of the bucket at key under p as an estimate, to
// be settled: see store.Store and the package doc.
func (w *ops) Hold(ctx context.Context, req store.Request, ttl time.Duration) (algo.Hold, algo.Result, error) {
	r, _, err := w.run(ctx, op{kind: opHold, key: req.Key, p: req.Policy, n: req.Cost, refund: req.Refundable, maxWait: ttl})
	return r.hold, r.res, err
}

// Settle closes the hold h on key under p at the actual cost: see
// store.Store and the package doc.
func (w *ops) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error) {
	r, _, err := w.run(ctx, op{kind: opSettle, key: key, p: p, hold: h, n: actual})
	return r.settled, err
}

// keys returns the keys o adds tokens to or takes them from.
func (o op) keys() []string {
	if o.kind != opRefundMulti {
		return []string{o.key}
	}
	ks := make([]string, len(o.reqs))
	for i, q := range o.reqs {
		ks[i] = q.Key
	}
	return ks
}

// givesBack reports whether o may add tokens to a bucket.
func (o op) givesBack() bool {
	return o.kind == opRefund || o.kind == opRefundMulti || o.kind == opCancel || o.kind == opSettle
}

// check validates o as the stores do before acting, for the answers a
// Fallback gives itself.
func (o op) check(maxKeyLen int) error {
	switch o.kind {
	case opRefundMulti:
		return store.CheckRequests(o.reqs, maxKeyLen)
	case opAtMost:
		if o.n < 0 {
			return fmt.Errorf("%w: %d", algo.ErrInvalidCost, o.n)
		}
		return store.CheckRequest(store.Request{Key: o.key, Policy: o.p, Cost: min(o.n, o.p.Capacity())}, maxKeyLen)
	case opCancel, opSettle:
		return store.CheckRequest(store.Request{Key: o.key, Policy: o.p}, maxKeyLen)
	}
	return store.CheckRequest(store.Request{Key: o.key, Policy: o.p, Cost: o.n}, maxKeyLen)
}

// opFrom passes o to the primary, and learns from what a grant answers,
// or forgets the keys o may have added tokens to (a refund, a
// cancellation, a settlement). A grant the bound proves empty is answered
// locally. A reservation or a hold is not learnt from: any reservation may
// be cancelled and any hold settled, by whichever process holds it, and the
// tokens that gives back are ones the bound could not see. Nor is any call
// marked refundable.
func (c *DenyCache) opFrom(ctx context.Context, o op) (opResult, bool, error) {
	if c.closed.Load() {
		return opResult{}, false, store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return opResult{}, false, err
	}
	if o.kind == opAtMost && o.n > 0 {
		if res, ok := c.deny(store.Request{Key: o.key, Policy: o.p, Cost: 1, Refundable: o.refund}); ok {
			c.hit(ctx, -1)
			return opResult{res: res}, false, nil
		}
	}
	seq, t0 := c.seq.Add(1), c.now()
	c.calls.Add(1)
	r, primary, err := opOn(ctx, c.primary, o)
	switch {
	case o.givesBack():
		// Whatever the answer (a failure may still have given back),
		// the key's bucket may hold more than the cache knows.
		c.invalidate(o.keys()...)
	case o.kind == opReserve || o.kind == opHold || o.refund:
		c.unlearn(o.key)
	case err == nil && primary && o.kind == opAtMost:
		// Granting g > 0 is an admitted Take of g; granting nothing, a
		// denied Take of 1 (or, for n = 0, a peek).
		cost := r.granted
		if cost == 0 && o.n > 0 {
			cost = 1
		}
		c.learn(o.key, o.p, cost, seq, t0, r.res, r.res.Allowed, !r.res.Allowed || r.res.Remaining < 1)
	}
	return r, primary, err
}

// invalidate drops what the cache knows of keys, and keeps it from
// learning what the primary calls in flight answer: they may have been
// evaluated before tokens were added. Calls that start later see them.
func (c *DenyCache) invalidate(keys ...string) {
	seq := c.seq.Load()
	for f := c.forgot.Load(); f < seq && !c.forgot.CompareAndSwap(f, seq); f = c.forgot.Load() {
	}
	for _, k := range keys {
		c.cache.drop(k)
	}
}

// opFrom runs o on the primary through the breaker, and answers by Mode
// what the primary does not.
func (f *Fallback) opFrom(ctx context.Context, o op) (opResult, bool, error) {
	return guard(f, ctx,
		func(ctx context.Context) (opResult, bool, error) { return opOn(ctx, f.primary, o) },
		func(cause error) (opResult, error) { return f.degradeOp(ctx, o, cause) })
}

// degradeOp answers o when the primary does not: see degrade.
func (f *Fallback) degradeOp(ctx context.Context, o op, cause error) (opResult, error) {
	if err := o.check(store.MaxKeyLen(f.cfg.MaxKeyLen)); err != nil {
		return opResult{}, fmt.Errorf("hybrid: %w", err)
	}
	d, cached := f.primary.(denier)
	if cached && o.kind == opAtMost && o.n > 0 {
		if res, ok := d.denyDown(store.Request{Key: o.key, Policy: o.p, Cost: 1, Refundable: o.refund}); ok {
			d.hit(ctx, -1)
			return opResult{res: res}, nil // certainly denied by Redis, reachable or not
		}
	}
	switch {
	case f.cfg.Mode == FailClosed || f.cfg.Mode == FailOpen && o.givesBack():
		return opResult{}, f.openErr(cause)
	case f.cfg.Mode == FailOpen && o.kind == opAtMost:
		g := min(o.n, o.p.Capacity())
		return opResult{granted: g, res: algo.Result{Allowed: true, Remaining: o.p.Capacity() - g}}, nil
	case f.cfg.Mode == FailOpen && o.kind == opHold: // admitted, with no hold to settle
		return opResult{res: algo.Result{Allowed: true, Remaining: o.p.Capacity() - o.n}}, nil
	case f.cfg.Mode == FailOpen:
		res := algo.Result{Allowed: true, Remaining: o.p.Capacity() - o.n}
		return opResult{res: res, rsv: algo.Reservation{Result: res}}, nil
	}
	q := o.share(f.cfg.Instances)
	if (o.kind == opReserve || o.kind == opHold) && o.n > q.p.Capacity() {
		// The share can never hold this request: refuse until the
		// primary may answer again.
		res := algo.Result{RetryAfter: f.br.retryIn(f.cfg.Clock.Now())}
		return opResult{res: res, rsv: algo.Reservation{Result: res}}, nil
	}
	r, _, err := opOn(ctx, f.local, q)
	switch {
	case o.kind == opCancel && errors.Is(err, algo.ErrInvalidReservation):
		return opResult{}, nil // a ticket of the primary's: nothing to give back here
	case o.kind == opSettle && errors.Is(err, algo.ErrHoldSettled):
		return opResult{}, f.openErr(cause) // a hold of the primary's: it settles there, or at its estimate
	case o.kind == opHold && r.hold.Policy == q.p:
		r.hold.Policy = o.p // settled here while the primary is down (share maps it back)
	}
	if cached && err == nil {
		switch {
		case o.kind == opAtMost && r.granted > 0:
			d.charge(store.Request{Key: o.key, Policy: o.p, Cost: r.granted, Refundable: o.refund})
		case o.kind == opReserve && r.rsv.Allowed && o.n > 0:
			d.charge(o.request())
		}
	}
	return r, err
}

// share returns o on this instance's share of its policies (see
// algo.Policy.Share), with refunds cut to the share's capacity: more
// would only spill.
func (o op) share(instances int) op {
	if o.kind == opSettle && o.hold.Policy == o.p {
		o.hold.Policy = o.p.Share(instances)
	}
	o.p = o.p.Share(instances)
	if o.kind == opRefund {
		o.n = min(o.n, o.p.Capacity())
	}
	if o.kind == opRefundMulti {
		reqs := make([]store.Request, len(o.reqs))
		for i, q := range o.reqs {
			p := q.Policy.Share(instances)
			reqs[i] = store.Request{Key: q.Key, Policy: p, Cost: min(q.Cost, p.Capacity())}
		}
		o.reqs = reqs
	}
	return o
}
