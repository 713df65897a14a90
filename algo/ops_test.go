package algo_test

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// The properties of Refund, TakeAtMost, Reserve and Cancel (ops.go).

// drawWait draws a reservation's maxWait in µs: none, a few tokens' worth,
// up to a window, exactly the policy's MaxDelay, beyond it, or negative.
func drawWait(t *rapid.T, p algo.Policy) int64 {
	md := p.MaxDelay().Microseconds()
	return rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, 3*tokenTime(p)),
		rapid.Int64Range(0, window(p)),
		rapid.Just(md),
		rapid.Just(md),
		rapid.Int64Range(md, 1<<60),
		rapid.Int64Range(-5, -1),
	).Draw(t, "maxWait")
}

// drawCost draws a cost in [0, capacity], favouring the small and the edges.
func drawCost(t *rapid.T, p algo.Policy, label string) int64 {
	return rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Just(int64(1)),
		rapid.Int64Range(1, min(p.Capacity(), 10)),
		rapid.Int64Range(0, p.Capacity()),
		rapid.Just(p.Capacity()),
	).Draw(t, label)
}

// delivery is a request that proceeds: when (µs) and its cost.
type delivery struct{ at, cost int64 }

// bucket runs random operations on one bucket, checking each answer
// against the rational reference, and records when each admitted request
// proceeds, on the bucket's clock: the latest clock a caller has shown it
// (its stamp), as TestPropBackwardsClock counts time. now is the true
// time; a caller may show an older clock.
type bucket struct {
	p        algo.Policy
	s        algo.State
	ref      *ratBucket
	checkRef bool
	now      int64
	open     []algo.Reservation // admitted reservations not yet cancelled
	costs    []int64            // their costs
	done     []delivery         // takes, at their time
}

// newBucket returns a full bucket under a drawn policy, whose answers are
// compared with the reference's when checkRef is set.
func newBucket(t *rapid.T, checkRef bool) *bucket {
	p := drawPolicy(t)
	now := rapid.Int64Range(0, maxT/2).Draw(t, "start")
	ref := newRatBucket(p)
	ref.last = now
	return &bucket{p: p, ref: ref, checkRef: checkRef, s: algo.State{Stamp: now}, now: now}
}

// clock draws the clock of the next caller: now, or behind it.
func (b *bucket) clock(t *rapid.T) int64 {
	lag := rapid.OneOf(rapid.Just(int64(0)), rapid.Just(int64(0)), rapid.Int64Range(0, 3*tokenTime(b.p))).Draw(t, "lag")
	return max(0, b.now-lag)
}

// check fails t unless got == want (when checking against the reference),
// and the state is within its bounds.
func (b *bucket) check(t *rapid.T, op string, got, want algo.Result, next algo.State) {
	if b.checkRef && got != want {
		t.Fatalf("%v at %d from %+v: %s = %+v, reference %+v", b.p, b.now, b.s, op, got, want)
	}
	full := b.p.Capacity() * b.p.Unit()
	if next.Level < 0 || next.Level > 2*full || next.Stamp < b.s.Stamp || got.Remaining < 0 || got.Remaining > b.p.Capacity() {
		t.Fatalf("%v: %s moved %+v to %+v (%+v): out of bounds", b.p, op, b.s, next, got)
	}
	b.s = next
}

// apply runs op (Take or Refund) with a drawn amount and checks it against
// the reference's; an admitted take proceeds at once.
func (b *bucket) apply(t *rapid.T, name string, op func(algo.Policy, algo.State, int64, int64) (algo.State, algo.Result, error), ref func(int64, int64) algo.Result) {
	at, n := b.clock(t), drawCost(t, b.p, "n")
	next, got, err := op(b.p, b.s, at, n)
	if err != nil {
		t.Fatal(err)
	}
	b.check(t, name, got, ref(at, n), next)
	if name == "Take" && got.Allowed && n > 0 {
		b.done = append(b.done, delivery{next.Stamp, n})
	}
}

