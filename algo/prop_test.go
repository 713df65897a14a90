package algo_test

import (
	"math/big"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// maxRun is the longest generated run: the law check is O(n²) in it.
const maxRun = 200

// TestPropNeverExceed checks the never-exceed law: over every interval
// [t1, t2] of a run, the admitted cost is at most
// capacity + ⌊rate·(t2−t1)⌋, computed exactly.
func TestPropNeverExceed(t *testing.T) {
	for _, a := range lawful {
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			p := drawPolicy(t)
			out := replay(t, a, p, algo.State{}, drawRun(t, p, maxRun, false))
			checkLaw(t, p, out)
		}))
	}
}

// TestPropFixedWindowBound checks the bound FixedWindow does keep: an
// interval touching k windows admits at most k·capacity. With k = 2 for an
// interval of one microsecond, that is the boundary spike.
func TestPropFixedWindowBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		w := window(p)
		out := replay(t, algo.FixedWindow{}, p, algo.State{}, drawRun(t, p, maxRun, false))
		prefix := make([]int64, len(out)+1)
		for k, o := range out {
			prefix[k+1] = prefix[k]
			if o.res.Allowed {
				prefix[k+1] += o.cost
			}
		}
		for i := range out {
			for j := i; j < len(out); j++ {
				touched := (out[j].at/w - out[i].at/w) + 1
				if sum := prefix[j+1] - prefix[i]; touched < 1<<62/p.Capacity() && sum > touched*p.Capacity() {
					t.Fatalf("requests %d..%d touch %d windows but admitted %d", i, j, touched, sum)
				}
			}
		}
	})
}

// TestPropAnyState feeds every algorithm arbitrary in-range states, as a
// store may read after a policy change or from a foreign writer: counts and
// deficits far above full, stamps off the window grid, any clock. Take must
// answer without error, within bounds, never move the stamp back, and keep
// RetryAfter exact.
func TestPropAnyState(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			p := drawPolicy(t)
			level := rapid.OneOf(rapid.Int64Range(0, 2*p.Capacity()*p.Unit()), rapid.Int64Min(0))
			s := algo.State{Level: level.Draw(t, "level"), Prev: level.Draw(t, "prev"), Stamp: rapid.Int64Range(0, algo.MaxTime).Draw(t, "stamp")}
			now := rapid.OneOf(rapid.Int64Range(0, algo.MaxTime), rapid.Int64Range(max(0, s.Stamp-3*window(p)), min(algo.MaxTime, s.Stamp+3*window(p)))).Draw(t, "now")
			cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
			next, res := take(t, a, p, s, now, cost)
			if next.Stamp < s.Stamp || res.Remaining < 0 || res.Remaining > p.Capacity() || res.Allowed != (res.RetryAfter == 0) || (cost == 0 && !res.Allowed) {
				t.Fatalf("Take(%+v, %d, %d) = %+v, %+v", s, now, cost, next, res)
			}
			if ra := us(t, res.RetryAfter); !res.Allowed && now+ra <= algo.MaxTime {
				if _, r := take(t, a, p, next, now+ra, cost); !r.Allowed {
					t.Fatalf("Take(%+v, %d, %d) denied with RetryAfter %v, denied again then: %+v", s, now, cost, res.RetryAfter, r)
				}
				if _, r := take(t, a, p, next, now+ra-1, cost); r.Allowed {
					t.Fatalf("Take(%+v, %d, %d) denied with RetryAfter %v, admitted 1µs earlier", s, now, cost, res.RetryAfter)
				}
			}
		}))
	}
}

// TestPropBackwardsClock checks that callers whose clocks lag mint nothing:
// the stored stamp never decreases, and the law holds over the latest time
// any caller has shown (the running maximum of the clocks), which is the
// time the algorithm evaluates at.
func TestPropBackwardsClock(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			p := drawPolicy(t)
			out := replay(t, a, p, algo.State{}, drawRun(t, p, maxRun, true))
			for i, o := range out {
				if o.after.Stamp < o.before.Stamp {
					t.Fatalf("step %d: clock %d moved the stamp back from %d to %d", i, o.clock, o.before.Stamp, o.after.Stamp)
				}
			}
			if a != (algo.FixedWindow{}) {
				latest := int64(0)
				for i := range out {
					latest = max(latest, out[i].clock)
					out[i].at = latest
				}
				checkLaw(t, p, out)
			}
		}))
	}
}

