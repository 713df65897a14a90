package algo_test

import (
	"math/bits"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// The generators and helpers shared by the property tests.

// algorithms are all implementations, for properties that hold for each.
var algorithms = []algo.Algorithm{algo.TokenBucket{}, algo.SlidingWindow{}, algo.FixedWindow{}}

// lawful are the algorithms that keep the never-exceed law; FixedWindow
// breaks it at every boundary (see TestPropFixedWindowSpike).
var lawful = []algo.Algorithm{algo.TokenBucket{}, algo.SlidingWindow{}}

// edgeRates are rates the generator favours: the slowest and fastest the
// issue names, the largest allowed, rates whose token time is not a whole
// number of µs, and the extreme periods.
var edgeRates = []algo.Rate{
	algo.PerDay(1),
	algo.PerSecond(1_000_000),
	algo.PerSecond(algo.MaxPerSecond),
	algo.PerSecond(3),
	algo.PerMinute(7),
	algo.Per(7, 3*time.Second),
	algo.Per(1, time.Microsecond),
	algo.Per(1, algo.MaxPeriod),
	algo.PerHour(100),
}

// maxT is the latest time a generated run reaches, leaving room below
// algo.MaxTime for retries.
const maxT = 1 << 51

// drawPolicy draws a valid policy, favouring edges: capacity 1, the largest
// capacity the rate allows, 1e9, tiny and huge rates.
func drawPolicy(t *rapid.T) algo.Policy {
	var r algo.Rate
	if rapid.Bool().Draw(t, "edgeRate") {
		r = rapid.SampledFrom(edgeRates).Draw(t, "rate")
	} else {
		us := rapid.OneOf(
			rapid.SampledFrom([]int64{1, 1000, 1e6, 60e6, 3600e6, 86400e6}),
			rapid.Int64Range(1, algo.MaxPeriod.Microseconds()),
		).Draw(t, "periodµs")
		tokens := rapid.Int64Range(1, min(us*(algo.MaxPerSecond/1e6), 1e12)).Draw(t, "tokens")
		r = algo.Per(tokens, time.Duration(us)*time.Microsecond)
	}
	return drawCapacity(t, r, 1)
}

// drawCapacity draws a capacity of at least lo (if the rate allows it) for
// rate r and returns the valid policy.
func drawCapacity(t *rapid.T, r algo.Rate, lo int64) algo.Policy {
	hi := min(int64(algo.MaxCapacity), algo.MaxLevel/r.Burst(1).Unit())
	lo = min(lo, hi)
	c := rapid.OneOf(
		rapid.Just(lo),
		rapid.Just(hi),
		rapid.Just(max(lo, min(1e9, hi))),
		rapid.Int64Range(lo, min(lo+100, hi)),
		rapid.Int64Range(lo, hi),
	).Draw(t, "capacity")
	p, err := algo.NewPolicy(c, r)
	if err != nil {
		t.Fatalf("generator drew an invalid policy: %v", err)
	}
	return p
}

// tokenTime returns how long one token takes to refill, rounded up, in µs.
func tokenTime(p algo.Policy) int64 { return (p.Unit() + p.Refill() - 1) / p.Refill() }

// window returns the policy's window (fill time) in µs.
func window(p algo.Policy) int64 { return p.FillTime().Microseconds() }

// req is one generated request: its true time, the time on the caller's
// clock (equal unless the run has skewed clocks) and its cost.
type req struct{ at, clock, cost int64 }

// drawRun draws up to maxN requests with non-decreasing true times: zero
// steps, steps of a few tokens, of a window, long idle gaps. With skew, a
// request's clock may lag its true time by up to two windows (callers with
// clocks behind), so the clocks the algorithm sees go backwards.
func drawRun(t *rapid.T, p algo.Policy, maxN int, skew bool) []req {
	tt, w := tokenTime(p), window(p)
	step := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, 3*tt),
		rapid.Int64Range(0, w),
		rapid.Int64Range(0, 3*w),
		rapid.Int64Range(0, 1<<45), // about a year
	)
	lag := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 3*tt), rapid.Int64Range(0, 2*w))
	cost := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Just(int64(1)),
		rapid.Int64Range(1, min(p.Capacity(), 10)),
		rapid.Int64Range(1, p.Capacity()),
		rapid.Just(p.Capacity()),
	)
	at := rapid.Int64Range(0, maxT/2).Draw(t, "start")
	n := rapid.IntRange(1, maxN).Draw(t, "n")
	run := make([]req, n)
	for i := range run {
		at = min(at+step.Draw(t, "step"), maxT)
		r := req{at: at, clock: at, cost: cost.Draw(t, "cost")}
		if skew {
			r.clock = max(at-lag.Draw(t, "lag"), 0)
		}
		run[i] = r
	}
	return run
}

