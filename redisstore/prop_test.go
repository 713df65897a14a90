package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// genEdgePolicy draws a valid policy, favouring the edges of algo's
// bounds: capacity 1 and 1e9, one token a day, a million and a billion a
// second, and periods that make Unit large.
func genEdgePolicy(t *rapid.T, label string) algo.Policy {
	rate := rapid.OneOf(
		rapid.Just(algo.PerDay(1)),
		rapid.Just(algo.PerSecond(1_000_000)),
		rapid.Just(algo.PerSecond(algo.MaxPerSecond)),
		rapid.Just(algo.PerSecond(1)),
		rapid.Custom(func(t *rapid.T) algo.Rate {
			per := rapid.SampledFrom([]time.Duration{time.Microsecond, 7 * time.Millisecond, time.Second,
				time.Minute, time.Hour, 24 * time.Hour, algo.MaxPeriod}).Draw(t, "period")
			return algo.Per(rapid.Int64Range(1, 1000).Draw(t, "tokens"), per)
		}),
	).Draw(t, label+"rate")
	capacity := rapid.OneOf(
		rapid.Just(int64(1)),
		rapid.Just(int64(1_000_000_000)),
		rapid.Just(int64(-1)), // the largest the rate allows: full near 2^52
		rapid.Int64Range(1, 100),
		rapid.Int64Range(1, algo.MaxCapacity),
	).Draw(t, label+"capacity")
	if capacity == -1 {
		unit := rate.Period.Microseconds() / gcd(rate.Tokens, rate.Period.Microseconds())
		capacity = min(algo.MaxCapacity, algo.MaxLevel/unit)
	}
	p, err := algo.NewPolicy(capacity, rate)
	for err != nil && capacity > 1 { // too large for this rate: shrink to fit
		capacity /= 7
		p, err = algo.NewPolicy(capacity, rate)
	}
	if err != nil {
		t.Skipf("no valid policy at %v", rate)
	}
	return p
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// genEdgeStep draws a clock move: none, a microsecond or a few, about one
// token's refill, up to two fill times, a long idle gap, or a step back.
func genEdgeStep(t *rapid.T, p algo.Policy) time.Duration {
	token := (p.Unit() + p.Refill() - 1) / p.Refill()
	fill := min(p.FillTime().Microseconds(), 400*365*24*3600*1e6/2)
	us := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(1, 3),
		rapid.Int64Range(max(token-1, 0), token+1),
		rapid.Int64Range(0, 2*fill),
		rapid.Int64Range(0, 30*365*24*3600*1e6), // idle for up to 30 years
		rapid.Int64Range(-2*token-5, -1),
		rapid.Int64Range(-365*24*3600*1e6, -1), // a clock up to a year behind
	).Draw(t, "step")
	return time.Duration(us) * time.Microsecond
}

func genEdgeCost(t *rapid.T, p algo.Policy) int64 {
	return rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Just(int64(1)),
		rapid.Just(p.Capacity()),
		rapid.Int64Range(0, p.Capacity()),
	).Draw(t, "cost")
}

// forget is what both stores do with a bucket that is full at now: drop
// it. (A full bucket whose stamp is ahead of a caller's clock that later
// steps back would report a ResetAfter longer by the difference; forgetting
// it is the documented freedom of a store.)
func forget(p algo.Policy, s algo.State, now int64) algo.State {
	if (algo.TokenBucket{}).IdleAt(p, s) <= now {
		return algo.State{}
	}
	return s
}

// genEdgeWait draws a reservation's maxWait: none, about a token's
// refill, the policy's MaxDelay, up to two fill times, or negative.
func genEdgeWait(t *rapid.T, p algo.Policy) time.Duration {
	token := (p.Unit() + p.Refill() - 1) / p.Refill()
	return time.Duration(rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, 3*token),
		rapid.Just(p.MaxDelay().Microseconds()),
		rapid.Int64Range(0, 2*p.FillTime().Microseconds()),
		rapid.Int64Range(-5, -1),
	).Draw(t, "maxWait µs")) * time.Microsecond
}

