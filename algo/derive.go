package algo

import "time"

// This file holds what a store can work out about a token bucket from a
// Result it was just given, without the division or the state that
// computing it afresh would need.

// maxReset is the longest ResetAfter known not to be saturated by [Micros].
const maxReset = time.Duration(maxMicros) * time.Microsecond

// IdleFrom is [TokenBucket.IdleAt] of the state s that a Take at now
// returned together with resetAfter, its Result's ResetAfter: the time at
// which the bucket is full again, when a store may forget it. It reads the
// answer off resetAfter (IdleAt − now exactly, unless it saturated) instead
// of dividing.
func (tb TokenBucket) IdleFrom(p Policy, s State, resetAfter time.Duration, now int64) int64 {
	switch {
	case s.Level == 0:
		return s.Stamp
	case resetAfter < maxReset:
		return now + int64(resetAfter/time.Microsecond)
	}
	return tb.IdleAt(p, s)
}

// Uncharged returns the Result a token bucket would have given had the
// admitted request of cost behind res not been charged: what a bucket that
// would have admitted reports when the multi-limit take it was part of is
// refused as a whole, and the charge must not show. Remaining gets cost
// back (capped at the policy's Capacity); ResetAfter loses the refill time of cost tokens,
// rounded down to the µs, so it may be late by under 1µs but never early.
// (When the caller's clock was behind the bucket's stamp, ResetAfter keeps
// that lag even if the bucket would have been full.) A denied res, or cost 0, is returned as it is.
// For a calendar quota, Remaining gets cost back, and ResetAfter is 0 when
// that leaves the period's count at 0.
func (TokenBucket) Uncharged(p Policy, res Result, cost int64) Result {
	ps := p.shape()
	if res.Allowed && cost > 0 && p.IsQuota() {
		return unchargedQuota(p, res, cost)
	}
	if !res.Allowed || cost <= 0 || ps.refill <= 0 {
		return res
	}
	res.Remaining = min(ps.capacity, res.Remaining+cost)
	res.ResetAfter = max(0, res.ResetAfter-Micros(cost*ps.unit/ps.refill))
	return res
}