func (b *bucket) take(t *rapid.T)   { b.apply(t, "Take", algo.TokenBucket{}.Take, b.ref.take) }
func (b *bucket) refund(t *rapid.T) { b.apply(t, "Refund", algo.TokenBucket{}.Refund, b.ref.refund) }

func (b *bucket) reserve(t *rapid.T) {
	at, cost, wait := b.clock(t), drawCost(t, b.p, "cost"), drawWait(t, b.p)
	next, got, err := algo.TokenBucket{}.Reserve(b.p, b.s, at, cost, wait)
	if err != nil {
		t.Fatal(err)
	}
	want := b.ref.reserve(at, cost, wait)
	if b.checkRef && (got.Delay != want.Delay || got.Ticket != want.Ticket) {
		t.Fatalf("%v at %d from %+v: Reserve(%d, wait %d) = %+v, reference %+v", b.p, at, b.s, cost, wait, got, want)
	}
	b.check(t, "Reserve", got.Result, want.Result, next)
	switch {
	case got.Allowed && got.Delay == 0 && cost > 0:
		b.done = append(b.done, delivery{next.Stamp, cost})
	case got.Allowed && cost > 0:
		b.open, b.costs = append(b.open, got), append(b.costs, cost)
	}
}

// cancel cancels one open reservation: one whose time has not come is
// left out of what proceeds; one whose time has come proceeded already.
func (b *bucket) cancel(t *rapid.T) {
	if len(b.open) == 0 {
		t.Skip("nothing to cancel")
	}
	i := rapid.IntRange(0, len(b.open)-1).Draw(t, "reservation")
	at, r := b.clock(t), b.open[i]
	next, ok, got, err := algo.TokenBucket{}.Cancel(b.p, b.s, at, r.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	wantOK, want := b.ref.cancel(at, r.Ticket)
	if b.checkRef && ok != wantOK {
		t.Fatalf("%v at %d from %+v: Cancel(%+v) = %v, reference %v", b.p, at, b.s, r.Ticket, ok, wantOK)
	}
	b.check(t, "Cancel", got, want, next)
	if next.Stamp >= r.At { // too late: it proceeded
		b.done = append(b.done, delivery{r.At, b.costs[i]})
		if ok {
			t.Fatalf("Cancel at %d gave back a reservation due at %d", next.Stamp, r.At)
		}
	}
	b.open, b.costs = slices.Delete(b.open, i, i+1), slices.Delete(b.costs, i, i+1)
}

func (b *bucket) takeAtMost(t *rapid.T) {
	at, n := b.clock(t), rapid.OneOf(rapid.Int64Range(0, b.p.Capacity()), rapid.Int64Range(0, 1<<62)).Draw(t, "n")
	next, g, got, err := algo.TokenBucket{}.TakeAtMost(b.p, b.s, at, n)
	if err != nil {
		t.Fatal(err)
	}
	wantG, want := b.ref.takeAtMost(at, n)
	if b.checkRef && g != wantG {
		t.Fatalf("%v at %d from %+v: TakeAtMost(%d) granted %d, reference %d", b.p, at, b.s, n, g, wantG)
	}
	b.check(t, "TakeAtMost", got, want, next)
	if g > 0 {
		b.done = append(b.done, delivery{next.Stamp, g})
	}
}

// drain takes every whole token the bucket holds.
func (b *bucket) drain(t *rapid.T) {
	next, g, _, err := algo.TokenBucket{}.TakeAtMost(b.p, b.s, b.now, b.p.Capacity())
	if err != nil {
		t.Fatal(err)
	}
	b.ref.takeAtMost(b.now, b.p.Capacity())
	if b.s = next; g > 0 {
		b.done = append(b.done, delivery{next.Stamp, g})
	}
}

func (b *bucket) wait(t *rapid.T) {
	step := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 3*tokenTime(b.p)), rapid.Int64Range(0, 2*window(b.p))).Draw(t, "µs")
	b.now = min(b.now+step, maxT)
}