// genAtMost draws TakeAtMost's n: up to the capacity, or above it.
func genAtMost(t *rapid.T, p algo.Policy) int64 {
	return rapid.OneOf(rapid.Int64Range(0, p.Capacity()), rapid.Int64Range(p.Capacity(), 1<<40)).Draw(t, "n")
}

// differential is one case of TestDifferential: three keys, the
// reference state of each as a store keeps it (forgotten when full;
// untouched by a refund or cancel that gives nothing back, since neither
// writes), and the reservations admitted with a ticket.
type differential struct {
	rt     *rapid.T
	ms     *memstore.Store
	rs     *redisstore.Store
	keys   []string
	pols   []algo.Policy
	states []algo.State
	open   []ticket
	step   int
	at     int64
}

// ticket is an admitted reservation's ticket and the key it was made on.
type ticket struct {
	i  int
	tk algo.Ticket
}

// same fails the case unless memstore and redisstore both answered want.
func (d *differential) same(op string, want, gotM, gotR any, errM, errR error) {
	d.rt.Helper()
	if errM != nil || errR != nil {
		d.rt.Fatalf("step %d at %d: %s: memstore %v, redisstore %v", d.step, d.at, op, errM, errR)
	}
	if fmt.Sprint(gotM) != fmt.Sprint(want) || fmt.Sprint(gotR) != fmt.Sprint(want) {
		d.rt.Fatalf("step %d at %d: %s:\nalgo       %+v\nmemstore   %+v\nredisstore %+v", d.step, d.at, op, want, gotM, gotR)
	}
}

// keep records key i's next state as the stores keep it.
func (d *differential) keep(i int, s algo.State) { d.states[i] = forget(d.pols[i], s, d.at) }

func (d *differential) check(err error) {
	if err != nil {
		d.rt.Fatalf("algo: %v", err)
	}
}

// TestDifferential drives algo.TokenBucket, memstore and redisstore (client
// clock) with one random sequence over three keys of takes, multi-takes,
// refunds (single and multi), partial grants, reservations (which put the
// buckets into debt), cancellations of any ticket given (or of one already
// cancelled or due) and clock moves, forwards and back, and requires
// identical answers at every step.
func TestDifferential(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		clk := storetest.NewClock()
		rs := newStore(t, rdb, redisstore.Config{Clock: clk, Prefix: fmt.Sprintf("%srun%d:", redistest.Prefix(t), run), TTLMargin: time.Hour})
		ms, err := memstore.New(memstore.Config{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer ms.Close()
		d := &differential{rt: rt, ms: ms, rs: rs, keys: []string{"{u}:a", "{u}:b", "{u}:c"},
			pols: []algo.Policy{genEdgePolicy(rt, "a "), genEdgePolicy(rt, "b "), genEdgePolicy(rt, "c ")}, states: make([]algo.State, 3)}
		ops := []string{"take", "take", "multi", "refund", "refund multi", "at most", "reserve", "reserve", "cancel"}
		for step := range rapid.IntRange(1, 50).Draw(rt, "ops") {
			i := rapid.IntRange(0, 2).Draw(rt, "key")
			now := clk.Add(genEdgeStep(rt, d.pols[i]))
			if now.UnixMicro() < 0 || now.UnixMicro() > algo.MaxTime {
				clk.Set(storetest.Start)
				now = storetest.Start
			}
			d.step, d.at = step, now.UnixMicro()
			d.do(rapid.SampledFrom(ops).Draw(rt, "op"), i)
		}
	})
}

// do runs operation op (one of the names the properties draw) at key i.
func (d *differential) do(op string, i int) {
	switch op {
	case "take":
		d.take(i)
	case "multi":
		d.multi(i)
	case "refund":
		d.refund(i)
	case "refund multi":
		d.refundMulti()
	case "at most":
		d.atMost(i)
	case "reserve":
		d.reserve(i)
	case "cancel":
		d.cancel()
	default:
		d.rt.Fatalf("unknown op %q", op)
	}
}

