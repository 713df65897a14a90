package algo

import (
	"time"
)

// This file holds the token bucket's operations besides Take: give tokens
// back (Refund), take what there is (TakeAtMost), and take tokens before
// they exist (Reserve, undone by Cancel). Each starts as Take does, with
// its steps 1 and 2 (time never runs backwards; refill), works on the same
// State, and keeps Take's bounds: every number the Lua twin would form is
// an integer of at most 2^53 (see tokenbucket.go and each function).

// Reservation is the answer to [TokenBucket.Reserve].
type Reservation struct {
	// Result describes the bucket after the reservation. Allowed reports
	// whether the reservation was admitted (and charged). While the
	// bucket is in debt Remaining is 0, and ResetAfter counts the debt.
	// When refused nothing is charged and RetryAfter is exact: the same
	// Reserve (same cost, same maxWait) made RetryAfter later, with no
	// other traffic in between, is admitted, and one made a microsecond
	// earlier is not.
	Result
	// Delay is how long the admitted request must wait before it
	// proceeds: zero when the bucket holds its tokens, else the exact time
	// until they have refilled. It is counted from now, or from the
	// bucket's own time when the caller's clock is behind it (as a Take
	// from a lagging clock is admitted at once). Zero when refused.
	Delay time.Duration
	// Ticket is what [TokenBucket.Cancel] needs to give the tokens back;
	// it is zero when Delay is (a refused reservation, or one admitted at
	// once, has nothing to cancel).
	Ticket
}

// Ticket identifies an admitted reservation that must wait (Delay > 0) on
// its bucket, for [TokenBucket.Cancel]: three integers that a store keeps,
// or sends back to the bucket, as they are. The zero Ticket cancels
// nothing.
type Ticket struct {
	// At is when the request may proceed, in µs on the bucket's clock:
	// the bucket's time plus Delay.
	At int64
	// Units is what the reservation charged, in level units (see
	// [Policy.Unit]): cost·Unit, plus the part of the last microsecond's
	// refill that the whole-µs Delay rounds away (less than Refill units:
	// it would spill over full at At, as it does for a Take at At).
	Units int64
	// Mark is the bucket's deficit at At as the reservation left it: the
	// bucket still holds exactly that, refilled, if nothing was reserved
	// or given back on it since.
	Mark int64
}

// MaxDelay returns the longest Delay a reservation under p can be given:
// the time one full bucket takes to refill, rounded down to the µs
// (Capacity·Unit/Refill µs, at most a microsecond under [Policy.FillTime]).
// A bucket's debt never exceeds one full bucket, so a maxWait longer than
// MaxDelay acts as MaxDelay. It is 0 for an invalid policy, and when a
// whole bucket refills in under a microsecond.
func (p Policy) MaxDelay() time.Duration {
	ps := p.shape()
	if ps.unit <= 0 {
		return 0
	}
	return time.Duration(ps.capacity*ps.unit/ps.refill) * time.Microsecond
}

// Refund gives n tokens back to the bucket in state s at time now: its
// deficit, refilled as Take refills it, is lowered by n·Unit, but never
// below zero, so a refund cannot raise the bucket above Capacity (tokens
// given back to a bucket that has refilled meanwhile spill). A refund made
// at once after an admitted Take of cost n leaves the bucket exactly as it
// was before the Take. A refund of 0, or to a full bucket, changes nothing
// but the stamp a refill moves.
//
// A refund is a credit at the time it is made; it does not rewrite the
// past. The never-exceed law holds for what stays charged only when each
// refund follows its Take at once (a refund made later returns tokens that
// the Take's bucket had partly refilled since, and lowers a debt that
// reservations queued behind it were admitted against): see
// [TokenBucket.Cancel] for undoing a reservation.
//
// The Result has Allowed true, RetryAfter zero, and Remaining and
// ResetAfter as after a Take. The errors are Take's: ErrInvalidPolicy,
// ErrInvalidCost (n < 0), ErrCostExceedsCapacity (n > Capacity),
// ErrInvalidTime and ErrInvalidState, with the state returned unchanged.
// A calendar quota ([Quota]) gets n back on its period's count, never
// below 0; a period that has ended has nothing to give back.
//
// Bounds: n·Unit ≤ full and the refilled deficit ≤ 2·full, so nothing
// exceeds 2^53.
func (tb TokenBucket) Refund(p Policy, s State, now, n int64) (State, Result, error) {
	var res Result
	s, err := tb.RefundTo(&res, p, s, now, n)
	return s, res, err
}

// RefundTo is Refund with the Result written to *res (zeroed on error),
// for a store's hot path: see [TokenBucket.TakeTo].
func (TokenBucket) RefundTo(res *Result, p Policy, s State, now, n int64) (State, error) {
	ps := p.shape()
	if err := checkTake(p, s, now, n); err != nil {
		if err == ErrQuotaUnsupported { // a calendar quota: quota.go
			return refundQuota(res, p, s, now, n)
		}
		*res = Result{}
		return s, err
	}
	full, r := ps.capacity*ps.unit, ps.refill
	d, t := refill(full, r, s, now)
	d = max(0, d-n*ps.unit)
	res.Allowed, res.RetryAfter = true, 0
	report(res, p, d, t, now, remaining(ps.capacity, ps.unit, d))
	return State{Level: d, Stamp: t, Prev: s.Prev}, nil
}