// deliveries returns everything that proceeds, in time order: the takes,
// and the reservations not cancelled before their time.
func (b *bucket) deliveries() []delivery {
	out := slices.Clone(b.done)
	for i, r := range b.open {
		out = append(out, delivery{r.At, b.costs[i]})
	}
	slices.SortStableFunc(out, func(x, y delivery) int { return int(x.at - y.at) })
	return out
}

// TestPropOpsAgainstRationals drives all five operations on one bucket,
// with lagging callers, and requires every answer to equal the rational
// reference's, every state to stay within [0, 2·full].
func TestPropOpsAgainstRationals(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := newBucket(t, true)
		t.Repeat(map[string]func(*rapid.T){
			"take": b.take, "reserve": b.reserve, "cancel": b.cancel,
			"refund": b.refund, "takeAtMost": b.takeAtMost, "wait": b.wait,
		})
	})
}

// TestPropLawOnDelivery: requests proceeding at their admitted times
// (takes at once, reservations at At) never exceed Capacity + ⌊rate·t⌋ in
// any interval of length t, with reservations cancelled before their time
// left out. Callers' clocks may lag; time is the latest clock shown.
func TestPropLawOnDelivery(t *testing.T) {
	var cases, reserved, canceled int
	rapid.Check(t, func(t *rapid.T) {
		b := newBucket(t, false)
		t.Repeat(map[string]func(*rapid.T){
			"take": b.take, "reserve": b.reserve, "reserve again": b.reserve,
			"cancel": b.cancel, "takeAtMost": b.takeAtMost, "wait": b.wait,
			"drain": b.drain,
		})
		out := b.deliveries()
		times, costs := make([]int64, len(out)), make([]int64, len(out))
		for k, d := range out {
			times[k], costs[k] = d.at, d.cost
		}
		if i, j, sum, bound, ok := worstInterval(b.p, times, costs); !ok {
			t.Fatalf("%v: deliveries %d..%d in [%d, %d] total %d > capacity + rate·t = %d: %+v", b.p, i, j, times[i], times[j], sum, bound, out)
		}
		cases++
		for _, d := range out {
			if d.at > b.s.Stamp {
				reserved++
				break
			}
		}
	})
	t.Logf("%d cases, %d with a reservation still due at the end", cases, reserved)
	_ = canceled
}