func (d *differential) take(i int) {
	cost := genEdgeCost(d.rt, d.pols[i])
	next, want, err := algo.TokenBucket{}.Take(d.pols[i], d.states[i], d.at, cost)
	d.check(err)
	d.keep(i, next)
	gotM, errM := d.ms.Take(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: cost})
	gotR, errR := d.rs.Take(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: cost})
	d.same(fmt.Sprintf("Take(%s, %v, %d)", d.keys[i], d.pols[i], cost), want, gotM, gotR, errM, errR)
}

func (d *differential) multi(i int) {
	rt, ctx := d.rt, context.Background()
	reqs := []store.Request{{Key: d.keys[i], Policy: d.pols[i], Cost: genEdgeCost(rt, d.pols[i])}}
	idx := []int{i}
	if j := (i + 1 + rapid.IntRange(0, 1).Draw(rt, "other")) % 3; rapid.Bool().Draw(rt, "two") {
		reqs = append(reqs, store.Request{Key: d.keys[j], Policy: d.pols[j], Cost: genEdgeCost(rt, d.pols[j])})
		idx = append(idx, j)
	}
	want := store.MultiResult{Allowed: true, Denied: -1, Results: make([]algo.Result, len(reqs))}
	next := make([]algo.State, len(reqs))
	for j, r := range reqs {
		var err error
		next[j], want.Results[j], err = algo.TokenBucket{}.Take(r.Policy, d.states[idx[j]], d.at, r.Cost)
		d.check(err)
		if r := want.Results[j]; !r.Allowed && (want.Denied < 0 || r.RetryAfter > want.RetryAfter) {
			want.Allowed, want.Denied, want.RetryAfter = false, j, r.RetryAfter
		}
	}
	for j := range reqs { // denied: only the denying buckets move on
		if want.Allowed || !want.Results[j].Allowed {
			d.keep(idx[j], next[j])
		}
	}
	gotM, errM := d.ms.TakeMulti(ctx, reqs)
	gotR, errR := d.rs.TakeMulti(ctx, reqs)
	d.same(fmt.Sprintf("TakeMulti(%+v)", reqs), want, gotM, gotR, errM, errR)
}

func (d *differential) refund(i int) {
	n := genEdgeCost(d.rt, d.pols[i])
	next, want, err := algo.TokenBucket{}.Refund(d.pols[i], d.states[i], d.at, n)
	d.check(err)
	if n > 0 && d.states[i] != (algo.State{}) { // else nothing is written
		d.keep(i, next)
	}
	gotM, errM := d.ms.Refund(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: n})
	gotR, errR := d.rs.Refund(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: n})
	d.same(fmt.Sprintf("Refund(%s, %v, %d)", d.keys[i], d.pols[i], n), want, gotM, gotR, errM, errR)
}

func (d *differential) refundMulti() {
	idx := rapid.SliceOfNDistinct(rapid.IntRange(0, 2), 1, 3, rapid.ID[int]).Draw(d.rt, "keys")
	reqs := make([]store.Request, len(idx))
	want := make([]algo.Result, len(idx))
	for j, i := range idx {
		reqs[j] = store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: genEdgeCost(d.rt, d.pols[i])}
		next, res, err := algo.TokenBucket{}.Refund(d.pols[i], d.states[i], d.at, reqs[j].Cost)
		d.check(err)
		if want[j] = res; reqs[j].Cost > 0 && d.states[i] != (algo.State{}) {
			d.keep(i, next)
		}
	}
	gotM, errM := d.ms.RefundMulti(context.Background(), reqs)
	gotR, errR := d.rs.RefundMulti(context.Background(), reqs)
	d.same(fmt.Sprintf("RefundMulti(%+v)", reqs), want, gotM, gotR, errM, errR)
}

