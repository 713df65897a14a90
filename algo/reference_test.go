package algo_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// ratBucket is a reference token bucket written the textbook way, in exact
// rationals and with none of TokenBucket's level units: tokens refill at
// Tokens/Period per µs up to the capacity, the bucket is read at the latest
// time seen, and waits are rounded up to whole µs.
type ratBucket struct {
	capacity, rate *big.Rat // tokens, tokens per µs
	tokens         *big.Rat
	last           int64 // µs; the latest time seen
}

func newRatBucket(p algo.Policy) *ratBucket {
	r := p.Rate()
	c := new(big.Rat).SetInt64(p.Capacity())
	return &ratBucket{capacity: c, rate: big.NewRat(r.Tokens, r.Period.Microseconds()), tokens: new(big.Rat).Set(c)}
}

// waitFor returns ⌈max(0, need−tokens)/rate⌉ µs.
func (b *ratBucket) waitFor(need *big.Rat) int64 {
	short := new(big.Rat).Sub(need, b.tokens)
	if short.Sign() <= 0 {
		return 0
	}
	q := short.Quo(short, b.rate)
	n, rem := new(big.Int).QuoRem(q.Num(), q.Denom(), new(big.Int))
	if rem.Sign() != 0 {
		n.Add(n, big.NewInt(1))
	}
	return n.Int64()
}

func (b *ratBucket) take(now, cost int64) algo.Result {
	if now > b.last {
		add := new(big.Rat).Mul(b.rate, new(big.Rat).SetInt64(now-b.last))
		if b.tokens.Add(b.tokens, add); b.tokens.Cmp(b.capacity) > 0 {
			b.tokens.Set(b.capacity)
		}
		b.last = now
	}
	res := algo.Result{}
	c := new(big.Rat).SetInt64(cost)
	if cost == 0 || b.tokens.Cmp(c) >= 0 { // a peek is allowed in debt too
		res.Allowed = true
		b.tokens.Sub(b.tokens, c)
	} else {
		res.RetryAfter = time.Duration(b.last-now+b.waitFor(c)) * time.Microsecond
	}
	res.Remaining = max(0, new(big.Int).Quo(b.tokens.Num(), b.tokens.Denom()).Int64())
	if w := b.waitFor(b.capacity); w > 0 {
		res.ResetAfter = time.Duration(b.last-now+w) * time.Microsecond
	}
	return res
}

// TestTokenBucketAgainstRationals drives TokenBucket and the rational
// reference with the same random actions (take at the current clock, let
// time pass, a caller with a lagging clock) and requires identical results:
// the level-unit arithmetic is the textbook bucket, exactly.
func TestTokenBucketAgainstRationals(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		ref := newRatBucket(p)
		var s algo.State
		now := rapid.Int64Range(0, maxT/2).Draw(t, "start")
		check := func(at, cost int64) {
			next, got := take(t, algo.TokenBucket{}, p, s, at, cost)
			if want := ref.take(at, cost); got != want {
				t.Fatalf("%v, state %+v: Take(%d, %d) = %+v, reference %+v", p, s, at, cost, got, want)
			}
			s = next
		}
		costs := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, min(p.Capacity(), 5)), rapid.Int64Range(0, p.Capacity()))
		t.Repeat(map[string]func(*rapid.T){
			"take": func(t *rapid.T) { check(now, costs.Draw(t, "cost")) },
			"wait": func(t *rapid.T) {
				now = min(now+rapid.Int64Range(0, 2*window(p)).Draw(t, "µs"), maxT)
			},
			"lagging caller": func(t *rapid.T) {
				check(max(0, now-rapid.Int64Range(0, window(p)).Draw(t, "lag")), costs.Draw(t, "cost"))
			},
		})
	})
}