// drawSmallPolicy draws a policy of a few tokens refilled at a few per
// period, where a law violation by one token is easy to reach.
func drawSmallPolicy(t *rapid.T) algo.Policy {
	if rapid.IntRange(0, 3).Draw(t, "edge") == 0 {
		return drawPolicy(t)
	}
	per := rapid.SampledFrom([]time.Duration{time.Microsecond, 7 * time.Microsecond, time.Second, 3 * time.Second}).Draw(t, "period")
	p, err := algo.NewPolicy(rapid.Int64Range(1, 12).Draw(t, "capacity"), algo.Per(rapid.Int64Range(1, 5).Draw(t, "tokens"), per))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPropCancelLaw aims at the cancellations TestPropLawOnDelivery meets
// only now and then: a queue of reservations on an emptied bucket, some of
// them cancelled in any order before their time (the first, one in the
// middle, the last), then new reservations that would take the freed
// places. What proceeds must keep the law.
func TestPropCancelLaw(t *testing.T) {
	var cases, behind int
	rapid.Check(t, func(t *rapid.T) {
		p := drawSmallPolicy(t)
		now := rapid.Int64Range(0, maxT/2).Draw(t, "start")
		b := &bucket{p: p, ref: newRatBucket(p), s: algo.State{Stamp: now}, now: now}
		b.ref.last = now
		b.drain(t)
		wait := p.MaxDelay().Microseconds()
		cost := rapid.OneOf(rapid.Just(int64(1)), rapid.Just(p.Capacity()), rapid.Int64Range(1, p.Capacity()))
		step := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, tokenTime(p)))
		reserve := func() {
			b.now += step.Draw(t, "step")
			c := cost.Draw(t, "cost")
			next, r, err := algo.TokenBucket{}.Reserve(p, b.s, b.now, c, wait)
			if err != nil {
				t.Fatal(err)
			}
			b.s = next
			switch {
			case r.Allowed && r.Delay == 0:
				b.done = append(b.done, delivery{next.Stamp, c})
			case r.Allowed:
				b.open, b.costs = append(b.open, r), append(b.costs, c)
			}
		}
		for range rapid.IntRange(1, 5).Draw(t, "queued") {
			reserve()
		}
		for range rapid.IntRange(0, len(b.open)).Draw(t, "cancels") {
			b.now += step.Draw(t, "step")
			if len(b.open) > 1 && b.open[len(b.open)-1].At > b.now {
				behind++
			}
			b.cancel(t)
		}
		for range rapid.IntRange(0, 5).Draw(t, "after") {
			reserve()
		}
		out := b.deliveries()
		times, costs := make([]int64, len(out)), make([]int64, len(out))
		for k, d := range out {
			times[k], costs[k] = d.at, d.cost
		}
		if i, j, sum, bound, ok := worstInterval(p, times, costs); !ok {
			t.Fatalf("%v: deliveries %d..%d in [%d, %d] total %d > capacity + rate·t = %d: %+v", p, i, j, times[i], times[j], sum, bound, out)
		}
		cases++
	})
	t.Logf("%d cases, %d cancels with reservations queued", cases, behind)
}

// TestPropRefundExact: a refund of c made at once after an admitted Take of
// c leaves the bucket observably as it was: every later answer, of any
// operation, is the same as if neither had happened. A refund never raises
// the bucket above capacity, and refunding into a full bucket changes
// nothing.
func TestPropRefundExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		run := drawRun(t, p, 30, true)
		k := rapid.IntRange(0, len(run)).Draw(t, "at")
		head := replay(t, algo.TokenBucket{}, p, algo.State{}, run[:k])
		var s algo.State
		now := run[0].clock
		if k > 0 {
			s, now = head[k-1].after, head[k-1].clock
		}
		c := drawCost(t, p, "c")
		taken, res := take(t, algo.TokenBucket{}, p, s, now, c)
		if !res.Allowed {
			return
		}
		back, got, err := algo.TokenBucket{}.Refund(p, taken, now, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, peek := take(t, algo.TokenBucket{}, p, s, now, 0); got != peek {
			t.Fatalf("Take(%d) then Refund(%d) at %d = %+v, a peek before says %+v", c, c, now, got, peek)
		}
		without, with := replay(t, algo.TokenBucket{}, p, s, run[k:]), replay(t, algo.TokenBucket{}, p, back, run[k:])
		for i := range without {
			if without[i].res != with[i].res {
				t.Fatalf("step %d after Take(%d)+Refund(%d): %+v, without them %+v", k+i, c, c, with[i].res, without[i].res)
			}
		}
		// More back than was taken spills: never above capacity.
		over, res2, err := algo.TokenBucket{}.Refund(p, back, now, p.Capacity())
		if err != nil || over.Level != 0 || res2.Remaining != p.Capacity() {
			t.Fatalf("Refund(capacity) = %+v, %+v, %v: want a full bucket", over, res2, err)
		}
	})
}

