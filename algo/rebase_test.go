package algo_test

import (
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// TestRebase pins named changes: a raised and a lowered limit under each
// rule, debt, a full bucket and a stale clock.
func TestRebase(t *testing.T) {
	p10 := algo.PerSecond(1).Burst(10)    // unit 1e6
	p100 := algo.PerSecond(10).Burst(100) // unit 1e5
	p4 := algo.PerMinute(1).Burst(4)      // unit 6e7
	const tok10, tok100 = 1_000_000, 100_000
	for _, tc := range []struct {
		name     string
		from, to algo.Policy
		s        algo.State
		now      int64
		rule     algo.ChangeRule
		want     algo.State
	}{
		{"same policy is the refill", p10, p10, algo.State{Level: 5 * tok10, Stamp: 100}, 100 + tok10, algo.KeepTokens,
			algo.State{Level: 4 * tok10, Stamp: 100 + tok10}},
		{"raised: keeps its 6 tokens", p10, p100, algo.State{Level: 4 * tok10, Stamp: 7}, 7, algo.KeepTokens,
			algo.State{Level: 94 * tok100, Stamp: 7}},
		{"raised: a fraction of a level unit rounds down", p10, p100, algo.State{Level: 4*tok10 + 1, Stamp: 7}, 7, algo.KeepTokens,
			algo.State{Level: 94*tok100 + 1, Stamp: 7}},
		{"raised proportionally: 60% of 100", p10, p100, algo.State{Level: 4 * tok10, Stamp: 7}, 7, algo.Proportional,
			algo.State{Level: 40 * tok100, Stamp: 7}},
		{"lowered: 6 tokens capped at 4", p10, p4, algo.State{Level: 4 * tok10, Stamp: 7}, 7, algo.KeepTokens,
			algo.State{Level: 0, Stamp: 7}},
		{"lowered proportionally: 60% of 4 is 2.4 tokens", p10, p4, algo.State{Level: 4 * tok10, Stamp: 7}, 7, algo.Proportional,
			algo.State{Level: 4*60_000_000 - 144_000_000, Stamp: 7}},
		{"full stays full, even raised", p10, p100, algo.State{Level: tok10, Stamp: 7}, 7 + tok10, algo.KeepTokens,
			algo.State{Level: 0, Stamp: 7 + tok10}},
		{"debt of 3 tokens stays 3 tokens", p10, p100, algo.State{Level: 13 * tok10, Stamp: 7}, 7, algo.KeepTokens,
			algo.State{Level: 103 * tok100, Stamp: 7}},
		{"debt is capped at one bucket", p100, p4, algo.State{Level: 150 * tok100, Stamp: 7}, 7, algo.KeepTokens,
			algo.State{Level: 8 * 60_000_000, Stamp: 7}},
		{"proportional debt: 30% of a bucket", p10, p100, algo.State{Level: 13 * tok10, Stamp: 7}, 7, algo.Proportional,
			algo.State{Level: 130 * tok100, Stamp: 7}},
		{"a stale clock: evaluated at the stamp", p10, p100, algo.State{Level: 4 * tok10, Stamp: 500}, 7, algo.KeepTokens,
			algo.State{Level: 94 * tok100, Stamp: 500}},
		{"Prev is kept", p10, p100, algo.State{Level: 4 * tok10, Stamp: 7, Prev: 3}, 7, algo.KeepTokens,
			algo.State{Level: 94 * tok100, Stamp: 7, Prev: 3}},
	} {
		got, err := algo.TokenBucket{}.Rebase(tc.from, tc.to, tc.s, tc.now, tc.rule)
		if err != nil || got != tc.want {
			t.Errorf("%s: Rebase(%v, %v, %+v, %d, %v) = %+v, %v; want %+v", tc.name, tc.from, tc.to, tc.s, tc.now, tc.rule, got, err, tc.want)
		}
	}
}

// TestRebaseQuota pins changes to and from calendar quotas: the count
// used carries over between quotas of one calendar, anything else starts
// afresh.
func TestRebaseQuota(t *testing.T) {
	month, month2 := algo.Quota(100, algo.Month, 0), algo.Quota(200, algo.Month, 0)
	day, bucket := algo.Quota(100, algo.Day, 0), algo.PerSecond(1).Burst(10)
	used := algo.State{Level: 30, Stamp: 5000, Prev: 2}
	for _, tc := range []struct {
		name     string
		from, to algo.Policy
		s        algo.State
		now      int64
		rule     algo.ChangeRule
		want     algo.State
	}{
		{"same quota", month, month, used, 10, algo.KeepTokens, used},
		{"raised: the count used is kept", month, month2, used, 10, algo.KeepTokens, used},
		{"raised proportionally: 30% of 200", month, month2, used, 10, algo.Proportional, algo.State{Level: 60, Stamp: 5000, Prev: 2}},
		{"lowered proportionally, rounded up", month2, month, algo.State{Level: 31, Stamp: 5000}, 10, algo.Proportional, algo.State{Level: 16, Stamp: 5000}},
		{"the period is over", month, month2, used, 5000, algo.KeepTokens, algo.State{Prev: 2}},
		{"another calendar: afresh", month, day, used, 10, algo.KeepTokens, algo.State{Prev: 2}},
		{"a bucket becomes a quota: afresh", bucket, month, algo.State{Level: 5, Stamp: 9, Prev: 2}, 10, algo.KeepTokens, algo.State{Prev: 2}},
		{"a quota becomes a bucket: afresh", month, bucket, used, 10, algo.Proportional, algo.State{Prev: 2}},
	} {
		got, err := algo.TokenBucket{}.Rebase(tc.from, tc.to, tc.s, tc.now, tc.rule)
		if err != nil || got != tc.want {
			t.Errorf("%s: Rebase(%v, %v, %+v, %d, %v) = %+v, %v; want %+v", tc.name, tc.from, tc.to, tc.s, tc.now, tc.rule, got, err, tc.want)
		}
	}
	if _, err := (algo.TokenBucket{}).Rebase(month, algo.Quota(0, algo.Month, 0), used, 10, algo.KeepTokens); err == nil {
		t.Error("Rebase to an invalid quota succeeded")
	}
}

// TestRebaseErrors: bad policies, rules, times and states are errors and
// return the state unchanged.
func TestRebaseErrors(t *testing.T) {
	p := algo.PerSecond(1).Burst(10)
	s := algo.State{Level: 5, Stamp: 9}
	for _, tc := range []struct {
		from, to algo.Policy
		s        algo.State
		now      int64
		rule     algo.ChangeRule
		want     error
	}{
		{algo.Policy{}, p, s, 9, algo.KeepTokens, algo.ErrInvalidPolicy},
		{p, algo.Policy{}, s, 9, algo.KeepTokens, algo.ErrInvalidPolicy},
		{p, p, s, 9, algo.ChangeRule(2), algo.ErrInvalidPolicy},
		{p, p, s, -1, algo.KeepTokens, algo.ErrInvalidTime},
		{p, p, algo.State{Level: -1}, 9, algo.KeepTokens, algo.ErrInvalidState},
	} {
		got, err := algo.TokenBucket{}.Rebase(tc.from, tc.to, tc.s, tc.now, tc.rule)
		if !errors.Is(err, tc.want) || got != tc.s {
			t.Errorf("Rebase(%v, %v, %+v, %d, %v) = %+v, %v; want %v", tc.from, tc.to, tc.s, tc.now, tc.rule, got, err, tc.want)
		}
	}
}

// drawState draws a state under p: any deficit up to two full buckets (or
// far above, as a foreign writer may leave), and a stamp near now.
func drawState(t *rapid.T, p algo.Policy, now int64) algo.State {
	full := p.Capacity() * p.Unit()
	level := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, full), rapid.Int64Range(0, 2*full),
		rapid.Int64Range(full-p.Unit(), full+p.Unit()), rapid.Int64Min(0)).Draw(t, "level")
	stamp := rapid.Int64Range(max(0, now-3*window(p)), min(algo.MaxTime, now+tokenTime(p))).Draw(t, "stamp")
	return algo.State{Level: max(level, 0), Stamp: stamp}
}

