package algo

import (
	"fmt"
	"math"
	"time"
	"unique"
)

// Rate is a refill rate: Tokens tokens every Period. The rate is continuous:
// PerSecond(2) adds one token every 500ms, not two at each second.
type Rate struct {
	Tokens int64
	Period time.Duration
	// inexact is a rate asked for in tokens per Period that no whole
	// Tokens per whole µs Period gives exactly (PerSecond(math.Pi)): 0
	// for every rate that is exact. Burst keeps it for Validate to report.
	inexact float64
}

// Per returns a Rate of tokens every period.
func Per(tokens int64, period time.Duration) Rate { return Rate{Tokens: tokens, Period: period} }

// Every returns the Rate of one token every d, as x/time/rate's Every
// does: Every(2*time.Second) is PerSecond(0.5).
func Every(d time.Duration) Rate { return Per(1, d) }

// PerSecond returns a Rate of r tokens per second. A fraction is exact
// when it is a ratio of whole numbers: PerSecond(0.5) is one token every
// 2 s, PerSecond(2.5) five every 2 s, PerSecond(1.0/3) one every 3 s. A
// rate no such ratio gives exactly (PerSecond(math.Pi)) makes every
// Policy built from it invalid, with an error that says so: it is never
// rounded.
func PerSecond(r float64) Rate { return per(r, time.Second) }

// PerMinute returns a Rate of r tokens per minute (see [PerSecond] for
// fractions).
func PerMinute(r float64) Rate { return per(r, time.Minute) }

// PerHour returns a Rate of r tokens per hour (see [PerSecond] for
// fractions).
func PerHour(r float64) Rate { return per(r, time.Hour) }

// PerDay returns a Rate of r tokens per 24 hours (see [PerSecond] for
// fractions).
func PerDay(r float64) Rate { return per(r, 24*time.Hour) }

// per returns r tokens every period as whole tokens every whole periods:
// r itself when it is whole, else the continued fraction's first
// convergent t/d that equals r exactly in float64, as Per(t, d·period).
func per(r float64, period time.Duration) Rate {
	const most = 1 << 53 // float64 is exact for integers below it
	if r == math.Trunc(r) && math.Abs(r) < most {
		return Per(int64(r), period)
	}
	if r > 0 && r < most {
		// Convergents h/k of r's continued fraction: the best rational
		// approximations; a ratio of whole numbers is one of them.
		h0, h1, k0, k1, x := int64(1), int64(math.Floor(r)), int64(0), int64(1), r
		for k1 <= int64(MaxPeriod/period) {
			if float64(h1)/float64(k1) == r {
				return Per(h1, period*time.Duration(k1))
			}
			frac := x - math.Floor(x)
			if frac == 0 {
				break
			}
			x = 1 / frac
			a := int64(math.Floor(x))
			if a > (most-h0)/max(h1, 1) || a > (most-k0)/k1 {
				break
			}
			h0, h1, k0, k1 = h1, a*h1+h0, k1, a*k1+k0
		}
	}
	return Rate{Period: period, inexact: r}
}

// String formats r as "2/1s".
func (r Rate) String() string {
	if r.inexact != 0 {
		return fmt.Sprintf("%g/%v", r.inexact, r.Period)
	}
	return fmt.Sprintf("%d/%v", r.Tokens, r.Period)
}

// inexact is a Policy's unit when Burst was given an inexact Rate; its
// refill then holds the float64 bits of the rate per second asked for.
const inexact = math.MinInt64

// Burst returns the Policy of a bucket with the given capacity refilled at
// rate r. The result may be invalid; [Policy.Validate] says why, and every
// Take with an invalid Policy returns that error. Use [NewPolicy] to get the
// error at once.
func (r Rate) Burst(capacity int64) Policy {
	unit, refill, err := reduce(capacity, r)
	switch {
	case err != nil && r.inexact != 0:
		// Keep the rate per second asked for, for Validate to report.
		return mkPolicy(capacity, inexact, int64(math.Float64bits(r.inexact/r.Period.Seconds())))
	case err != nil:
		// Keep what was given, for Validate to report (see Policy).
		return mkPolicy(capacity, ^int64(min(max(r.Period, 0), math.MaxInt64-1)), r.Tokens)
	}
	return mkPolicy(capacity, unit, refill)
}

// NewPolicy returns the Policy of a bucket of the given capacity refilled at
// rate r, or an error wrapping [ErrInvalidPolicy].
func NewPolicy(capacity int64, r Rate) (Policy, error) {
	p := r.Burst(capacity)
	return p, p.Validate()
}

