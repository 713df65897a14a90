package hybrid_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// fleetKey is a key of TestDenyCacheFleetExact and its reference bucket.
type fleetKey struct {
	p algo.Policy
	s algo.State
	// refunded: every call on the key is marked Request.Refundable,
	// and its tokens are given back (refunds, cancelled reservations) by
	// either instance.
	refunded bool
}

// TestDenyCacheFleetExact: two instances, each with its own DenyCache,
// share one primary as a fleet shares Redis. On key "r" either instance
// takes, grants, reserves, refunds and cancels (the other's reservations
// too), every call marked Request.Refundable, as httplimit's ChargeIf
// and Delay routes mark theirs; on key "t" either instance takes and
// grants, and nobody gives back. Every answer is checked against
// algo.TokenBucket on the same calls: the primary's answers equal it, the
// cache never answers a call on "r" itself, and every local denial on "t"
// is one the primary would give (the refunds and cancellations one
// instance makes never leave the other denying what the primary admits).
func TestDenyCacheFleetExact(t *testing.T) {
	var cases, locals int
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		clk := storetest.NewClock()
		primary := newMem(t, clk)
		cfg := hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1, Size: 8, Shards: 1}
		caches := []*hybrid.DenyCache{newCache(t, primary, cfg), newCache(t, primary, cfg)}
		keys := map[string]*fleetKey{"r": {p: genPolicy(rt, "r"), refunded: true}, "t": {p: genPolicy(rt, "t")}}
		var tickets []algo.Ticket // reservations on "r" that must wait
		for i := range rapid.IntRange(1, 100).Draw(rt, "ops") {
			name := rapid.SampledFrom([]string{"r", "t"}).Draw(rt, "key")
			k, in := keys[name], rapid.IntRange(0, 1).Draw(rt, "instance")
			c, cctx, marked := caches[in], ctx, k.refunded
			ops := []string{"take", "take", "at most"}
			if k.refunded {
				ops = append(ops, "refund", "reserve", "cancel")
			}
			clk.Add(time.Duration(rapid.Int64Range(0, 2*k.p.FillTime().Microseconds()/k.p.Capacity()).Draw(rt, "step µs")) * time.Microsecond)
			now, before := clk.Now().UnixMicro(), c.Stats().Denied
			var got, want any
			var err error
			var wantAllowed bool // whether the primary would admit
			op := rapid.SampledFrom(ops).Draw(rt, "op")
			switch op {
			case "take":
				cost := rapid.Int64Range(0, k.p.Capacity()).Draw(rt, "cost")
				var w algo.Result
				k.s, w, _ = algo.TokenBucket{}.Take(k.p, k.s, now, cost)
				want, wantAllowed = w, w.Allowed
				got, err = c.Take(cctx, store.Request{Key: name, Policy: k.p, Cost: cost, Refundable: marked})
			case "at most":
				n := rapid.Int64Range(0, 2*k.p.Capacity()).Draw(rt, "n")
				var g int64
				var w algo.Result
				k.s, g, w, _ = algo.TokenBucket{}.TakeAtMost(k.p, k.s, now, n)
				want, wantAllowed = []any{g, w}, g > 0 || n == 0
				gg, res, e := c.TakeAtMost(cctx, store.Request{Key: name, Policy: k.p, Cost: n, Refundable: marked})
				got, err = []any{gg, res}, e
			case "refund":
				n := rapid.Int64Range(0, k.p.Capacity()).Draw(rt, "n")
				k.s, want, _ = algo.TokenBucket{}.Refund(k.p, k.s, now, n)
				got, err = c.Refund(cctx, store.Request{Key: name, Policy: k.p, Cost: n, Refundable: marked})
			case "reserve":
				cost := rapid.Int64Range(0, k.p.Capacity()).Draw(rt, "cost")
				wait := rapid.Int64Range(0, k.p.MaxDelay().Microseconds()).Draw(rt, "maxWait µs")
				var w algo.Reservation
				k.s, w, _ = algo.TokenBucket{}.Reserve(k.p, k.s, now, cost, wait)
				if w.Ticket != (algo.Ticket{}) {
					tickets = append(tickets, w.Ticket)
				}
				want = w
				got, err = c.Reserve(cctx, store.Request{Key: name, Policy: k.p, Cost: cost, Refundable: marked}, time.Duration(wait)*time.Microsecond)
			case "cancel": // any instance cancels any reservation, perhaps twice or late
				var tk algo.Ticket
				if len(tickets) > 0 {
					tk = tickets[rapid.IntRange(0, len(tickets)-1).Draw(rt, "ticket")]
				}
				var ok bool
				var w algo.Result
				next, ok, w, _ := algo.TokenBucket{}.Cancel(k.p, k.s, now, tk)
				k.s, want = next, []any{ok, w}
				gok, res, e := c.CancelReservation(cctx, name, k.p, tk)
				got, err = []any{gok, res}, e
			}
			if err != nil {
				rt.Fatalf("step %d: %s on %q through instance %d: %v", i, op, name, in, err)
			}
			local := c.Stats().Denied > before
			switch {
			case local && k.refunded:
				rt.Fatalf("step %d: %s on %q (marked refundable) answered locally by instance %d: %v", i, op, name, in, got)
			case local && wantAllowed:
				rt.Fatalf("step %d: %s on %q denied locally by instance %d (%v), the primary admits: %v", i, op, name, in, got, want)
			case local:
				locals++
			case fmt.Sprint(got) != fmt.Sprint(want):
				rt.Fatalf("step %d: %s on %q through instance %d = %v, algo.TokenBucket says %v", i, op, name, in, got, want)
			}
		}
	})
	if cases >= 50 && locals == 0 {
		t.Errorf("%d cases and no local denial: the check of local denials checked nothing", cases)
	}
	t.Logf("%d cases, %d local denials on \"t\", each one the primary's", cases, locals)
}
