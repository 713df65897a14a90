package storetest

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// Policies have fill times of at least a second: a Redis store that expires
// keys after ResetAfter of real time must not lose a bucket while a rapid
// case runs. Odd periods make retry-afters that are not whole milliseconds.
var periods = []time.Duration{
	10 * time.Second, 7*time.Second + 3*time.Microsecond, time.Minute,
	time.Hour + 7*time.Millisecond, 24 * time.Hour,
}

// genPolicy draws a small valid policy.
func genPolicy(t *rapid.T, label string) algo.Policy {
	per := rapid.SampledFrom(periods).Draw(t, label+"period")
	tokens := rapid.Int64Range(1, 10).Draw(t, label+"tokens")
	capacity := rapid.Int64Range(1, 20).Draw(t, label+"capacity")
	p, err := algo.NewPolicy(capacity, algo.Per(tokens, per))
	if err != nil {
		t.Fatalf("generated policy: %v", err)
	}
	return p
}

// genStep draws how far to move the clock before a request: often not at
// all, a few microseconds, about one token's refill time, or up to two fill
// times (at most a year).
func genStep(t *rapid.T, p algo.Policy) time.Duration {
	token := (p.Unit() + p.Refill() - 1) / p.Refill()
	fill := min(p.FillTime().Microseconds(), maxStep)
	us := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(1, 3),
		rapid.Int64Range(max(token-1, 0), min(token+1, maxStep)),
		rapid.Int64Range(0, 2*fill),
	).Draw(t, "step")
	return time.Duration(us) * time.Microsecond
}

// maxStep bounds one clock step, in µs, so that the extremes test stays
// inside algo.MaxTime.
const maxStep = 366 * 24 * 3600 * 1_000_000

// genExtremePolicy draws a valid policy from the whole documented range:
// capacities up to 1e9, rates up to 1e6 per µs-period, periods up to a
// year, clamped where the product of capacity and unit would pass 2^52.
func genExtremePolicy(t *rapid.T) algo.Policy {
	per := rapid.SampledFrom([]time.Duration{
		time.Microsecond, 7 * time.Microsecond, time.Millisecond, time.Second,
		time.Minute + 7*time.Microsecond, 24 * time.Hour, algo.MaxPeriod,
	}).Draw(t, "period")
	r := algo.Per(rapid.Int64Range(1, 1_000_000).Draw(t, "tokens"), per)
	if r.Burst(1).Validate() != nil { // rate above algo.MaxPerSecond
		r = algo.Per(1, per)
	}
	capacity := min(rapid.Int64Range(1, 1_000_000_000).Draw(t, "capacity"), algo.MaxLevel/r.Burst(1).Unit())
	p, err := algo.NewPolicy(capacity, r)
	if err != nil {
		t.Fatalf("generated policy: %v", err)
	}
	return p
}

// genCost draws a cost in [0, capacity], favouring the extremes.
func genCost(t *rapid.T, p algo.Policy) int64 { return genCostGen(p).Draw(t, "cost") }

// genCostGen is genCost's generator.
func genCostGen(p algo.Policy) *rapid.Generator[int64] {
	return rapid.OneOf(rapid.Just(int64(1)), rapid.Just(p.Capacity()), rapid.Int64Range(0, p.Capacity()))
}

// event is one admitted request.
type event struct {
	at   int64 // µs
	cost int64
}

// history runs a random sequence of requests on a fresh key, checking each
// against the reference, and returns the key, its reference and what was
// admitted.
func (e *env) history(t *rapid.T, p algo.Policy, maxOps int) (string, *ref, []event) {
	key, r := e.key(), &ref{p: p}
	var admitted []event
	n := rapid.IntRange(1, maxOps).Draw(t, "ops")
	for range n {
		now := e.clk.Add(genStep(t, p))
		cost := genCost(t, p)
		if res := e.check(t, key, r, cost); res.Allowed && cost > 0 {
			admitted = append(admitted, event{now.UnixMicro(), cost})
		}
	}
	return key, r, admitted
}