// TakeAtMost takes as many whole tokens as the bucket holds at now, up to
// n, and returns how many it granted: a partial grant for batch consumers
// (redis_rate's AllowAtMost). Granting g > 0 is exactly an admitted Take
// of cost g: same state, same Result. Granting 0 when n > 0 (the bucket
// holds no whole token) charges nothing and is exactly a denied Take of
// cost 1: Allowed false, and RetryAfter the exact wait for one token.
// n = 0 peeks, like a Take of cost 0. n may exceed Capacity: the grant is
// at most Capacity anyway.
//
// The errors are Take's for a negative n (ErrInvalidCost), an invalid
// policy, time or state; there is no ErrCostExceedsCapacity.
//
// Bounds: the grant is at most ⌊(full − D)/Unit⌋ tokens, so g·Unit ≤ full
// and the new deficit is at most full; a denial forms D − full + Unit ≤
// 2·full.
func (tb TokenBucket) TakeAtMost(p Policy, s State, now, n int64) (State, int64, Result, error) {
	var res Result
	s, g, err := tb.TakeAtMostTo(&res, p, s, now, n)
	return s, g, res, err
}

// TakeAtMostTo is TakeAtMost with the Result written to *res (zeroed on
// error), for a store's hot path: see [TokenBucket.TakeTo].
func (TokenBucket) TakeAtMostTo(res *Result, p Policy, s State, now, n int64) (State, int64, error) {
	ps := p.shape()
	if err := checkTake(p, s, now, min(n, ps.capacity)); err != nil {
		*res = Result{}
		return s, 0, err
	}
	full, r := ps.capacity*ps.unit, ps.refill
	d, t := refill(full, r, s, now)
	held := remaining(ps.capacity, ps.unit, d)
	g := min(n, held)
	res.Allowed, res.RetryAfter = true, 0
	if g > 0 {
		d += g * ps.unit
	} else if n > 0 {
		res.Allowed = false
		res.RetryAfter = Micros(t - now + refillTime(d-full+ps.unit, r))
	}
	report(res, p, d, t, now, held-g)
	return State{Level: d, Stamp: t, Prev: s.Prev}, g, nil
}

// Reserve takes cost tokens at now from the bucket in state s, even before
// they exist, provided they exist within maxWait µs: the request is then
// admitted with the Delay after which it may proceed, and the bucket goes
// into debt (its deficit above full) until its tokens have refilled. A
// reservation that needs no wait is exactly an admitted Take. One that
// would need more than maxWait is refused, charges nothing, and carries
// the exact RetryAfter at which the same reservation would be admitted.
//
// It works as Take, with step 3 in two parts (D₁ the refilled deficit, U
// the unit, R the refill per µs):
//
//   - D₁ ≤ full − cost·U: admitted at once, as a Take: Delay 0, D₂ = D₁ + cost·U.
//   - Else the tokens exist after w = ⌈(D₁ − full + cost·U)/R⌉ µs. With
//     W = min(maxWait, ⌊full/R⌋) (see [Policy.MaxDelay]; a negative
//     maxWait is 0), the reservation is admitted when w ≤ W, with
//     Delay w and D₂ = max(D₁, w·R) + cost·U: the state a Take at t₁+w
//     would leave, seen from t₁ (max(D₁, w·R) spills the refill past full
//     within the rounded-up µs, as a Take at t₁+w would). Its debt
//     D₂ − full is at most w·R ≤ maxWait·R, and at most full.
//   - Refused when w > W: RetryAfter = (t₁−now) + w − W.
//
// Reservations on one bucket are served in the order they were made: the
// debt is a queue, each reservation's tokens refill after those of the
// reservations before it, and no Take is admitted while the bucket is in
// debt. Requests that proceed at their admitted times (now + Delay) keep
// the never-exceed law: in any interval of length t, at most Capacity +
// ⌊rate·t⌋ tokens' worth of them proceed, with reservations that were
// cancelled before their time left out (see [TokenBucket.Cancel]).
//
// cost 0 is always admitted at once and charges nothing. The errors are
// Take's, with the state returned unchanged.
//
// Bounds: D₁ ≤ 2·full; D₁ − full + cost·U ≤ 2·full; w·R ≤ full when
// admitted, so D₂ ≤ 2·full; w < 2^53, and At = t₁ + w stays below
// MaxTime + 2^52 (int64 here; the Lua twin compares w with W before
// forming w·R).
func (tb TokenBucket) Reserve(p Policy, s State, now, cost, maxWait int64) (State, Reservation, error) {
	var res Reservation
	s, err := tb.ReserveTo(&res, p, s, now, cost, maxWait)
	return s, res, err
}

