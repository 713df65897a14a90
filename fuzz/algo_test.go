package fuzz

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// algorithms are every algorithm algo has.
var algorithms = []algo.Algorithm{algo.TokenBucket{}, algo.FixedWindow{}, algo.SlidingWindow{}}

// drawPolicy draws a valid policy: capacity up to 1000, up to 1000 tokens
// per period of 1 µs to 1 day (every such combination is within algo's
// bounds).
func drawPolicy(t *rapid.T) algo.Policy {
	p, err := algo.NewPolicy(rapid.Int64Range(1, 1000).Draw(t, "capacity"),
		algo.Per(rapid.Int64Range(1, 1000).Draw(t, "tokens"),
			time.Duration(rapid.Int64Range(1, 86_400_000_000).Draw(t, "period µs"))*time.Microsecond))
	if err != nil {
		t.Fatalf("drawPolicy: %v", err)
	}
	return p
}

// drawCost draws a cost that is often large enough to be denied, and
// sometimes invalid (-1, or one above capacity).
func drawCost(t *rapid.T, p algo.Policy) int64 {
	c := p.Capacity()
	return rapid.OneOf(rapid.Int64Range(-1, c+1), rapid.Int64Range(max(c/2, 1), c), rapid.Just(c), rapid.Just(int64(1))).Draw(t, "cost")
}

// checkResult checks what every Result must satisfy.
func checkResult(t *rapid.T, p algo.Policy, cost int64, r algo.Result) {
	switch {
	case r.Remaining < 0 || r.Remaining > p.Capacity():
		t.Fatalf("Remaining %d outside [0, %d]", r.Remaining, p.Capacity())
	case r.Allowed && r.RetryAfter != 0:
		t.Fatalf("admitted with RetryAfter %v", r.RetryAfter)
	case !r.Allowed && r.RetryAfter <= 0:
		t.Fatalf("denied with RetryAfter %v", r.RetryAfter)
	case cost == 0 && !r.Allowed:
		t.Fatalf("a peek (cost 0) was denied")
	case r.ResetAfter < 0:
		t.Fatalf("ResetAfter %v", r.ResetAfter)
	}
}

// algorithmsProp: a random sequence of Takes on one bucket.
func algorithmsProp(t *rapid.T) {
	alg := rapid.SampledFrom(algorithms).Draw(t, "algorithm")
	p := drawPolicy(t)
	now := rapid.Int64Range(0, algo.MaxTime/2).Draw(t, "start µs")
	var s algo.State
	var adm [][2]int64 // each admission's time (µs since start) and cost
	start := now
	for range rapid.IntRange(5, 60).Draw(t, "steps") {
		now += rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 10), rapid.Int64Range(0, 2*p.FillTime().Microseconds())).Draw(t, "advance µs")
		cost := drawCost(t, p)
		ns, r, err := alg.Take(p, s, now, cost)
		switch {
		case cost < 0 || cost > p.Capacity():
			if !errors.Is(err, algo.ErrInvalidCost) && !errors.Is(err, algo.ErrCostExceedsCapacity) || ns != s {
				t.Fatalf("%s cost %d: err %v, state %v → %v", alg.Name(), cost, err, s, ns)
			}
			continue
		case err != nil:
			t.Fatalf("%s Take(%v, %+v, %d, %d): %v", alg.Name(), p, s, now, cost, err)
		}
		checkResult(t, p, cost, r)
		if ns.Stamp < s.Stamp {
			t.Fatalf("%s: stamp went back from %d to %d", alg.Name(), s.Stamp, ns.Stamp)
		}
		if !r.Allowed {
			// RetryAfter is exact: admitted then, not a µs earlier.
			at := now + r.RetryAfter.Microseconds()
			if _, r2, _ := alg.Take(p, ns, at, cost); !r2.Allowed {
				t.Fatalf("%s: denied at %d with RetryAfter %v, still denied then (%+v)", alg.Name(), now, r.RetryAfter, r2)
			}
			if _, r2, _ := alg.Take(p, ns, at-1, cost); r2.Allowed {
				t.Fatalf("%s: denied at %d with RetryAfter %v, admitted a µs earlier", alg.Name(), now, r.RetryAfter)
			}
		}
		// From IdleAt on, the state behaves as no state.
		idle := max(alg.IdleAt(p, ns), now)
		_, a, _ := alg.Take(p, ns, idle, 1)
		_, b, _ := alg.Take(p, algo.State{}, idle, 1)
		if a != b {
			t.Fatalf("%s: at IdleAt %d state %+v answers %+v, no state %+v", alg.Name(), idle, ns, a, b)
		}
		if r.Allowed && cost > 0 {
			adm = append(adm, [2]int64{now - start, cost})
		}
		s = ns
	}
	if _, ok := alg.(algo.FixedWindow); ok {
		return // it breaks the law by design (see package sim)
	}
	// The never-exceed law, on every interval between two admissions (at
	// most 60: the quadratic check is quick, and needs no checker but
	// algo's bound).
	for i := range adm {
		var sum int64
		for _, a := range adm[i:] {
			sum += a[1]
			if d := time.Duration(a[0]-adm[i][0]) * time.Microsecond; sum > p.Bound(d) {
				t.Fatalf("%s broke the never-exceed law: %d admitted in %v from %d µs, bound %d", alg.Name(), sum, d, adm[i][0], p.Bound(d))
			}
		}
	}
}

