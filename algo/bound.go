package algo

import "time"

// This file holds the arithmetic of a deny cache (package hybrid's
// DenyCache): what a store's answer proves about a bucket that others can
// only take from. It works in the token bucket's level units (one token = p.Unit() units, p.Refill() units refill
// per µs, a full bucket is full = Capacity·Unit units of headroom) and in
// whole microseconds, like package algo.
//
// # The virtual deficit
//
// The primary evaluates a request at its own time te and keeps the deficit D
// (how far below full the bucket is) at te. Its answer describes the bucket
// as seen from the caller's "now" t0, where te = max(t0, stored stamp):
//
//	ResetAfter = (te−t0) + ⌈D/R⌉
//	RetryAfter = (te−t0) + ⌈(D + cost·U − full)/R⌉   (denied only)
//
// Since (te−t0)·R is a whole multiple of R, both are ⌈Dv/R⌉ forms of one
// number, the virtual deficit at t0: Dv = D + R·(te−t0). For every later t
// at or after te, the bucket holds at most full − Dv + R·(t−t0) units: other
// callers only take tokens, and the refill is R per µs. A duration d = ⌈x/R⌉
// pins x to the interval ((d−1)·R, d·R], so each answer yields
//
//	lo = (d−1)·R + 1 ≤ Dv ≤ d·R = hi          (and the RetryAfter twin)
//
// and Remaining = ⌊(full−D)/U⌋ yields Dv ≥ D ≥ full − (Remaining+1)·U + 1.
// The entry keeps the largest lower bound lo and the smallest upper bound hi.
//
// # Deciding
//
// At local time t, with e = t − t0 measured on the cache's clock, the
// cache denies a request of cost c only when the bound cannot cover it even
// with the elapsed time inflated by the cache's clock allowance, eff ≥ e
// (hybrid adds 500 ppm of drift and a margin):
//
//	deny ⇔ full − lo + R·eff < c·U ⇔ eff < ⌈(lo − full + c·U)/R⌉
//
// The inflation covers the primary's clock gaining on the cache's, and
// te > t0, the case above where the bound only holds from te on; Denies
// also requires full − dmin < c·U, which covers the time before te.
//
// # Reporting
//
// A local denial reports what the primary would have said had nobody else
// taken from the bucket and had the clocks agreed: the same formulas at the
// true elapsed time e. When Refill is 1 (any rate whose tokens divide the
// period's microseconds, such as 2 per second) lo = hi and that answer is
// exact. Otherwise the cache answers only when every deficit in [lo, hi]
// gives the same Result, so a local answer is never a microsecond off; when
// they differ the request goes to the primary, whose denial of that cost
// then pins the answer (RetryAfter bounds Dv+c·U−full to one R-wide step,
// which gives the same RetryAfter throughout).

// DenyBound is what a store's answer proves about one bucket under the
// assumption that other callers only ever take from it: bounds on its
// virtual deficit at the time the request started (see the comment at the
// top of this file). A deny cache keeps one per key and asks it, at each
// later request, whether the store would certainly deny. Offsets e and eff
// are µs since the request that taught the bound started, on the cache's
// clock; eff is e inflated by whatever clock allowance the cache applies.
// The zero DenyBound denies nothing.
type DenyBound struct {
	p Policy
	// lo ≤ Dv ≤ hi bound the virtual deficit at t0; dmin ≤ D ≤ dtop bound
	// the deficit the primary kept at te (from Remaining). All in level
	// units.
	lo, hi, dmin, dtop int64
}

// Policy returns the policy the bound was learnt under.
func (b DenyBound) Policy() Policy { return b.p }

// Charge lowers the bound by a request of cost admitted elsewhere: the
// virtual deficit (and the deficit at te) grow by cost·Unit, as a charge by
// the primary at any time after t0 would make them.
func (b *DenyBound) Charge(cost int64) {
	need := cost * b.p.Unit()
	b.lo, b.hi, b.dmin, b.dtop = b.lo+need, b.hi+need, b.dmin+need, b.dtop+need
}