// checkLaw fails t if any interval of out (by true time) admits more than
// the law allows.
func checkLaw(t *rapid.T, p algo.Policy, out []outcome) {
	t.Helper()
	times, admitted := make([]int64, len(out)), make([]int64, len(out))
	for k, o := range out {
		times[k] = o.at
		if o.res.Allowed {
			admitted[k] = o.cost
		}
	}
	if i, j, sum, bound, ok := worstInterval(p, times, admitted); !ok {
		t.Fatalf("%v: requests %d..%d in [%d, %d] admitted %d > capacity + rate·t = %d", p, i, j, times[i], times[j], sum, bound)
	}
}

// TestPropRetryAfterExact checks every denial of a run, with lagging clocks
// included: the same request at now+RetryAfter (from the state the denial
// returned, nothing else in between) is admitted, and at one µs earlier it
// is not. Retrying from the state before the denial gives the same answers.
func TestPropRetryAfterExact(t *testing.T) {
	for _, a := range algorithms {
		denials, cases := 0, 0
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			cases++
			p := drawPolicy(t)
			for i, o := range replay(t, a, p, algo.State{}, drawRun(t, p, maxRun, true)) {
				if o.res.Allowed {
					continue
				}
				ra := us(t, o.res.RetryAfter)
				if ra <= 0 || o.clock+ra > algo.MaxTime {
					t.Fatalf("step %d: denied with RetryAfter %v", i, o.res.RetryAfter)
				}
				denials++
				for _, s := range []algo.State{o.after, o.before} {
					if _, res := take(t, a, p, s, o.clock+ra, o.cost); !res.Allowed {
						t.Fatalf("step %d: cost %d denied at %d, retried after %v from %+v: denied again (%+v)", i, o.cost, o.clock, o.res.RetryAfter, s, res)
					}
					if _, res := take(t, a, p, s, o.clock+ra-1, o.cost); res.Allowed {
						t.Fatalf("step %d: cost %d denied at %d with RetryAfter %v, but admitted 1µs earlier from %+v", i, o.cost, o.clock, o.res.RetryAfter, s)
					}
				}
			}
		}))
		t.Logf("%s: %d denials retried in %d cases", a.Name(), denials, cases)
		if denials < cases {
			t.Errorf("%s: only %d denials checked in %d cases: the generator is too kind", a.Name(), denials, cases)
		}
	}
}

// TestPropRemainingAndReset checks every result's bounds, and that
// ResetAfter is exact: after that much idleness the bucket is full (a peek
// shows remaining == capacity and a take of the whole capacity is
// admitted), and one µs earlier it is not.
func TestPropRemainingAndReset(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			p := drawPolicy(t)
			c := p.Capacity()
			for i, o := range replay(t, a, p, algo.State{}, drawRun(t, p, maxRun, true)) {
				r := o.res
				if r.Remaining < 0 || r.Remaining > c || r.ResetAfter < 0 ||
					r.Allowed != (r.RetryAfter == 0) || (o.cost == 0 && !r.Allowed) {
					t.Fatalf("step %d: cost %d at %d: bad result %+v", i, o.cost, o.clock, r)
				}
				if r.Allowed && r.Remaining > c-o.cost {
					t.Fatalf("step %d: cost %d admitted but %d remain of %d", i, o.cost, r.Remaining, c)
				}
				at := o.clock + us(t, r.ResetAfter)
				if at > algo.MaxTime {
					continue
				}
				if _, peek := take(t, a, p, o.after, at, 0); peek.Remaining != c || peek.ResetAfter != 0 {
					t.Fatalf("step %d: after ResetAfter %v, peek = %+v, want full", i, r.ResetAfter, peek)
				}
				if _, all := take(t, a, p, o.after, at, c); !all.Allowed {
					t.Fatalf("step %d: after ResetAfter %v, taking the capacity was denied: %+v", i, r.ResetAfter, all)
				}
				if r.ResetAfter > 0 {
					if _, all := take(t, a, p, o.after, at-1, c); all.Allowed {
						t.Fatalf("step %d: ResetAfter %v, but the capacity was admitted 1µs earlier", i, r.ResetAfter)
					}
				}
			}
		}))
	}
}

