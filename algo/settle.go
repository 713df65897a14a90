package algo

import "time"

// This file holds reserve-then-settle, for work whose cost is known only
// after it is done (LLM tokens, bytes, rows): [TokenBucket.Hold] takes an
// estimate now, and [TokenBucket.Settle] later charges the actual cost,
// giving back what the estimate overcharged or charging the rest, into a
// bounded debt. A store keeps a record of each open hold, so that a hold
// settles once; one left unsettled settles itself at its estimate when
// its deadline passes (the estimate simply stays charged), so a worker that
// dies leaks nothing.

// MaxHoldTTL is the longest a hold may stay open before it settles itself
// at its estimate.
const MaxHoldTTL = 24 * time.Hour

// Hold is an admitted take of an estimate that a later [TokenBucket.Settle]
// corrects to the actual cost: what a caller keeps between the two, in
// words that do not name the bucket's key (a store's Settle is given the key
// again). The zero Hold is no hold.
type Hold struct {
	// ID names the hold's record in a store (store.Store.Hold sets it);
	// algo does not read it.
	ID string
	// Estimate is the tokens the hold charged.
	Estimate int64
	// Deadline is when the hold settles itself at its estimate, in µs on
	// the bucket's clock: the hold's time plus its TTL. A Settle after it
	// is [ErrHoldExpired] and changes nothing.
	Deadline int64
	// Policy is the policy the hold was made under; Settle under another
	// is [ErrHoldPolicy].
	Policy Policy
}

// Settlement is the answer to [TokenBucket.Settle].
type Settlement struct {
	// Result describes the bucket after: Allowed true, RetryAfter zero,
	// Remaining 0 while the bucket is in debt, and ResetAfter counting
	// the debt.
	Result
	// Uncharged is the part of the actual cost above the estimate that the
	// debt bound ([Policy.MaxDebt]) left uncharged: zero unless the
	// bucket would have gone more than one full bucket into debt.
	Uncharged int64
}

// MaxDebt returns the most tokens a bucket of p may owe: one full bucket,
// Capacity tokens (a reservation's debt, at most [Policy.MaxDelay] of
// refill, has the same bound). It is 0 for a quota or an invalid policy.
func (p Policy) MaxDebt() int64 {
	ps := p.shape()
	if ps.unit <= 0 {
		return 0
	}
	return ps.capacity
}

// SettleBound returns the never-exceed law's bound for a bucket whose
// charges include settlements, over an interval of length d: [Policy.Bound]
// plus [Policy.MaxDebt], Capacity·2 + ⌊rate·d⌋ (saturating at
// math.MaxInt64, as Bound does).
//
// The law: in any interval of length d, the cost charged within it is at
// most SettleBound(d), counting each admitted Take's cost and each Hold's
// estimate at its time, and each Settle's actual − estimate at the
// settle's time (a refund negative, as asked, even where it spilled;
// reservations at the reservation's time). Proof: every charge and credit
// moves the deficit D, and refill lowers it by at most rate·d in the
// interval, so the net charge is at most D(end) − D(start) + rate·d, with
// D(start) ≥ 0 and D(end) ≤ 2·full (full plus the debt bound); a refund
// that spills credits less than it counts. Counted at the hold's time
// instead, the law would not hold: a bucket that refilled between a hold and
// its settle can take the extra into debt again (TestSettleLawHoldTime).
func (p Policy) SettleBound(d time.Duration) int64 {
	b := p.Bound(d)
	return b + min(p.MaxDebt(), 1<<63-1-b)
}