// FuzzAlgorithms runs random Take sequences against every algorithm.
func FuzzAlgorithms(f *testing.F) { f.Fuzz(rapid.MakeFuzz(algorithmsProp)) }

// TestAlgorithms runs the same property under rapid's own generator.
func TestAlgorithms(t *testing.T) { rapid.Check(t, algorithmsProp) }

// FuzzPolicy feeds arbitrary integers to policy construction and Take.
func FuzzPolicy(f *testing.F) {
	f.Fuzz(func(t *testing.T, capacity, tokens, period, level, stamp, prev, now, cost int64) {
		p, err := algo.NewPolicy(capacity, algo.Per(tokens, time.Duration(period)))
		if err != nil {
			if !errors.Is(err, algo.ErrInvalidPolicy) {
				t.Fatalf("NewPolicy(%d, %d/%d): error %v is not ErrInvalidPolicy", capacity, tokens, period, err)
			}
			if p.Validate() == nil {
				t.Fatal("NewPolicy failed but the policy validates")
			}
		} else if p.Unit() < 1 || p.Refill() < 1 || p.FillTime() <= 0 || p.Capacity() != capacity {
			t.Fatalf("valid policy %v with unit %d, refill %d, fill time %v", p, p.Unit(), p.Refill(), p.FillTime())
		}
		s := algo.State{Level: level, Stamp: stamp, Prev: prev}
		for _, alg := range algorithms {
			ns, r, terr := alg.Take(p, s, now, cost)
			_ = alg.IdleAt(p, s)
			if terr != nil {
				if !isAlgoError(terr) || ns != s {
					t.Fatalf("%s: error %v (state %+v → %+v): not an algo sentinel, or the state changed", alg.Name(), terr, s, ns)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: Take with invalid policy %v succeeded", alg.Name(), p)
			}
			if r.Remaining < 0 || r.Remaining > capacity || r.Allowed == (r.RetryAfter > 0) || r.ResetAfter < 0 {
				t.Fatalf("%s Take(%v, %+v, %d, %d) = %+v", alg.Name(), p, s, now, cost, r)
			}
		}
	})
}

// isAlgoError reports whether err matches one of algo's sentinels.
func isAlgoError(err error) bool {
	for _, want := range []error{algo.ErrInvalidPolicy, algo.ErrInvalidCost, algo.ErrCostExceedsCapacity, algo.ErrInvalidTime, algo.ErrInvalidState} {
		if errors.Is(err, want) {
			return true
		}
	}
	return false
}