// testReference: every Result equals algo.TokenBucket's on the same
// sequence (history checks each request).
func testReference(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		e.history(t, genPolicy(t, ""), 40)
	})
}

// testLaw: over every interval between two admitted requests, the admitted
// cost is at most capacity + ⌊rate·(t2−t1)⌋. The worst interval always
// starts and ends at admitted requests, so checking those pairs checks all.
func testLaw(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "")
		_, _, adm := e.history(t, p, 40)
		rate := p.Rate()
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].cost
				dt := adm[j].at - adm[i].at
				bound := p.Capacity() + rate.Tokens*dt/rate.Period.Microseconds()
				if sum > bound {
					t.Fatalf("admitted %d tokens in [%d µs, %d µs], law allows %d", sum, adm[i].at, adm[j].at, bound)
				}
			}
		}
	})
}

// testRetryAfter: a denied request retried at now+RetryAfter with no other
// traffic is admitted; retried one microsecond earlier it is denied, with a
// RetryAfter of exactly one microsecond.
func testRetryAfter(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "")
		key, r, _ := e.history(t, p, 20)
		cost := rapid.Int64Range(1, p.Capacity()).Draw(t, "denied cost")
		res := e.check(t, key, r, cost)
		for res.Allowed { // drain until denied, at a frozen clock
			res = e.check(t, key, r, cost)
		}
		start := e.clk.Now()
		if res.RetryAfter <= 0 {
			t.Fatalf("denied with RetryAfter %v", res.RetryAfter)
		}
		e.clk.Set(start.Add(res.RetryAfter - time.Microsecond))
		early := e.check(t, key, r, cost)
		if early.Allowed || early.RetryAfter != time.Microsecond {
			t.Fatalf("retry 1µs before RetryAfter %v: %+v, want denied with RetryAfter 1µs", res.RetryAfter, early)
		}
		e.clk.Set(start.Add(res.RetryAfter))
		if got := e.check(t, key, r, cost); !got.Allowed {
			t.Fatalf("retry after RetryAfter %v: denied %+v", res.RetryAfter, got)
		}
	})
}

// testRemaining: results stay in bounds, and a bucket left alone for
// ResetAfter is full.
func testRemaining(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "")
		key, r, n := e.key(), &ref{p: p}, rapid.IntRange(1, 30).Draw(t, "ops")
		var last algo.Result
		for range n {
			e.clk.Add(genStep(t, p))
			last = e.check(t, key, r, genCost(t, p))
			switch {
			case last.Remaining < 0 || last.Remaining > p.Capacity():
				t.Fatalf("Remaining %d outside [0, %d]", last.Remaining, p.Capacity())
			case last.Allowed != (last.RetryAfter == 0) || last.RetryAfter < 0:
				t.Fatalf("Allowed %v with RetryAfter %v", last.Allowed, last.RetryAfter)
			case last.ResetAfter < 0 || last.ResetAfter > p.FillTime():
				t.Fatalf("ResetAfter %v outside [0, %v]", last.ResetAfter, p.FillTime())
			}
		}
		start := e.clk.Now()
		if last.ResetAfter > 0 {
			e.clk.Set(start.Add(last.ResetAfter - time.Microsecond))
			if got := e.check(t, key, r, 0); got.ResetAfter != time.Microsecond {
				t.Fatalf("1µs before ResetAfter %v: peek %+v, want ResetAfter 1µs", last.ResetAfter, got)
			}
		}
		e.clk.Set(start.Add(last.ResetAfter))
		want := algo.Result{Allowed: true, Remaining: p.Capacity()}
		if got := e.check(t, key, r, 0); got != want {
			t.Fatalf("after ResetAfter %v: peek %+v, want full %+v", last.ResetAfter, got, want)
		}
	})
}