func (d *differential) atMost(i int) {
	n := genAtMost(d.rt, d.pols[i])
	next, g, want, err := algo.TokenBucket{}.TakeAtMost(d.pols[i], d.states[i], d.at, n)
	d.check(err)
	d.keep(i, next)
	gM, gotM, errM := d.ms.TakeAtMost(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: n})
	gR, gotR, errR := d.rs.TakeAtMost(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: n})
	d.same(fmt.Sprintf("TakeAtMost(%s, %v, %d)", d.keys[i], d.pols[i], n), []any{g, want}, []any{gM, gotM}, []any{gR, gotR}, errM, errR)
}

func (d *differential) reserve(i int) {
	cost, wait := genEdgeCost(d.rt, d.pols[i]), genEdgeWait(d.rt, d.pols[i])
	next, want, err := algo.TokenBucket{}.Reserve(d.pols[i], d.states[i], d.at, cost, wait.Microseconds())
	d.check(err)
	d.keep(i, next)
	if want.Ticket != (algo.Ticket{}) {
		d.open = append(d.open, ticket{i, want.Ticket})
	}
	gotM, errM := d.ms.Reserve(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: cost}, wait)
	gotR, errR := d.rs.Reserve(context.Background(), store.Request{Key: d.keys[i], Policy: d.pols[i], Cost: cost}, wait)
	d.same(fmt.Sprintf("Reserve(%s, %v, %d, %v)", d.keys[i], d.pols[i], cost, wait), want, gotM, gotR, errM, errR)
}

// cancel cancels any ticket given so far (perhaps again, or late), or the
// zero Ticket.
func (d *differential) cancel() {
	tk := ticket{i: rapid.IntRange(0, 2).Draw(d.rt, "key")}
	if len(d.open) > 0 && rapid.IntRange(0, 4).Draw(d.rt, "zero ticket") > 0 {
		tk = d.open[rapid.IntRange(0, len(d.open)-1).Draw(d.rt, "ticket")]
	}
	i := tk.i
	next, ok, want, err := algo.TokenBucket{}.Cancel(d.pols[i], d.states[i], d.at, tk.tk)
	d.check(err)
	if ok {
		d.keep(i, next)
	}
	okM, gotM, errM := d.ms.CancelReservation(context.Background(), d.keys[i], d.pols[i], tk.tk)
	okR, gotR, errR := d.rs.CancelReservation(context.Background(), d.keys[i], d.pols[i], tk.tk)
	d.same(fmt.Sprintf("CancelReservation(%s, %v, %+v)", d.keys[i], d.pols[i], tk.tk), []any{ok, want}, []any{okM, gotM}, []any{okR, gotR}, errM, errR)
}