// TestPropCancelExact: reservations cancelled from the latest back, before
// their time, each give back everything: the bucket answers every later
// request as if they had never been made, and what it reports at each
// cancel is what it reported before that reservation (refilled).
func TestPropCancelExact(t *testing.T) {
	var cases, waited int
	rapid.Check(t, func(t *rapid.T) {
		p := drawSmallPolicy(t)
		run := drawRun(t, p, 20, false)
		start := replay(t, algo.TokenBucket{}, p, algo.State{}, run)
		s, now := start[len(start)-1].after, run[len(run)-1].at
		type made struct {
			before algo.State
			r      algo.Reservation
		}
		var stack []made
		for range rapid.IntRange(1, 5).Draw(t, "reservations") {
			now += rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, tokenTime(p))).Draw(t, "step")
			next, r, err := algo.TokenBucket{}.Reserve(p, s, now, drawCost(t, p, "cost"), p.MaxDelay().Microseconds())
			if err != nil {
				t.Fatal(err)
			}
			if r.Delay > 0 {
				stack = append(stack, made{s, r})
			}
			s = next
		}
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if now >= top.r.At {
				break // due: nothing to cancel
			}
			now = rapid.Int64Range(now, top.r.At-1).Draw(t, "cancel at")
			next, ok, res, err := algo.TokenBucket{}.Cancel(p, s, now, top.r.Ticket)
			if err != nil || !ok {
				t.Fatalf("Cancel(%+v) of the latest reservation at %d = %v, %v", top.r.Ticket, now, ok, err)
			}
			if _, peek := take(t, algo.TokenBucket{}, p, top.before, now, 0); res != peek {
				t.Fatalf("Cancel(%+v) at %d = %+v, the bucket before the reservation says %+v", top.r.Ticket, now, res, peek)
			}
			later := drawRun(t, p, 10, false)
			for i := range later {
				later[i].at += now
				later[i].clock = later[i].at
			}
			without, with := replay(t, algo.TokenBucket{}, p, top.before, later), replay(t, algo.TokenBucket{}, p, next, later)
			for i := range without {
				if without[i].res != with[i].res {
					t.Fatalf("step %d after Cancel: %+v, never reserved: %+v", i, with[i].res, without[i].res)
				}
			}
			s = next
			waited++
		}
		cases++
	})
	t.Logf("%d cases, %d reservations cancelled", cases, waited)
}

// TestPropTakeAtMostIsTake: TakeAtMost(n) grants g = min(n, whole tokens
// held) and answers exactly as Take(g) does; granting nothing for n > 0 is
// exactly a denied Take(1).
func TestPropTakeAtMostIsTake(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		level := rapid.OneOf(rapid.Int64Range(0, 2*p.Capacity()*p.Unit()), rapid.Int64Min(0))
		s := algo.State{Level: level.Draw(t, "level"), Stamp: rapid.Int64Range(0, maxT).Draw(t, "stamp")}
		now := rapid.Int64Range(max(0, s.Stamp-window(p)), min(maxT, s.Stamp+2*window(p))).Draw(t, "now")
		n := rapid.OneOf(rapid.Int64Range(0, p.Capacity()), rapid.Int64Min(0)).Draw(t, "n")
		next, g, res, err := algo.TokenBucket{}.TakeAtMost(p, s, now, n)
		if err != nil {
			t.Fatal(err)
		}
		_, peek := take(t, algo.TokenBucket{}, p, s, now, 0)
		cost := max(g, 1)
		if n == 0 {
			cost = 0
		}
		want, wantRes := take(t, algo.TokenBucket{}, p, s, now, cost)
		if g != min(n, peek.Remaining) || next != want || res != wantRes {
			t.Fatalf("TakeAtMost(%d) from %+v at %d = %+v, %d, %+v; Take(%d) = %+v, %+v (%d held)", n, s, now, next, g, res, cost, want, wantRes, peek.Remaining)
		}
	})
}

