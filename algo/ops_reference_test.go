package algo_test

import (
	"math/big"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// The rational reference bucket (reference_test.go) for the operations of
// ops.go, written from their documentation in tokens: debt is a negative
// number of tokens.

// refillTo refills the bucket to now (never backwards).
func (b *ratBucket) refillTo(now int64) {
	if now > b.last {
		add := new(big.Rat).Mul(b.rate, new(big.Rat).SetInt64(now-b.last))
		if b.tokens.Add(b.tokens, add); b.tokens.Cmp(b.capacity) > 0 {
			b.tokens.Set(b.capacity)
		}
		b.last = now
	}
}

// result is the Result of an answer at now.
func (b *ratBucket) result(now int64, allowed bool, retry int64) algo.Result {
	res := algo.Result{Allowed: allowed}
	if !allowed {
		res.RetryAfter = time.Duration(retry) * time.Microsecond
	}
	if b.tokens.Sign() > 0 {
		res.Remaining = new(big.Int).Quo(b.tokens.Num(), b.tokens.Denom()).Int64()
	}
	if w := b.waitFor(b.capacity); w > 0 {
		res.ResetAfter = time.Duration(b.last-now+w) * time.Microsecond
	}
	return res
}

// units converts tokens to level units (an exact integer by construction).
func units(p algo.Policy, tokens *big.Rat) int64 {
	u := new(big.Rat).Mul(tokens, new(big.Rat).SetInt64(p.Unit()))
	if !u.IsInt() {
		panic("not a whole number of level units: " + u.String())
	}
	return u.Num().Int64()
}

// unit returns the policy of b (capacity and rate are all it needs).
func (b *ratBucket) policy() algo.Policy {
	r := b.rate
	p, _ := algo.NewPolicy(b.capacity.Num().Int64(), algo.Per(r.Num().Int64(), time.Duration(r.Denom().Int64())*time.Microsecond))
	return p
}

func (b *ratBucket) refund(now, n int64) algo.Result {
	b.refillTo(now)
	if b.tokens.Add(b.tokens, new(big.Rat).SetInt64(n)); b.tokens.Cmp(b.capacity) > 0 {
		b.tokens.Set(b.capacity)
	}
	return b.result(now, true, 0)
}

func (b *ratBucket) takeAtMost(now, n int64) (int64, algo.Result) {
	b.refillTo(now)
	g := int64(0)
	if b.tokens.Sign() > 0 {
		g = min(n, new(big.Int).Quo(b.tokens.Num(), b.tokens.Denom()).Int64())
	}
	if g > 0 {
		b.tokens.Sub(b.tokens, new(big.Rat).SetInt64(g))
		return g, b.result(now, true, 0)
	}
	return 0, b.result(now, n == 0, b.last-now+b.waitFor(big.NewRat(1, 1)))
}

func (b *ratBucket) reserve(now, cost, maxWait int64) algo.Reservation {
	b.refillTo(now)
	c := new(big.Rat).SetInt64(cost)
	if cost == 0 || b.tokens.Cmp(c) >= 0 {
		b.tokens.Sub(b.tokens, c)
		return algo.Reservation{Result: b.result(now, true, 0)}
	}
	w := b.waitFor(c)
	lim := new(big.Rat).Quo(b.capacity, b.rate) // the longest debt, in µs
	limit := min(max(maxWait, 0), new(big.Int).Quo(lim.Num(), lim.Denom()).Int64())
	if w > limit {
		return algo.Reservation{Result: b.result(now, false, b.last-now+w-limit)}
	}
	// At last+w the bucket holds min(capacity, tokens + w·rate); the take
	// there leaves that less cost, which seen from now is w·rate less.
	wr := new(big.Rat).Mul(b.rate, new(big.Rat).SetInt64(w))
	atAt := new(big.Rat).Add(b.tokens, wr)
	if atAt.Cmp(b.capacity) > 0 {
		atAt.Set(b.capacity)
	}
	atAt.Sub(atAt, c)
	after := new(big.Rat).Sub(atAt, wr)
	spent := new(big.Rat).Sub(b.tokens, after)
	b.tokens = after
	p := b.policy()
	return algo.Reservation{
		Result: b.result(now, true, 0), Delay: time.Duration(w) * time.Microsecond,
		Ticket: algo.Ticket{At: b.last + w, Units: units(p, spent), Mark: units(p, new(big.Rat).Sub(b.capacity, atAt))},
	}
}

// cancel gives back the reservation's tokens if the bucket holds exactly
// what it left, refilled, and its time has not come.
func (b *ratBucket) cancel(now int64, tk algo.Ticket) (bool, algo.Result) {
	b.refillTo(now)
	p := b.policy()
	// What the reservation left at At, seen now: capacity − Mark, less
	// the refill until At.
	left := new(big.Rat).Sub(b.capacity, big.NewRat(tk.Mark, p.Unit()))
	left.Sub(left, new(big.Rat).Mul(b.rate, new(big.Rat).SetInt64(tk.At-b.last)))
	ok := tk.Units > 0 && b.last < tk.At && b.tokens.Cmp(left) == 0
	if ok {
		if b.tokens.Add(b.tokens, big.NewRat(tk.Units, p.Unit())); b.tokens.Cmp(b.capacity) > 0 {
			b.tokens.Set(b.capacity)
		}
	}
	return ok, b.result(now, true, 0)
}
