package hybrid

import (
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// The deny cache's arithmetic is algo.DenyBound's: what a primary's answer
// proves about a bucket that other callers can only take from. This file
// adds what belongs to the cache, not to the bucket: when the answer was
// learnt on this process's clock, the order of answers, and the allowance
// for the primary's clock running ahead of ours.

// driftDivisor inflates elapsed time by 1/2000 (500 ppm), the fastest an
// NTP-disciplined clock is slewed, so two clocks may part by at most this
// rate between steps.
const driftDivisor = 2000

// bound is what the cache knows about one bucket.
type bound struct {
	algo.DenyBound
	t0 time.Time // local time at the start of the primary call
	// seq orders the calls bounds are learnt from by their start, so a
	// late answer to an earlier call never replaces a later one.
	seq uint64
	// local marks a bound charged by a Fallback's local admissions
	// while the primary was failing: stricter than the primary, which
	// never saw them, so it is dropped when the primary is back.
	local bool
}

// learn returns the bound implied by res, the primary's answer to a request
// of cost under p started at local time t0 (see algo.Policy.DenyBound).
func learn(p algo.Policy, t0 time.Time, cost int64, res algo.Result, charged bool) (bound, bool) {
	db, ok := p.DenyBound(cost, res, charged)
	return bound{DenyBound: db, t0: t0}, ok
}

// charge lowers the bound by a request of cost admitted by this instance
// while the primary was failing.
func (b *bound) charge(cost int64) {
	b.Charge(cost)
	b.local = true
}

// elapsed returns the local µs since the bound was learnt (negative if the
// clock went backwards), and the same inflated by the clock allowance for
// deciding: clamped at zero, plus the drift allowance and margin unless
// margin is negative (exact: the primary reads this very clock). The
// inflation covers the primary's clock gaining on ours (a Redis server
// clock running fast or stepped forward, or another instance's client clock
// ahead of ours, which moves the stored stamp ahead and refills early). It
// is the only place where the cache gives up savings for safety.
func (b *bound) elapsed(now time.Time, margin int64) (e, eff int64) {
	e = now.Sub(b.t0).Microseconds()
	eff = max(0, e)
	if margin >= 0 {
		eff += eff/driftDivisor + margin
	}
	return e, eff
}