// testBackwards: a clock that jumps backwards (another instance's skewed
// clock) mints no tokens: a stale request is evaluated at the bucket's own,
// later time. Stores may forget a bucket once it is full, and a forgotten
// bucket has no time of its own, so the reference branches: wherever a
// bucket was full by the latest time the store has seen, its state may also
// be the zero State. Every result must match some branch.
func testBackwards(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "")
		key, states, latest := e.key(), []algo.State{{}}, int64(0)
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			step := genStep(t, p)
			if rapid.IntRange(0, 2).Draw(t, "back") == 0 {
				step = -step
			}
			now := e.clk.Add(step).UnixMicro()
			latest = max(latest, now)
			for _, st := range states {
				if st != (algo.State{}) && (algo.TokenBucket{}).IdleAt(p, st) <= latest {
					states = appendNew(states, algo.State{}) // the store may have forgotten it
					break
				}
			}
			cost := genCost(t, p)
			got := e.take(t, key, p, cost)
			var next []algo.State
			var want []algo.Result
			for _, st := range states {
				ns, res, err := algo.TokenBucket{}.Take(p, st, now, cost)
				if err != nil {
					t.Fatalf("reference: %v", err)
				}
				if want = append(want, res); res == got {
					next = appendNew(next, ns)
				}
			}
			if next == nil {
				t.Fatalf("at %v: Take(%q, %v, %d) = %+v; algo.TokenBucket says one of %+v",
					e.clk.Now().Sub(Start), key, p, cost, got, want)
			}
			states = next
		}
	})
}

// appendNew appends s to states unless it is there already.
func appendNew(states []algo.State, s algo.State) []algo.State {
	for _, have := range states {
		if have == s {
			return states
		}
	}
	return append(states, s)
}

// testExtremes: policies and times from the edges of the documented range
// (capacities to 1e9, year-long periods, times up to the year 2255) match
// the reference exactly: a backend computing in doubles must stay exact.
func testExtremes(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		p := genExtremePolicy(t)
		start := rapid.OneOf(
			rapid.Int64Range(0, 10*maxStep),
			rapid.Int64Range(algo.MaxTime-20*maxStep, algo.MaxTime-10*maxStep),
		).Draw(t, "start µs")
		e.clk.Set(time.UnixMicro(start))
		key, r := e.key(), &ref{p: p}
		for range rapid.IntRange(1, 10).Draw(t, "ops") {
			e.clk.Add(genStep(t, p))
			e.check(t, key, r, genCost(t, p))
		}
	})
}

// testPeek: two keys get the same requests, one with peeks in between; the
// peeks are always allowed and the other requests see the same results.
func testPeek(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "")
		plain, peeked := e.key(), e.key()
		n := rapid.IntRange(1, 20).Draw(t, "ops")
		for range n {
			e.clk.Add(genStep(t, p))
			if rapid.Bool().Draw(t, "peek") {
				if res := e.take(t, peeked, p, 0); !res.Allowed || res.RetryAfter != 0 {
					t.Fatalf("peek denied: %+v", res)
				}
			}
			cost := rapid.Int64Range(1, p.Capacity()).Draw(t, "cost")
			a, b := e.take(t, plain, p, cost), e.take(t, peeked, p, cost)
			if a != b {
				t.Fatalf("Take(%d) = %+v without peeks, %+v with", cost, a, b)
			}
		}
	})
}

// testIsolation: requests on several keys, with different policies, each
// match a reference that knows only its own key.
func testIsolation(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		keys := []string{e.key(), e.key(), e.key()}
		refs := []*ref{{p: genPolicy(t, "a ")}, {p: genPolicy(t, "b ")}, {p: genPolicy(t, "c ")}}
		n := rapid.IntRange(1, 40).Draw(t, "ops")
		for range n {
			i := rapid.IntRange(0, len(keys)-1).Draw(t, "key")
			e.clk.Add(genStep(t, refs[i].p))
			e.check(t, keys[i], refs[i], genCost(t, refs[i].p))
		}
	})
}