// TestServerClockMatchesAlgo replays every server-clock call through algo
// at the time the script used (the *Now helpers return Redis's TIME):
// takes, refunds, partial grants, reservations (into debt) and
// cancellations of the tickets they gave, in any order, from a state
// written in the wire encoding (seedServer: debt included, or none; the
// policy named by number or in full). The
// answers must be identical, denials and peeks included. After a call that
// wrote, the stored state (the stamp rebuilt from the key's expiry)
// must be algo's too, and the key must expire at the first millisecond at
// which the bucket is full, debt included. This covers the script's fast
// path, which only the server clock's one-key take runs, its fall through
// to the general path for deficits too long for it (≥ 1e11 level units,
// which the edge policies reach), and the general path of every other op.
func TestServerClockMatchesAlgo(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{})
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		key := fmt.Sprintf("k%d", run)
		p := genEdgePolicy(rt, "")
		st := seedServer(rt, rdb, s.Key(key), "pol:"+s.Key(""), p)
		var open []algo.Ticket
		for step := range rapid.IntRange(1, 30).Draw(rt, "ops") {
			prev := st
			var call string
			var got, want any
			var now int64
			var err error
			var wrote bool // the op writes the key (unless it is full, or absent for a refund)
			switch op := rapid.SampledFrom([]string{"take", "take", "refund", "at most", "reserve", "cancel"}).Draw(rt, "op"); op {
			case "take":
				cost := genEdgeCost(rt, p)
				var res algo.Result
				res, now, err = redisstore.TakeNow(ctx, s, key, p, cost)
				call, got, wrote = fmt.Sprintf("Take(%d)", cost), res, cost > 0 && res.Allowed
				if err == nil {
					st, want, err = algo.TokenBucket{}.Take(p, st, now, cost)
				}
			case "refund":
				n := genEdgeCost(rt, p)
				var res algo.Result
				res, now, err = redisstore.RefundNow(ctx, s, key, p, n)
				call, got, wrote = fmt.Sprintf("Refund(%d)", n), res, n > 0
				if err == nil {
					st, want, err = algo.TokenBucket{}.Refund(p, st, now, n)
				}
			case "at most":
				n := genAtMost(rt, p)
				var g int64
				var res algo.Result
				g, res, now, err = redisstore.TakeAtMostNow(ctx, s, key, p, n)
				call, got, wrote = fmt.Sprintf("TakeAtMost(%d)", n), []any{g, res}, g > 0
				if err == nil {
					var wg int64
					var w algo.Result
					st, wg, w, err = algo.TokenBucket{}.TakeAtMost(p, st, now, n)
					want = []any{wg, w}
				}
			case "reserve":
				cost, wait := genEdgeCost(rt, p), genEdgeWait(rt, p)
				var res algo.Reservation
				res, now, err = redisstore.ReserveNow(ctx, s, key, p, cost, wait)
				call, got, wrote = fmt.Sprintf("Reserve(%d, %v)", cost, wait), res, cost > 0 && res.Allowed
				if err == nil {
					var w algo.Reservation
					st, w, err = algo.TokenBucket{}.Reserve(p, st, now, cost, wait.Microseconds())
					want = w
					if w.Ticket != (algo.Ticket{}) {
						open = append(open, w.Ticket)
					}
				}
			case "cancel":
				var tk algo.Ticket
				if len(open) > 0 {
					tk = open[rapid.IntRange(0, len(open)-1).Draw(rt, "ticket")]
				}
				var ok bool
				var res algo.Result
				ok, res, now, err = redisstore.CancelNow(ctx, s, key, p, tk)
				call, got, wrote = fmt.Sprintf("CancelReservation(%+v)", tk), []any{ok, res}, ok
				if err == nil {
					var wok bool
					var w algo.Result
					st, wok, w, err = algo.TokenBucket{}.Cancel(p, st, now, tk)
					want = []any{wok, w}
				}
			}
			if err != nil {
				rt.Fatalf("step %d: %s: %v", step, call, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				rt.Fatalf("step %d: %s under %v from %+v at %d µs = %+v; algo says %+v", step, call, p, prev, now, got, want)
			}
			after, err := s.Inspect(ctx, key, p)
			if err != nil {
				rt.Fatal(err)
			}
			if !wrote || !after.Exists {
				continue // the key holds an earlier state, or none
			}
			if stored := (algo.State{Level: after.Deficit, Stamp: after.Stamp.UnixMicro()}); stored != st {
				rt.Fatalf("step %d: %s under %v at %d µs stored %+v; algo says %+v", step, call, p, now, stored, st)
			}
			// The key expires at the first millisecond at which the bucket is full.
			idle := algo.TokenBucket{}.IdleAt(p, st)
			// (In ms, not as a Duration: a debt's expiry may pass the year 2262.)
			exp, err := rdb.Do(ctx, "PEXPIRETIME", s.Key(key)).Int64()
			if err == nil && exp == -2 { // expired since: real time runs on
				continue
			}
			if err != nil || exp != (idle+999)/1000 {
				rt.Fatalf("step %d: PEXPIRETIME %v (%v), want %d ms: the bucket is full at %d µs", step, exp, err, (idle+999)/1000, idle)
			}
		}
	})
}