// TestPropReserveIsTakeAtAt: an admitted reservation is a Take at its
// time At, charged early. Its Delay is the least wait after which the
// bucket holds the tokens (a Take of the cost at At is admitted, one a µs
// earlier is not), and from At on the bucket answers exactly as after that
// Take. A refused one changes nothing, and its RetryAfter is exact for the
// same reservation.
func TestPropReserveIsTakeAtAt(t *testing.T) {
	var delayed, refused int
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		full := p.Capacity() * p.Unit()
		level := rapid.OneOf(rapid.Int64Range(0, 2*full), rapid.Int64Range(max(0, full-3*p.Unit()), full+3*p.Unit()), rapid.Int64Min(0))
		s := algo.State{Level: level.Draw(t, "level"), Stamp: rapid.Int64Range(0, maxT).Draw(t, "stamp")}
		now := rapid.OneOf(rapid.Just(s.Stamp), rapid.Int64Range(max(0, s.Stamp-window(p)), min(maxT, s.Stamp+2*window(p)))).Draw(t, "now")
		cost, wait := drawCost(t, p, "cost"), drawWait(t, p)
		next, r, err := algo.TokenBucket{}.Reserve(p, s, now, cost, wait)
		if err != nil {
			t.Fatal(err)
		}
		from := max(now, s.Stamp)
		if !r.Allowed {
			refused++
			ra := us(t, r.RetryAfter)
			if same, peek := take(t, algo.TokenBucket{}, p, s, now, 0); next != same || r.Remaining != peek.Remaining || r.ResetAfter != peek.ResetAfter || r.Ticket != (algo.Ticket{}) {
				t.Fatalf("refused Reserve changed the bucket: %+v -> %+v (%+v); a peek leaves %+v", s, next, r, same)
			}
			// A bucket deep in debt at a late stamp may name a retry past
			// MaxTime (a wait of centuries), when no call can be made:
			// that instant is not asked about, the one before it is.
			if now+ra <= algo.MaxTime {
				if _, again, err := (algo.TokenBucket{}).Reserve(p, next, now+ra, cost, wait); err != nil || !again.Allowed {
					t.Fatalf("Reserve(%d, %d) from %+v at %d refused with RetryAfter %v, refused again then: %+v, %v", cost, wait, s, now, r.RetryAfter, again, err)
				}
			}
			if now+ra-1 <= algo.MaxTime {
				if _, early, err := (algo.TokenBucket{}).Reserve(p, next, now+ra-1, cost, wait); err != nil || early.Allowed {
					t.Fatalf("Reserve(%d, %d) refused with RetryAfter %v, admitted 1µs earlier (%v)", cost, wait, r.RetryAfter, err)
				}
			}
			return
		}
		if us(t, r.Delay) > max(wait, 0) || r.Delay > p.MaxDelay() || r.RetryAfter != 0 {
			t.Fatalf("Reserve(%d, wait %d) = %+v: delay beyond maxWait or MaxDelay %v", cost, wait, r, p.MaxDelay())
		}
		if r.Delay == 0 {
			if want, res := take(t, algo.TokenBucket{}, p, s, now, cost); next != want || r.Result != res || r.Ticket != (algo.Ticket{}) {
				t.Fatalf("Reserve with no wait = %+v, %+v; Take = %+v, %+v", next, r, want, res)
			}
			return
		}
		delayed++
		at := from + us(t, r.Delay)
		if r.At != at {
			t.Fatalf("At %d, want %d", r.At, at)
		}
		taken, res := take(t, algo.TokenBucket{}, p, s, at, cost)
		if _, early := take(t, algo.TokenBucket{}, p, s, at-1, cost); !res.Allowed || early.Allowed {
			t.Fatalf("Reserve(%d) from %+v at %d: delay %v, but a Take at At is %+v and 1µs earlier %+v", cost, s, now, r.Delay, res, early)
		}
		later := rapid.Int64Range(at, min(at+3*window(p), algo.MaxTime)).Draw(t, "later")
		c2 := drawCost(t, p, "c2")
		if _, a := take(t, algo.TokenBucket{}, p, next, later, c2); a != func() algo.Result { _, b := take(t, algo.TokenBucket{}, p, taken, later, c2); return b }() {
			t.Fatalf("after the reservation's time, Take(%d) at %d = %+v, differs from after a Take at At", c2, later, a)
		}
	})
	t.Logf("%d delayed, %d refused", delayed, refused)
}