// outcome is one request applied: the state before and after, and the
// result.
type outcome struct {
	req
	before, after algo.State
	res           algo.Result
}

// replay applies run to a from state s and fails t on any error.
func replay(t rapid.TB, a algo.Algorithm, p algo.Policy, s algo.State, run []req) []outcome {
	t.Helper()
	out := make([]outcome, len(run))
	for i, r := range run {
		next, res, err := a.Take(p, s, r.clock, r.cost)
		if err != nil {
			t.Fatalf("step %d: %s.Take(%v, %+v, %d, %d): %v", i, a.Name(), p, s, r.clock, r.cost, err)
		}
		out[i] = outcome{req: r, before: s, after: next, res: res}
		s = next
	}
	return out
}

// lawBound returns capacity + ⌊dt·refill/unit⌋ for dt ≥ 0, exactly (the
// product in 128 bits), saturating at MaxInt64.
func lawBound(p algo.Policy, dt int64) int64 {
	hi, lo := bits.Mul64(uint64(dt), uint64(p.Refill()))
	if hi >= uint64(p.Unit()) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(p.Unit()))
	if q > uint64(1<<63-1-p.Capacity()) {
		return 1<<63 - 1
	}
	return p.Capacity() + int64(q)
}

// worstInterval checks the never-exceed law over every interval of a run
// whose times are non-decreasing: for each pair of admitted requests i ≤ j,
// the cost admitted in [times[i], times[j]] (a prefix-sum difference) must
// be at most lawBound(times[j]−times[i]). Any interval's admitted requests
// are a contiguous index range, so these pairs cover every interval. It
// returns the first violating pair, or ok.
func worstInterval(p algo.Policy, times, admitted []int64) (i, j int, sum, bound int64, ok bool) {
	prefix := make([]int64, len(admitted)+1)
	for k, a := range admitted {
		prefix[k+1] = prefix[k] + a
	}
	for i = range admitted {
		if admitted[i] == 0 {
			continue
		}
		for j = i; j < len(admitted); j++ {
			if admitted[j] == 0 {
				continue
			}
			sum, bound = prefix[j+1]-prefix[i], lawBound(p, times[j]-times[i])
			if sum > bound {
				return i, j, sum, bound, false
			}
		}
	}
	return 0, 0, 0, 0, true
}

// us returns d in µs, failing t when d is not a whole number of them.
func us(t rapid.TB, d time.Duration) int64 {
	if d%time.Microsecond != 0 {
		t.Fatalf("duration %v is not a whole number of µs", d)
	}
	return d.Microseconds()
}

// take calls a.Take and fails t on error. It does not call t.Helper, which
// costs a stack walk: property loops call it millions of times.
func take(t rapid.TB, a algo.Algorithm, p algo.Policy, s algo.State, now, cost int64) (algo.State, algo.Result) {
	next, res, err := a.Take(p, s, now, cost)
	if err != nil {
		t.Fatalf("%s.Take(%v, %+v, %d, %d): %v", a.Name(), p, s, now, cost, err)
	}
	return next, res
}