// held returns the tokens the deficit d leaves under p, as an exact
// fraction (negative in debt), after the refill Take does at now.
func held(t *rapid.T, p algo.Policy, s algo.State, now int64) *big.Rat {
	next, _ := take(t, algo.TokenBucket{}, p, s, now, 0)
	full := p.Capacity() * p.Unit()
	return big.NewRat(full-next.Level, p.Unit())
}

// TestPropRebase checks both rules exactly against big-number arithmetic:
// the new deficit is within [0, 2·full] of the new policy, the stamp is
// Take's, a full bucket stays full, KeepTokens holds the old tokens rounded
// down to the new unit and capped (never more than before), Proportional
// the old fraction rounded down (within one unit), and debt carries over
// rounded up and capped at one bucket.
func TestPropRebase(t *testing.T) {
	cases := map[algo.ChangeRule]int{}
	rapid.Check(t, func(t *rapid.T) {
		from, to := drawPolicy(t), drawPolicy(t)
		now := rapid.Int64Range(0, maxT).Draw(t, "now")
		s := drawState(t, from, now)
		rule := rapid.SampledFrom([]algo.ChangeRule{algo.KeepTokens, algo.Proportional}).Draw(t, "rule")
		cases[rule]++
		got, err := algo.TokenBucket{}.Rebase(from, to, s, now, rule)
		if err != nil {
			t.Fatalf("Rebase: %v", err)
		}
		refilled, _ := take(t, algo.TokenBucket{}, from, s, now, 0)
		fullT := to.Capacity() * to.Unit()
		if got.Stamp != refilled.Stamp || got.Level < 0 || got.Level > 2*fullT {
			t.Fatalf("Rebase(%v→%v, %+v, %d) = %+v: stamp or level out of range", from, to, s, now, got)
		}
		old := held(t, from, s, now)
		after := big.NewRat(fullT-got.Level, to.Unit())
		if refilled.Level == 0 {
			if got.Level != 0 {
				t.Fatalf("a full bucket became %+v", got)
			}
			return
		}
		// want: the exact value the rule keeps, in tokens of to.
		want := new(big.Rat).Set(old)
		if rule == algo.Proportional {
			capF := big.NewRat(from.Capacity(), 1)
			want.Mul(want.Quo(want, capF), big.NewRat(to.Capacity(), 1))
		}
		capT := big.NewRat(to.Capacity(), 1)
		unitT := big.NewRat(1, to.Unit())
		switch {
		case want.Cmp(capT) >= 0:
			if got.Level != 0 {
				t.Fatalf("%v: %v tokens (%v kept) above capacity %d should be full, got %+v", rule, old, want, to.Capacity(), got)
			}
		case want.Sign() >= 0: // rounded down: after ≤ want < after + 1 unit
			if after.Cmp(want) > 0 || new(big.Rat).Add(after, unitT).Cmp(want) <= 0 {
				t.Fatalf("%v: held %v tokens, to keep %v: got %v (%+v)", rule, old, want, after, got)
			}
		default: // debt, rounded up (after ≤ want), capped at one bucket
			floor := new(big.Rat).Neg(capT)
			if want.Cmp(floor) <= 0 {
				if got.Level != 2*fullT {
					t.Fatalf("%v: debt %v beyond a bucket should cap, got %+v", rule, want, got)
				}
			} else if after.Cmp(want) > 0 || new(big.Rat).Add(after, unitT).Cmp(want) <= 0 {
				t.Fatalf("%v: debt %v kept as %v (%+v)", rule, want, after, got)
			}
		}
		if rule == algo.KeepTokens && after.Cmp(old) > 0 && got.Level < 2*fullT { // a capped debt is forgiven
			t.Fatalf("KeepTokens minted tokens: %v before, %v after", old, after)
		}
	})
	t.Logf("cases by rule: %v", cases)
}