// Hold takes estimate tokens from the bucket in state s at now under p and,
// if admitted, returns the Hold a later Settle corrects: Deadline is the
// bucket's time (now, or the bucket's stamp when the caller's clock is
// behind it) plus ttl µs. It is admitted exactly when a Take of estimate
// would be, and leaves the same state and Result, but for an estimate of
// 0: a hold of 0 (for a cost known only after) is refused while the bucket
// is in debt, with RetryAfter the time until the debt has refilled. A
// refused hold charges nothing and its Hold is zero.
//
// The errors are Take's (ErrQuotaUnsupported for a quota), and
// ErrInvalidHold for a ttl outside [1µs, MaxHoldTTL], with the state
// returned unchanged.
//
// Bounds: as Take's; the deadline is below MaxTime + 2^37.
func (TokenBucket) Hold(p Policy, s State, now, estimate, ttl int64) (State, Hold, Result, error) {
	ps := p.shape()
	var res Result
	if err := checkTake(p, s, now, estimate); err != nil {
		return s, Hold{}, res, err
	}
	if ttl < 1 || ttl > MaxHoldTTL.Microseconds() {
		return s, Hold{}, res, ErrInvalidHold
	}
	full, r := ps.capacity*ps.unit, ps.refill
	d, t := refill(full, r, s, now)
	need := estimate * ps.unit
	var h Hold
	if d <= full-need {
		d += need
		res.Allowed = true
		h = Hold{Estimate: estimate, Deadline: t + ttl, Policy: p}
	} else {
		res.RetryAfter = Micros(t - now + refillTime(d-full+need, r))
	}
	report(&res, p, d, t, now, remaining(ps.capacity, ps.unit, d))
	return State{Level: d, Stamp: t, Prev: s.Prev}, h, res, nil
}

// Settle corrects the hold h on the bucket in state s, at now under p, to
// the actual cost. At the bucket's time t₁ = max(now, stamp), refilled as
// Take refills it:
//
//   - actual ≤ h.Estimate: the difference is given back as by Refund (the
//     deficit lowered, never below zero: never above Capacity).
//   - actual > h.Estimate: the extra is charged even into debt, but the
//     deficit never passes 2·full, one full bucket of debt ([Policy.MaxDebt]):
//     the whole tokens that would pass it are not charged, and are reported
//     as Uncharged. Requests after wait the debt out; Take's RetryAfter
//     counts it, exactly.
//
// The errors, with the state returned unchanged and nothing charged:
// Take's for the policy (ErrQuotaUnsupported for a quota), time and state;
// ErrInvalidHold for a Hold no Hold could have made (the zero Hold, an
// estimate outside [0, Capacity], a deadline outside [1, MaxTime +
// MaxHoldTTL]); ErrHoldPolicy when h was made under another policy than p; ErrInvalidCost for an actual cost below 0 or above
// MaxCapacity; and ErrHoldExpired when t₁ is past h.Deadline: the hold has
// settled itself at its estimate. Settling a hold twice is a store's to
// refuse ([ErrHoldSettled]): algo keeps no record of holds.
//
// Bounds: the refund is at most full and the extra charged at most 2·full
// − D₁ (the extra is compared in tokens before it is multiplied by the
// unit), so every level stays ≤ 2·full ≤ 2^53.
func (TokenBucket) Settle(p Policy, s State, now int64, h Hold, actual int64) (State, Settlement, error) {
	ps := p.shape()
	var res Settlement
	if err := checkSettle(p, s, now, h, actual); err != nil {
		return s, res, err
	}
	full, r := ps.capacity*ps.unit, ps.refill
	d, t := refill(full, r, s, now)
	if t > h.Deadline {
		return s, res, ErrHoldExpired
	}
	if actual <= h.Estimate {
		d = max(0, d-(h.Estimate-actual)*ps.unit)
	} else {
		extra := actual - h.Estimate
		c := min(extra, (2*full-d)/ps.unit)
		d += c * ps.unit
		res.Uncharged = extra - c
	}
	res.Allowed = true
	report(&res.Result, p, d, t, now, remaining(ps.capacity, ps.unit, d))
	return State{Level: d, Stamp: t, Prev: s.Prev}, res, nil
}

// checkSettle returns the error Settle returns for its arguments, but for
// the deadline, which needs the refilled bucket's time.
func checkSettle(p Policy, s State, now int64, h Hold, actual int64) error {
	switch err := checkTake(p, s, now, 0); {
	case err != nil:
		return err
	case h.Estimate < 0 || h.Deadline < 1 || h.Deadline > MaxTime+MaxHoldTTL.Microseconds():
		return ErrInvalidHold
	case h.Policy != p:
		return ErrHoldPolicy
	case h.Estimate > p.shape().capacity:
		return ErrInvalidHold
	case actual < 0 || actual > MaxCapacity:
		return ErrInvalidCost
	}
	return nil
}