// DenyBound returns the bound implied by res, the primary's answer to
// a request of cost under p (t0 is when that request started). charged tells whether the
// primary charged the bucket (a single Take that was allowed, or a
// multi-limit take that was allowed as a whole). An allowed result that was
// not charged (a bucket that would have admitted, in a multi-limit take that
// another bucket denied) describes the state after a charge that did not
// happen, which store.MultiResult defines: the bounds are learnt from it and
// moved down by cost·Unit. ok is false for results that do not fit p.
func (p Policy) DenyBound(cost int64, res Result, charged bool) (b DenyBound, ok bool) {
	full, u, r := p.Capacity()*p.Unit(), p.Unit(), p.Refill()
	if u == 0 || (!res.Allowed && charged) || res.Remaining < 0 || res.Remaining > p.Capacity() {
		return DenyBound{}, false
	}
	// Clamp the durations so that d·R stays below 2^62 (a smaller lo is
	// still a lower bound); deficits there are decades of refill.
	maxD := int64(1<<62) / r
	b = DenyBound{p: p, hi: maxD * r}
	b.dmin = max(0, full-(res.Remaining+1)*u+1)
	b.dtop = full - res.Remaining*u
	b.lo = b.dmin // Dv ≥ D
	if d := floorMicros(res.ResetAfter); d > 0 {
		b.lo = max(b.lo, (min(d, maxD)-1)*r+1)
	}
	if d := ceilMicros(res.ResetAfter); d < maxD {
		b.hi = min(b.hi, d*r)
	}
	// RetryAfter is non-zero only for denials.
	if !res.Allowed && res.RetryAfter > 0 {
		off := full - cost*u // Dv − off = D + c·U − full (virtual)
		if d := floorMicros(res.RetryAfter); d > 0 {
			b.lo = max(b.lo, (min(d, maxD)-1)*r+1+off)
		}
		if d := ceilMicros(res.RetryAfter); d < maxD {
			b.hi = min(b.hi, d*r+off)
		}
	}
	if res.Allowed && !charged {
		need := cost * u
		b.lo, b.hi, b.dmin, b.dtop = max(0, b.lo-need), max(0, b.hi-need), max(0, b.dmin-need), max(0, b.dtop-need)
	}
	if b.hi < b.lo { // inconsistent answer: keep the safe side
		b.hi = b.lo
	}
	return b, true
}

// Denies reports whether a request of cost is certainly denied by the
// primary at eff inflated µs after t0. The bucket then holds at most
// max(full − dmin, full − lo + R·eff) units: the first while the primary
// still evaluates at its stamp te (Remaining bounds D there), the second
// once time has passed te.
func (b DenyBound) Denies(cost, eff int64) bool {
	full, need := b.p.Capacity()*b.p.Unit(), cost*b.p.Unit()
	gap := b.lo - full + need
	return full-b.dmin < need && gap > 0 && eff < ceilDiv(gap, b.p.Refill())
}

// Decide returns the local answer to a request of cost at e true and eff
// inflated µs after t0, and whether there is one. There is one when the
// bound proves a denial and the answer the primary would give absent other
// traffic and with agreeing clocks is pinned to the µs: algo.TokenBucket
// gives the same Result at every corner of what the primary's answer left
// open (Dv in [lo, hi], te − t0 as small and as large as Remaining allows).
// Otherwise the caller asks the primary, whose denial then pins the next
// answers.
func (b DenyBound) Decide(cost, e, eff int64) (Result, bool) {
	if !b.Denies(cost, eff) {
		return Result{}, false
	}
	res, ok := b.Pinned(cost, e)
	return res, ok && !res.Allowed
}

// Bounded is the answer to a request that Denies proved will be denied,
// when the primary cannot be asked and Pinned found no exact answer (the
// bound was charged for local admissions): RetryAfter and ResetAfter are
// when the bound allows the request and a full bucket, Remaining what the
// bound allows now, all conservative only in that they may be early.
func (b DenyBound) Bounded(cost, eff int64) Result {
	full, u, r := b.p.Capacity()*b.p.Unit(), b.p.Unit(), b.p.Refill()
	d := deficitAt(b.lo, r, eff)
	return Result{
		Remaining:  max(0, full-d) / u,
		RetryAfter: time.Duration(max(1, ceilDiv(b.lo-full+cost*u, r)-eff)) * time.Microsecond,
		ResetAfter: time.Duration(max(1, ceilDiv(b.lo, r)-eff)) * time.Microsecond,
	}
}

// Pinned returns the token bucket's answer to a request of cost at e µs
// after t0, if every state consistent with the bound gives the same one.
func (b DenyBound) Pinned(cost, e int64) (Result, bool) {
	if e < 0 || e > MaxTime/2 {
		return Result{}, false
	}
	var first Result
	for i, dv := range [4]int64{b.lo, b.lo, b.hi, b.hi} {
		// te − t0 = (Dv − D)/R with D in [dmin, dtop]: the smallest
		// and the largest gap.
		gap := max(0, ceilDiv(dv-b.dtop, b.p.Refill()))
		if i%2 == 1 {
			gap = max(0, (dv-b.dmin)/b.p.Refill())
		}
		if gap > MaxTime/2 {
			return Result{}, false
		}
		s := State{Level: max(0, dv-gap*b.p.Refill()), Stamp: gap}
		_, res, err := TokenBucket{}.Take(b.p, s, e, cost)
		if err != nil || (i > 0 && res != first) {
			return Result{}, false
		}
		first = res
	}
	return first, true
}

// IdleAfter returns how long after t0 (µs, inflated time) the bound stops
// denying anything: once eff reaches it, even a request of full capacity
// may be admitted.
func (b DenyBound) IdleAfter() int64 {
	if b.p.shape().refill <= 0 {
		return 0
	}
	return ceilDiv(max(0, b.lo), b.p.Refill())
}

func floorMicros(d time.Duration) int64 { return int64(d / time.Microsecond) }

func ceilMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// deficitAt returns deficit − R·elapsed floored at zero, without forming a
// product that could overflow.
func deficitAt(deficit, r, elapsed int64) int64 {
	if deficit <= 0 || elapsed >= ceilDiv(deficit, r) {
		return 0
	}
	return deficit - elapsed*r
}