// TestPropIdleAt checks that from IdleAt on, a state answers exactly as the
// zero State does (so a store may drop it), and that IdleAt is tight: one µs
// earlier a non-empty state still denies a take of the whole capacity.
func TestPropIdleAt(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			p := drawPolicy(t)
			for i, o := range replay(t, a, p, algo.State{}, drawRun(t, p, 20, true)) {
				idle := a.IdleAt(p, o.after)
				later := idle + rapid.Int64Range(0, 3*window(p)).Draw(t, "later")
				cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
				if later > algo.MaxTime {
					continue
				}
				_, got := take(t, a, p, o.after, later, cost)
				if _, want := take(t, a, p, algo.State{}, later, cost); got != want {
					t.Fatalf("step %d: state %+v idle at %d, at %d cost %d: %+v, zero state: %+v", i, o.after, idle, later, cost, got, want)
				}
				if idle > o.after.Stamp {
					if _, all := take(t, a, p, o.after, idle-1, p.Capacity()); all.Allowed {
						t.Fatalf("step %d: state %+v idle at %d, but already full 1µs earlier", i, o.after, idle)
					}
				}
			}
		}))
	}
}

// TestPropNoDrift runs a client that takes as fast as it is allowed, always
// retrying exactly at RetryAfter, for a simulated horizon of days (shorter
// only where a rate too fast for the capacity would need more than
// maxRequests takes), and checks that every level unit is accounted for:
// admitted + left in the bucket + spilled = capacity + rate·T, exactly.
//
// Spill is the one loss µs time allows: a retry is due at the first whole
// µs at which the cost fits, and when the cost fills the bucket (cost·unit +
// refill − 1 > capacity·unit) the part of that µs's refill above full
// overflows. Otherwise nothing spills, and the client is admitted
// capacity + ⌊rate·T⌋ within one request's cost: within one token for cost 1.
func TestPropNoDrift(t *testing.T) {
	const maxRequests = 4000 // takes per case, so that days fit in the test budget
	var cases, days, tight int
	rapid.Check(t, func(t *rapid.T) {
		r := drawPolicy(t).Rate()
		horizon := rapid.Int64Range(86_400e6, 7*86_400e6).Draw(t, "horizonµs")
		p := drawCapacity(t, r, lawBound(r.Burst(1), horizon)/maxRequests+1)
		minCost := lawBound(p, horizon)/maxRequests + 1
		if minCost > p.Capacity() {
			h := new(big.Int).Mul(big.NewInt(p.Capacity()*(maxRequests-1)), big.NewInt(p.Unit()))
			horizon = min(horizon, h.Quo(h, big.NewInt(p.Refill())).Int64())
			minCost = p.Capacity()
		}
		cost := rapid.Int64Range(minCost, p.Capacity()).Draw(t, "cost")
		start := rapid.Int64Range(0, maxT/2).Draw(t, "start")
		end := start + horizon
		full, refill := p.Capacity()*p.Unit(), p.Refill()

		var s algo.State
		admitted, spilled, maxSpill, now := int64(0), int64(0), int64(0), start
		spill := func(now int64) { // the refill since s that full cannot hold
			if now > start {
				n := max((now-s.Stamp)*refill-s.Level, 0)
				spilled, maxSpill = spilled+n, max(maxSpill, n)
			}
		}
		for now <= end {
			spill(now)
			next, res, err := algo.TokenBucket{}.Take(p, s, now, cost)
			if err != nil {
				t.Fatalf("%v: Take(%+v, %d, %d): %v", p, s, now, cost, err)
			}
			s = next
			if res.Allowed {
				admitted += cost
				continue
			}
			now += us(t, res.RetryAfter)
		}
		spill(end)
		_, peek := take(t, algo.TokenBucket{}, p, s, end, 0)
		cases++
		if horizon >= 86_400e6 {
			days++
		}

		// admitted·unit + (full − deficit at end) + spilled = full + T·refill.
		left := full - (s.Level - max(0, min((end-s.Stamp)*refill, s.Level)))
		lhs := new(big.Int).Mul(big.NewInt(admitted), big.NewInt(p.Unit()))
		lhs.Add(lhs, big.NewInt(left+spilled))
		rhs := new(big.Int).Mul(big.NewInt(horizon), big.NewInt(refill))
		rhs.Add(rhs, big.NewInt(full))
		if lhs.Cmp(rhs) != 0 {
			t.Fatalf("%v, cost %d over %dµs: admitted %d tokens, %d units left, %d spilled: %v units, want %v",
				p, cost, horizon, admitted, left, spilled, lhs, rhs)
		}
		if maxSpill >= refill {
			t.Fatalf("%v, cost %d: spilled %d units at one retry, more than one µs of refill (%d)", p, cost, maxSpill, refill)
		}
		bound := lawBound(p, horizon)
		if admitted > bound {
			t.Fatalf("%v, cost %d over %dµs: admitted %d > %d", p, cost, horizon, admitted, bound)
		}
		if cost*p.Unit()+refill-1 <= full {
			tight++
			if spilled != 0 || admitted <= bound-cost || admitted+peek.Remaining != bound {
				t.Fatalf("%v, cost %d over %dµs: admitted %d + %d left, %d units spilled, want %d",
					p, cost, horizon, admitted, peek.Remaining, spilled, bound)
			}
		}
	})
	t.Logf("%d cases: %d over at least a day, %d with room for no spill", cases, days, tight)
	if days < cases/2 || tight < cases/4 {
		t.Errorf("generator too narrow: of %d cases, %d span a day, %d cannot spill", cases, days, tight)
	}
}