// ReserveTo is Reserve with the Reservation written to *res (zeroed on
// error), for a store's hot path: see [TokenBucket.TakeTo].
func (TokenBucket) ReserveTo(res *Reservation, p Policy, s State, now, cost, maxWait int64) (State, error) {
	ps := p.shape()
	if err := checkTake(p, s, now, cost); err != nil {
		*res = Reservation{}
		return s, err
	}
	full, r := ps.capacity*ps.unit, ps.refill
	d, t := refill(full, r, s, now)
	need := cost * ps.unit
	res.Allowed, res.RetryAfter, res.Delay, res.Ticket = true, 0, 0, Ticket{}
	if d > full-need && need > 0 {
		w, limit := refillTime(d-full+need, r), min(max(maxWait, 0), full/r)
		if w > limit {
			res.Allowed, res.RetryAfter = false, Micros(t-now+w-limit)
			report(&res.Result, p, d, t, now, remaining(ps.capacity, ps.unit, d))
			return State{Level: d, Stamp: t, Prev: s.Prev}, nil
		}
		base := max(d, w*r) // the refill past full in the last µs spills
		res.Delay = Micros(w)
		res.Ticket = Ticket{At: t + w, Units: base - d + need, Mark: base - w*r + need}
		d = base
	}
	d += need
	report(&res.Result, p, d, t, now, remaining(ps.capacity, ps.unit, d))
	return State{Level: d, Stamp: t, Prev: s.Prev}, nil
}

// Cancel gives back the tokens of a reservation that must wait, made on
// the bucket in state s under p, given its Ticket tk, at time now before
// its time has come (now, or the bucket's time if later, before tk.At):
// the request will not proceed.
//
// Reservations on a bucket are a queue, and the ones made after a
// reservation were given their times behind its tokens. So Cancel gives
// back exactly the reservation's Units, leaving the bucket exactly as if it
// had never been made, when it is still the last in line: nothing was
// reserved or given back on the bucket since (the bucket holds, refilled,
// what tk.Mark says). That is the usual case: a single waiter, or the
// latest of several; several cancelled from the latest back are each
// given back in turn. A reservation with others queued behind it gives
// nothing back: they keep their admitted times, and the tokens it would
// give back would let a new request take its place and proceed together
// with them, above the law (TestCancelBehindKeepsLaw shows one). x/time/rate
// gives back the cost less what was reserved after it (golang/go#56924),
// which is safe only with a third number per bucket (the time of the
// latest reservation) and still short of the cost; this bucket keeps two.
//
// At or after tk.At the tokens are due and Cancel changes nothing (give
// them back with Refund if the request did not proceed); nor does the zero
// Ticket, of a reservation that was refused or needed no wait. Cancel
// reports whether it gave the tokens back. The Result is the bucket after,
// as from Refund; the errors are Take's for the policy, time and state,
// and ErrInvalidReservation for tk.
//
// Bounds: tk.At − t₁ ≤ ⌈full/R⌉ while the reservation waits (its debt is
// at most full), which Cancel checks before forming (tk.At − t₁)·R ≤
// full + R ≤ 2^53; Units and Mark are at most 2·full.
func (tb TokenBucket) Cancel(p Policy, s State, now int64, tk Ticket) (State, bool, Result, error) {
	var res Result
	s, ok, err := tb.CancelTo(&res, p, s, now, tk)
	return s, ok, res, err
}

// CancelTo is Cancel with the Result written to *res (zeroed on error),
// for a store's hot path: see [TokenBucket.TakeTo].
func (TokenBucket) CancelTo(res *Result, p Policy, s State, now int64, tk Ticket) (State, bool, error) {
	ps := p.shape()
	full := ps.capacity * ps.unit
	err := checkTake(p, s, now, 0)
	if err == nil && (tk.Units < 0 || tk.Units > 2*full || tk.Mark < 0 || tk.Mark > 2*full || tk.At < 0) {
		err = ErrInvalidReservation
	}
	if err != nil {
		*res = Result{}
		return s, false, err
	}
	r := ps.refill
	d, t := refill(full, r, s, now)
	// Waiting, and nothing changed since: (tk.At − t₁)·R is below the
	// debt, which is at most full, only while it waits.
	ok := tk.Units > 0 && t < tk.At && tk.At-t <= full/r+1 && d == tk.Mark+(tk.At-t)*r
	if ok {
		d = max(0, d-tk.Units)
	}
	res.Allowed, res.RetryAfter = true, 0
	report(res, p, d, t, now, remaining(ps.capacity, ps.unit, d))
	return State{Level: d, Stamp: t, Prev: s.Prev}, ok, nil
}

// report writes the fields every answer shares: Remaining (rem,
// which is remaining(p.shape().capacity, p.shape().unit, d)) and ResetAfter for the
// deficit d at t, seen from now (step 5 of Take).
func report(res *Result, p Policy, d, t, now, rem int64) {
	res.Remaining = rem
	res.ResetAfter = 0
	if d > 0 {
		res.ResetAfter = Micros(t - now + refillTime(d, p.shape().refill))
	}
}