// Policy is the shape of a bucket: its capacity (the burst, in tokens) and
// its refill [Rate]. Build one with [Rate.Burst]:
//
//	algo.PerSecond(2).Burst(100) // 100 at once, then 2 per second
//
// The zero value is invalid: every Take with it returns [ErrInvalidPolicy].
// Policies are comparable values of one word; copy them freely and use
// them as map keys. Building one interns it, which costs tens of
// nanoseconds: build policies with the configuration, not per request.
// A calendar quota ([Quota]: N per day, week or month) is a Policy too,
// and goes wherever a bucket's does.
//
// A Policy is valid when 1 ≤ Capacity ≤ [MaxCapacity]; the rate has
// Tokens ≥ 1 and a Period of a whole number of microseconds, at most
// [MaxPeriod]; the rate is at most [MaxPerSecond]; and Capacity·Unit and
// Refill are at most [MaxLevel] (2^52). The last bound is what limits long
// periods with large capacities: a bucket of 1e9 refilled per second is
// fine, one refilled 1 per day may hold up to about 52,000 tokens.
type Policy struct {
	// s is the policy's shape, interned: equal policies hold the same
	// handle, so == and map keys work as on the numbers themselves, and
	// a Policy is one word. One word keeps store.Request at five, which
	// with a receiver and a context travel in registers: a seven-word
	// Request went on the stack and cost memstore's hot-key Take 8%
	// (admit) and 18% (deny). The zero Policy holds the zero handle.
	s unique.Handle[shape]
}

// shape is what a Policy holds. capacity is the bucket's size in tokens.
// unit and refill are the rate in lowest terms: refill level units per
// µs, unit level units per token, both at least 1 in a valid policy. Take
// tells validity by unit > 0 alone. An invalid policy built by Burst keeps
// the rate it was given for Validate to report: the tokens in refill and
// ^period in unit (negative; a negative period is kept as 0). The zero
// shape has unit 0. A calendar quota has unit 0 and its code, negated, in
// refill.
type shape struct {
	capacity, unit, refill int64
}

// mkPolicy returns the Policy of the shape (capacity, unit, refill); the
// zero shape is the zero Policy.
func mkPolicy(capacity, unit, refill int64) Policy {
	if capacity == 0 && unit == 0 && refill == 0 {
		return Policy{}
	}
	return Policy{unique.Make(shape{capacity, unit, refill})}
}

// shape returns what p holds.
func (p Policy) shape() shape {
	if p.s == (unique.Handle[shape]{}) {
		return shape{}
	}
	return p.s.Value()
}

// Capacity returns the bucket's size in tokens: the largest burst.
func (p Policy) Capacity() int64 { return p.shape().capacity }

// Rate returns the refill rate. It is the rate the policy was built with,
// though not always in the same terms: it comes back as whole tokens per
// second, minute, hour or day, the first of these that holds a whole number
// of tokens, or else in lowest terms. So PerMinute(60) comes back as
// PerSecond(1), PerSecond(2) as itself, Per(3, 7*time.Millisecond) as
// itself, and two policies built from one rate in different terms are
// equal. An invalid policy returns the rate as given; a calendar quota
// ([Quota]) has no rate and returns the zero Rate.
func (p Policy) Rate() Rate {
	ps := p.shape()
	switch {
	case ps.unit == inexact:
		return Rate{Period: time.Second, inexact: math.Float64frombits(uint64(ps.refill))}
	case ps.unit < 0:
		return Rate{Tokens: ps.refill, Period: time.Duration(^ps.unit)}
	case ps.unit == 0:
		return Rate{}
	}
	for _, d := range [...]time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		// refill/unit tokens per µs, in lowest terms: whole per d iff unit
		// divides d's µs.
		if us := d.Microseconds(); us%ps.unit == 0 {
			return Rate{Tokens: ps.refill * (us / ps.unit), Period: d}
		}
	}
	return Rate{Tokens: ps.refill, Period: time.Duration(ps.unit) * time.Microsecond}
}

// Unit returns how many level units make one token: the rate's period in
// microseconds divided by gcd(tokens, period). States count deficits in these
// units, so a token refills in exactly Unit/Refill microseconds. It is 0
// for an invalid policy and for a calendar quota ([Quota]).
func (p Policy) Unit() int64 { return max(p.shape().unit, 0) }

// Refill returns how many level units refill per microsecond: the rate's
// tokens divided by gcd(tokens, period); 0 for an invalid policy. For a
// calendar quota ([Quota]) it is negative: its period and offset, packed
// as the wire contract carries them (redisstore/WIRE.md), with Unit 0.
func (p Policy) Refill() int64 {
	ps := p.shape()
	if ps.unit <= 0 {
		if p.IsQuota() {
			return ps.refill
		}
		return 0
	}
	return ps.refill
}

// FillTime returns how long an empty bucket takes to refill to capacity,
// rounded up to the microsecond.
func (p Policy) FillTime() time.Duration {
	ps := p.shape()
	if ps.unit <= 0 {
		return 0
	}
	return time.Duration(ceilDiv(ps.capacity*ps.unit, ps.refill)) * time.Microsecond
}

