package algo

import "math/bits"

// TokenBucket is the token-bucket [Algorithm]: see the package
// documentation. Its zero value is ready to use; it has no fields.
//
// In any interval [t1, t2] it admits at most
// Capacity + ⌊rate·(t2−t1)⌋ tokens: the refill is exact in level units, and
// a token can be spent only once all its units have refilled. A client that
// retries at each RetryAfter gets exactly that, with one loss that whole-µs
// time imposes: when its cost fills the bucket, the µs at which it fits may
// refill a little past full (less than Refill units), and that spills.
type TokenBucket struct{}

var _ Algorithm = TokenBucket{}

// Name returns "tokenbucket".
func (TokenBucket) Name() string { return "tokenbucket" }

// Take applies a request of cost tokens at time now (µs) to the bucket in
// state s under policy p. A calendar quota ([Quota]) is decided by its own
// math instead (see Quota): its count resets at calendar boundaries.
//
// The state is (D, t): the deficit D below full, in level units (1 token =
// p.Unit() units), at time t. With full = Capacity·Unit and R = p.Refill()
// units per µs:
//
//  1. Time never runs backwards: the bucket is evaluated at t₁ = max(now, t),
//     so a stale caller's clock mints no tokens.
//  2. Refill: D₁ = max(0, D − (t₁−t)·R). The product is formed in 128 bits
//     and used only when it is below D (the Lua twin compares t₁−t with
//     ⌈D/R⌉ first, so its product is below D + R).
//  3. Admit when D₁ + cost·Unit ≤ full (formed as D₁ ≤ full − cost·Unit in
//     the Lua twin), and charge: D₂ = D₁ + cost·Unit.
//     A cost of 0 is always admitted, even in debt.
//  4. Denied: RetryAfter = (t₁−now) + ⌈(D₁ − full + cost·Unit) / R⌉.
//  5. ResetAfter = (t₁−now) + ⌈D₂/R⌉ with D₂ the new deficit, or zero
//     when D₂ = 0 (the bucket is full, even if the caller's clock is behind).
//
// A deficit above full is debt, which only a reservation ([TokenBucket.Reserve])
// makes: the bucket then holds no token, every request of cost 1 or more is
// denied until the debt has refilled, and RetryAfter counts the debt too.
// The debt is at most one full bucket, so D ≤ 2·full; a larger stored
// deficit (from a policy that shrank, or a foreign writer) is read as 2·full.
//
// Bounds (all in int64 here and in IEEE doubles in the Lua twin, exact up
// to 2^53): Validate ensures full ≤ 2^52 and R ≤ 2^52; Take ensures
// 0 ≤ D ≤ 2·full, cost ≤ Capacity and times in [0, 2^53). Then every
// intermediate the Lua twin forms is at most 2·full ≤ 2^53: D,
// D₁ − full + cost·Unit (formed in that order), full − cost·Unit, and
// D₂ ≤ full when admitted; and t₁−t < 2^53. (Go compares D₁ + cost·Unit,
// up to 3·2^52, in int64.) ⌈x/R⌉ is (x + R − 1)/R here, in int64, and
// exact division with fmod in the Lua twin, so its dividends stay ≤ 2^53.
func (tb TokenBucket) Take(p Policy, s State, now, cost int64) (State, Result, error) {
	var res Result
	s, err := tb.TakeTo(&res, p, s, now, cost)
	return s, res, err
}

// TakeTo is Take with the Result written to *res (left zero on error): the
// same answer, for a store's hot path. A Result has five fields, too many
// for the compiler to keep in registers, so a Result returned from a call
// is spilled and then copied, and the copy stalls on the stores just made;
// written in place, it is read back field by field.
func (TokenBucket) TakeTo(res *Result, p Policy, s State, now, cost int64) (State, error) {
	ps := p.shape()
	if err := checkTake(p, s, now, cost); err != nil {
		if err == ErrQuotaUnsupported { // a calendar quota: quota.go
			return takeQuota(res, p, s, now, cost)
		}
		*res = Result{}
		return s, err
	}
	full, r := ps.capacity*ps.unit, ps.refill
	d, t := refill(full, r, s, now)
	// The Result is stored field by field: a composite literal would be
	// built in a temporary and copied, stalling on its own stores.
	need := cost * ps.unit
	res.Allowed = d+need <= full // ≤ 3·2^52 in int64; the Lua twin forms d ≤ full − need
	res.RetryAfter = 0
	if res.Allowed {
		d += need
	} else if need == 0 { // a peek, in debt
		res.Allowed = true
	} else {
		res.RetryAfter = Micros(t - now + refillTime(d-full+need, r))
	}
	res.Remaining = remaining(ps.capacity, ps.unit, d)
	res.ResetAfter = 0
	if d > 0 { // a full bucket has nothing to wait for, whatever the clock
		res.ResetAfter = Micros(t - now + refillTime(d, r))
	}
	return State{Level: d, Stamp: t, Prev: s.Prev}, nil
}

// IdleAt returns when the bucket in state s is full again.
func (TokenBucket) IdleAt(p Policy, s State) int64 {
	ps := p.shape()
	if ps.unit <= 0 || s.Level <= 0 {
		return s.Stamp
	}
	return s.Stamp + refillTime(min(s.Level, 2*ps.capacity*ps.unit), ps.refill)
}

// refill returns the deficit of the bucket in state s (read as at most
// 2·full: one full bucket of debt) refilled to t₁ = max(now, s.Stamp), and
// t₁: steps 1 and 2 of [TokenBucket.Take].
func refill(full, r int64, s State, now int64) (d, t int64) {
	d, t = min(s.Level, 2*full), s.Stamp
	if now > t {
		if d > 0 {
			// now−t ≥ ⌈D/R⌉ exactly when (now−t)·R ≥ D: one 128-bit
			// multiply instead of a division, and the product, when
			// below D, is the refill.
			hi, lo := bits.Mul64(uint64(now-t), uint64(r))
			if hi != 0 || lo >= uint64(d) {
				d = 0
			} else {
				d -= int64(lo)
			}
		}
		t = now
	}
	return d, t
}

// remaining is ⌊(capacity·unit − d)/unit⌋, the whole tokens left at
// deficit d, without a division when the bucket is within one token of full
// or of empty (a light user's or a throttled one's).
func remaining(capacity, unit, d int64) int64 {
	switch {
	case d == 0:
		return capacity
	case d <= unit:
		return capacity - 1
	case d > (capacity-1)*unit:
		return 0
	}
	return (capacity*unit - d) / unit
}

// refillTime is ⌈d/r⌉, the µs in which r units per µs refill d, with no
// division in the common case of one unit per µs.
func refillTime(d, r int64) int64 {
	if r == 1 {
		return d
	}
	return ceilDiv(d, r)
}