// TestPropRebaseSame: a change to the same policy changes nothing any
// operation sees: a Take after it answers as on the original state.
func TestPropRebaseSame(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		now := rapid.Int64Range(0, maxT).Draw(t, "now")
		s := drawState(t, p, now)
		s.Level = min(s.Level, 2*p.Capacity()*p.Unit())
		cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
		for _, rule := range []algo.ChangeRule{algo.KeepTokens, algo.Proportional} {
			r, err := algo.TokenBucket{}.Rebase(p, p, s, now, rule)
			if err != nil {
				t.Fatal(err)
			}
			s1, res1 := take(t, algo.TokenBucket{}, p, s, now, cost)
			s2, res2 := take(t, algo.TokenBucket{}, p, r, now, cost)
			if s1 != s2 || res1 != res2 {
				t.Fatalf("%v: Take after Rebase to itself = %+v %+v, without = %+v %+v", rule, s2, res2, s1, res1)
			}
		}
	})
}

// TestPropRebaseLaw: a run under one policy, a change, a run under another.
// Each segment keeps its own policy's law, and, with KeepTokens, any
// interval [t1, t2] across the change at tc admits at most
// capacityF + rateF·(tc−t1) + rateT·(t2−tc): the tokens kept are never
// more than the old bucket held (with the larger capacity for a bucket
// full at the change, which starts the new policy full).
func TestPropRebaseLaw(t *testing.T) {
	changes := 0
	rapid.Check(t, func(t *rapid.T) {
		from, to := drawPolicy(t), drawPolicy(t)
		rule := rapid.SampledFrom([]algo.ChangeRule{algo.KeepTokens, algo.Proportional}).Draw(t, "rule")
		run1 := drawRun(t, from, 40, false)
		out1 := replay(t, algo.TokenBucket{}, from, algo.State{}, run1)
		checkLaw(t, from, out1)
		last := out1[len(out1)-1]
		tc := last.at + rapid.Int64Range(0, 2*tokenTime(from)).Draw(t, "gap")
		s, err := algo.TokenBucket{}.Rebase(from, to, last.after, tc, rule)
		if err != nil {
			t.Fatal(err)
		}
		changes++
		run2 := drawRun(t, to, 40, false)
		shift := tc - run2[0].at
		for i := range run2 {
			run2[i].at = min(run2[i].at+shift, algo.MaxTime-1)
			run2[i].clock = run2[i].at
		}
		out2 := replay(t, algo.TokenBucket{}, to, s, run2)
		checkLaw(t, to, out2)
		if rule != algo.KeepTokens {
			return
		}
		// A bucket full at the change starts the new policy full (see
		// Rebase): then the burst is the larger capacity.
		base := from.Capacity()
		if refilled, _ := take(t, algo.TokenBucket{}, from, last.after, tc, 0); refilled.Level == 0 {
			base = max(base, to.Capacity())
		}
		all := append(out1, out2...)
		rateF := big.NewRat(from.Refill(), from.Unit())
		rateT := big.NewRat(to.Refill(), to.Unit())
		for i := range all {
			if i >= len(out1) {
				break // intervals starting after the change are the second segment's
			}
			var sum int64
			for j := i; j < len(all); j++ {
				if all[j].res.Allowed {
					sum += all[j].cost
				}
				if j < len(out1) {
					continue
				}
				bound := new(big.Rat).Mul(rateF, big.NewRat(tc-all[i].at, 1))
				bound.Add(bound, new(big.Rat).Mul(rateT, big.NewRat(all[j].at-tc, 1)))
				bound.Add(bound, big.NewRat(base, 1))
				if big.NewRat(sum, 1).Cmp(bound) > 0 {
					t.Fatalf("%v → %v (%v, state %+v → %+v): requests %d..%d across the change at %d admitted %d > %v", from, to, rule, last.after, s, i, j, tc, sum, bound.FloatString(3))
				}
			}
		}
	})
	t.Logf("%d policy changes", changes)
}

// ExampleTokenBucket_Rebase raises a live bucket's limit: it keeps the six
// tokens it held and refills at the new rate from then on.
func ExampleTokenBucket_Rebase() {
	tb := algo.TokenBucket{}
	old := algo.PerSecond(1).Burst(10)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	s, _, _ := tb.Take(old, algo.State{}, now, 4)

	raised := algo.PerSecond(10).Burst(100)
	s, _ = tb.Rebase(old, raised, s, now, algo.KeepTokens)
	_, res, _ := tb.Take(raised, s, now, 0)
	fmt.Println("kept:", res.Remaining, "of", raised.Capacity())

	s, _, _ = tb.Take(old, algo.State{}, now, 4)
	s, _ = tb.Rebase(old, raised, s, now, algo.Proportional)
	_, res, _ = tb.Take(raised, s, now, 0)
	fmt.Println("proportionally:", res.Remaining, "of", raised.Capacity())
	// Output:
	// kept: 6 of 100
	// proportionally: 60 of 100
}