// String formats p as "burst 100, 2/1s", or a quota as "10000 per month"
// (with its offset: "10000 per day, UTC+05:30").
func (p Policy) String() string {
	ps := p.shape()
	if period, off, ok := p.Calendar(); ok {
		if off == 0 {
			return fmt.Sprintf("%d per %v", ps.capacity, period)
		}
		sign := "+"
		if off < 0 {
			sign, off = "-", -off
		}
		h, m, s := int64(off/time.Hour), int64(off%time.Hour/time.Minute), int64(off%time.Minute/time.Second)
		if s != 0 {
			return fmt.Sprintf("%d per %v, UTC%s%02d:%02d:%02d", ps.capacity, period, sign, h, m, s)
		}
		return fmt.Sprintf("%d per %v, UTC%s%02d:%02d", ps.capacity, period, sign, h, m)
	}
	return fmt.Sprintf("burst %d, %v", ps.capacity, p.Rate())
}

// Validate reports whether p is within the documented bounds. The error
// wraps [ErrInvalidPolicy] and says which bound failed.
func (p Policy) Validate() error {
	ps := p.shape()
	if ps.unit > 0 { // only Burst sets it, once the bounds are checked
		return nil
	}
	if p.IsQuota() {
		return p.validateQuota()
	}
	if _, _, err := reduce(ps.capacity, p.Rate()); err != nil {
		return err
	}
	return fmt.Errorf("%w: build policies with Rate.Burst or NewPolicy", ErrInvalidPolicy)
}

// reduce returns r in lowest terms (unit level units per token, refill
// per µs), or an error wrapping ErrInvalidPolicy if capacity and r are
// outside the bounds of Policy.
func reduce(capacity int64, r Rate) (unit, refill int64, err error) {
	switch {
	case r.inexact != 0 && !(r.inexact > 0):
		return 0, 0, fmt.Errorf("%w: rate %v: tokens must be positive", ErrInvalidPolicy, r)
	case r.inexact != 0:
		return 0, 0, fmt.Errorf("%w: rate %v is not a whole number of tokens per whole microseconds: write it as algo.Per(tokens, period)", ErrInvalidPolicy, r)
	case capacity < 1 || capacity > MaxCapacity:
		return 0, 0, fmt.Errorf("%w: capacity %d outside [1, %d]", ErrInvalidPolicy, capacity, int64(MaxCapacity))
	case r.Tokens < 1:
		return 0, 0, fmt.Errorf("%w: rate %v: tokens must be at least 1", ErrInvalidPolicy, r)
	case r.Period < time.Microsecond || r.Period > MaxPeriod:
		return 0, 0, fmt.Errorf("%w: rate %v: period outside [1µs, %v]", ErrInvalidPolicy, r, MaxPeriod)
	case r.Period%time.Microsecond != 0:
		return 0, 0, fmt.Errorf("%w: rate %v: period is not a whole number of microseconds", ErrInvalidPolicy, r)
	}
	us := r.Period.Microseconds()
	// tokens/us ≤ MaxPerSecond/1e6; us·1000 ≤ 3.2e16 cannot overflow.
	if r.Tokens > us*(MaxPerSecond/1_000_000) {
		return 0, 0, fmt.Errorf("%w: rate %v above %d per second", ErrInvalidPolicy, r, int64(MaxPerSecond))
	}
	g := gcd(r.Tokens, us)
	unit, refill = us/g, r.Tokens/g
	if refill > MaxLevel || capacity > MaxLevel/unit {
		if refill > MaxLevel {
			return 0, 0, fmt.Errorf("%w: rate %v in lowest terms refills %d level units per µs, above 2^52", ErrInvalidPolicy, r, refill)
		}
		return 0, 0, fmt.Errorf("%w: burst %d at %v needs capacity × µs per token (in lowest terms, %d) above 2^52: at this rate a burst is at most %d",
			ErrInvalidPolicy, capacity, r, unit, MaxLevel/unit)
	}
	return unit, refill, nil
}

// gcd returns the greatest common divisor of two positive integers.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0, with a+b-1 not overflowing
// (guaranteed here by the MaxLevel bounds).
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Share returns one instance's share of p when n instances share it (a
// fallback that limits each instance alone while the shared store is down):
// capacity ⌊C/n⌋ but at least 1, and the rate divided by n exactly (tokens
// divided when n divides them, else the period multiplied), falling back to
// ⌊tokens/n⌋ (at least 1) when the longer period is out of bounds. A
// quota's share is ⌊N/n⌋ (at least 1) per the same calendar period. n ≤ 1,
// or an invalid p, returns p.
func (p Policy) Share(n int) Policy {
	if n <= 1 || p.Validate() != nil {
		return p
	}
	if period, off, ok := p.Calendar(); ok {
		return Quota(max(1, p.shape().capacity/int64(n)), period, off)
	}
	k := int64(n)
	c, r := max(1, p.Capacity()/k), p.Rate()
	candidates := []Rate{Per(r.Tokens/k, r.Period), Per(r.Tokens, r.Period*time.Duration(k)), Per(max(1, r.Tokens/k), r.Period)}
	if r.Tokens%k != 0 {
		candidates = candidates[1:]
	}
	for _, rate := range candidates {
		if r.Period <= MaxPeriod/time.Duration(k) || rate.Period == r.Period {
			if q := rate.Burst(c); q.Validate() == nil {
				return q
			}
		}
	}
	return p
}