// TestPropDenialChangesNothing inserts a request that is denied into a run
// and checks that every later result is identical to the run without it
// (x/time/rate once let a denied reservation change later answers:
// golang/go#52584). The extra request comes at any time between its
// neighbours; when its clock is at or behind the stored stamp, not even the
// state may change.
func TestPropDenialChangesNothing(t *testing.T) {
	for _, a := range algorithms {
		denied, cases := 0, 0
		t.Run(a.Name(), rapid.MakeCheck(func(t *rapid.T) {
			cases++
			p := drawPolicy(t)
			run := drawRun(t, p, 50, false)
			k := rapid.IntRange(1, len(run)).Draw(t, "insertAt")
			head := replay(t, a, p, algo.State{}, run[:k])
			s := head[k-1].after
			at := run[k-1].at
			if k < len(run) {
				at = rapid.Int64Range(at, run[k].at).Draw(t, "extraAt")
			}
			if rapid.Bool().Draw(t, "stale") {
				at = rapid.Int64Range(max(0, s.Stamp-2*window(p)), s.Stamp).Draw(t, "staleAt")
			}
			_, peek := take(t, a, p, s, at, 0)
			if peek.Remaining == p.Capacity() {
				return // nothing can be denied here
			}
			cost := rapid.Int64Range(peek.Remaining+1, p.Capacity()).Draw(t, "extraCost")
			s2, res := take(t, a, p, s, at, cost)
			if res.Allowed {
				t.Fatalf("cost %d admitted at %d with %d remaining", cost, at, peek.Remaining)
			}
			denied++
			if at <= s.Stamp && s2 != s {
				t.Fatalf("a denial at %d, behind stamp %d, changed the state from %+v to %+v", at, s.Stamp, s, s2)
			}
			without, with := replay(t, a, p, s, run[k:]), replay(t, a, p, s2, run[k:])
			for i := range without {
				if without[i].res != with[i].res {
					t.Fatalf("step %d after a denial at %d: %+v, without the denial: %+v", k+i, at, with[i].res, without[i].res)
				}
			}
		}))
		t.Logf("%s: %d of %d cases inserted a denial", a.Name(), denied, cases)
		if denied < cases*3/10 {
			t.Errorf("%s: only %d of %d cases had a denial to insert", a.Name(), denied, cases)
		}
	}
}
