package algo_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// TestPropDenyBoundSound: a DenyBound learnt from a token bucket's answer
// at t0 never denies a request the bucket would admit at any later time,
// whatever other callers took in between (they only take), and when it
// gives an answer with no other traffic (Decide) that answer is the
// bucket's own, to the µs.
func TestPropDenyBoundSound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		full := p.Capacity() * p.Unit()
		t0 := rapid.Int64Range(0, maxT).Draw(t, "t0")
		// The stored stamp is at or before t0: clocks agree (hybrid's
		// allowance covers a stamp ahead of the cache's clock).
		s := algo.State{Level: rapid.Int64Range(0, full).Draw(t, "level"), Stamp: t0 - rapid.Int64Range(0, min(t0, 1<<40)).Draw(t, "age")}
		cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
		s, res := take(t, algo.TokenBucket{}, p, s, t0, cost)
		b, ok := p.DenyBound(cost, res, res.Allowed)
		if !ok {
			t.Fatalf("Policy.DenyBound refused a token bucket's own answer %+v", res)
		}
		quiet := s  // the bucket with no other traffic
		var e int64 // µs since t0, moving forward
		for range rapid.IntRange(1, 8).Draw(t, "steps") {
			e += rapid.Int64Range(0, 4*max(1, tokenTime(p))).Draw(t, "step")
			if others := rapid.Int64Range(0, p.Capacity()).Draw(t, "others"); others > 0 {
				s, _ = take(t, algo.TokenBucket{}, p, s, t0+e, others) // admitted or not: others only take
			}
			c := rapid.Int64Range(0, p.Capacity()).Draw(t, "c")
			_, truth := take(t, algo.TokenBucket{}, p, s, t0+e, c)
			if b.Denies(c, e) && truth.Allowed {
				t.Fatalf("bound %+v denies cost %d at +%dµs, but the bucket admits: %+v", b, c, e, truth)
			}
			_, alone := take(t, algo.TokenBucket{}, p, quiet, t0+e, c)
			if got, ok := b.Decide(c, e, e); ok && got != alone {
				t.Fatalf("Decide(cost %d, +%dµs) = %+v, the bucket alone answers %+v", c, e, got, alone)
			}
		}
	})
}

// TestDenyBoundZero: the zero DenyBound denies nothing.
func TestDenyBoundZero(t *testing.T) {
	var b algo.DenyBound
	if b.Denies(1, 0) || b.IdleAfter() != 0 {
		t.Fatal("the zero DenyBound denies")
	}
	if _, ok := b.Decide(1, 0, 0); ok {
		t.Fatal("the zero DenyBound decides")
	}
}
