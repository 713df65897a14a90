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
	if p.unit <= 0 {
		return math.MaxInt64
	}
	n := mulDiv(p.refill, max(d.Microseconds(), 0), p.unit, false, math.MaxInt64-p.capacity)
	return p.capacity + n
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
	return float64(p.capacity) - float64(ps.Level)/float64(p.unit), nil
}

// Room returns the tokens a request could take from s at µs now under p:
// Capacity less the count of the window containing now. The errors are
// Take's.
func (FixedWindow) Room(p Policy, s State, now int64) (float64, error) {
	ps, _, err := FixedWindow{}.Take(p, s, now, 0)
	if err != nil {
		return 0, err
	}
	return float64(p.capacity) - float64(ps.Level), nil
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
	return float64(p.capacity) - float64(ps.Level) - float64(ps.Prev)*float64(w-e)/float64(w), nil
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
