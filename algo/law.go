package algo

import (
	"math"
	"math/bits"
	"time"
)

// This file holds the never-exceed law's arithmetic, what a simulator or a
// chart reads off a state, and the one exact a·b/c every file here uses.

// Bound returns the never-exceed law's bound for an interval of length d
// under p: Capacity + ⌊rate·d⌋, the most cost a token bucket of p admits in
// any closed interval of that length (d is read in whole µs; a negative d
// counts as 0). It is exact, formed in 128 bits, and saturates at
// math.MaxInt64. A calendar quota or an invalid policy has no bound of this
// form: Bound returns math.MaxInt64 for it.
func (p Policy) Bound(d time.Duration) int64 {
	ps := p.shape()
	if ps.unit <= 0 {
		return math.MaxInt64
	}
	n := mulDiv(ps.refill, max(d.Microseconds(), 0), ps.unit, false, math.MaxInt64-ps.capacity)
	return ps.capacity + n
}

// BatchCap returns the most tokens one of n instances may hold at once in
// a token lease (a batch taken from the shared bucket of p and spent
// locally, hybrid.Leases) whose lifetime is lifetime: ⌊min(C, ⌊rate·L⌋)/n⌋.
// The fleet then holds at most min(C, ⌊rate·L⌋) tokens in batches, which
// the bucket refills within L, so a batch lost with its instance is missed
// for at most L. n < 1 counts as 1; a quota or an invalid policy has no cap
// of this form and returns 0 (no batch).
func (p Policy) BatchCap(lifetime time.Duration, n int) int64 {
	ps := p.shape()
	if ps.unit <= 0 {
		return 0
	}
	return min(ps.capacity, p.Bound(lifetime)-ps.capacity) / int64(max(n, 1))
}

// BatchBound returns the never-exceed law's bound for an interval of
// length d when n instances take tokens from the bucket of p in batches of
// at most p.BatchCap(lifetime, n) each and give back what they do not
// spend: Bound(d) + n·BatchCap(lifetime, n), which is at most
// Capacity + ⌊rate·(d+L)⌋.
//
// Proof. Let T(s) ≤ C be the bucket's tokens at s and H(s) the tokens
// granted to batches and neither spent, nor lost, nor back in the bucket
// (returns in flight count here): each instance holds one batch per key and
// tops it up to at most the cap, so H(s) ≤ n·cap. Every admission in
// [s, s+d] spends a token of H(s) or one granted in the interval; the
// bucket grants in the interval at most T(s) + rate·d plus what returns
// land in it, and those come from H(s) or from grants in the interval, so
// admissions ≤ H(s) + T(s) + rate·d ≤ n·cap + C + ⌊rate·d⌋ (integers).
// Returns matter only through H: a batch taken before the interval and
// spent inside it is H(s). The batch's lifetime enters only through the
// cap: admissions never depend on when a batch expires.
func (p Policy) BatchBound(d, lifetime time.Duration, n int) int64 {
	b, held := p.Bound(d), int64(max(n, 1))*p.BatchCap(lifetime, n)
	if b > math.MaxInt64-held {
		return math.MaxInt64
	}
	return b + held
}

// Room returns the tokens a request could take from s at µs now under p:
// Capacity less the deficit after the refill up to now, fractional between
// whole tokens. It is for drawing a bucket's level; no decision reads it. The
// errors are Take's (a cost-0 Take evaluates s at now).
func (TokenBucket) Room(p Policy, s State, now int64) (float64, error) {
	ps, _, err := TokenBucket{}.Take(p, s, now, 0)
	if err != nil {
		return 0, err
	}
	return float64(p.shape().capacity) - float64(ps.Level)/float64(p.shape().unit), nil
}

// Room returns the tokens a request could take from s at µs now under p:
// Capacity less the count of the window containing now. The errors are
// Take's.
func (FixedWindow) Room(p Policy, s State, now int64) (float64, error) {
	ps, _, err := FixedWindow{}.Take(p, s, now, 0)
	if err != nil {
		return 0, err
	}
	return float64(p.shape().capacity) - float64(ps.Level), nil
}

// Room returns the tokens a request could take from s at µs now under p:
// Capacity less the estimate, unrounded (curr plus prev weighted by the
// part of the previous window still in sight). It is for drawing; Take
// compares the estimate exactly. The errors are Take's.
func (SlidingWindow) Room(p Policy, s State, now int64) (float64, error) {
	ps, _, err := SlidingWindow{}.Take(p, s, now, 0)
	if err != nil {
		return 0, err
	}
	w := p.window()
	e := min(max(now-(ps.Stamp-ps.Stamp%w), 0), w)
	return float64(p.shape().capacity) - float64(ps.Level) - float64(ps.Prev)*float64(w-e)/float64(w), nil
}

// mulDiv returns min(⌊a·b/c⌋, limit), or min(⌈a·b/c⌉, limit) when up is
// set, for a, b ≥ 0, c > 0 and limit ≥ 0. The product is formed in 128
// bits, so it never overflows; a quotient past 64 bits is limit.
func mulDiv(a, b, c int64, up bool, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) { // the quotient needs more than 64 bits
		return limit
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if q >= uint64(limit) {
		return limit
	}
	if up && r > 0 {
		q++
	}
	return int64(q)
}
