package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The checks of the operations around a take: Refund, TakeAtMost and
// Reserve. A store that answers one with store.ErrUnsupported fails.

// apply applies one algo.TokenBucket operation, f, to the reference
// bucket at now.
func (r *ref) apply(t tb, op string, f func(algo.State, int64) (algo.State, error), now time.Time) {
	t.Helper()
	s, err := f(r.s, now.UnixMicro())
	if err != nil {
		t.Fatalf("reference %s(%v, %+v): %v", op, r.p, r.s, err)
	}
	r.s = s
}

// same fails t unless the store's answer equals the reference's.
func (e *env) same(t tb, op string, key string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		now := e.clk.Now()
		t.Fatalf("at %v (+%v): %s on %q = %+v, algo.TokenBucket says %+v", now.Format(time.RFC3339Nano), now.Sub(Start), op, key, got, want)
	}
}

// refund refunds n to key on both the store and the reference and
// compares the answers.
func (e *env) refund(t tb, key string, r *ref, n int64) algo.Result {
	t.Helper()
	now := e.clk.Now()
	var want algo.Result
	r.apply(t, "Refund", func(s algo.State, at int64) (next algo.State, err error) {
		next, want, err = algo.TokenBucket{}.Refund(r.p, s, at, n)
		return next, err
	}, now)
	got, err := e.s.Refund(context.Background(), store.Request{Key: key, Policy: r.p, Cost: n})
	if err != nil {
		t.Fatalf("Refund(%q, %v, %d): %v", key, r.p, n, err)
	}
	e.same(t, fmt.Sprintf("Refund(%d)", n), key, got, want)
	return got
}

// interleave is a rapid property: random takes and peeks on a fresh key,
// checked against the reference, interleaved with op (named name), which
// checks itself.
func (e *env) interleave(t *testing.T, name string, op func(t *rapid.T, key string, r *ref)) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "")
		key, r := e.key(), &ref{p: p}
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			e.clk.Add(genStep(t, p))
			if rapid.Bool().Draw(t, name) {
				op(t, key, r)
				continue
			}
			e.check(t, key, r, genCost(t, p))
		}
	})
}

// mustSupport fails t when the store answers op with
// store.ErrUnsupported: every backend implements every operation.
func mustSupport(t *testing.T, op string, err error) {
	t.Helper()
	if errors.Is(err, store.ErrUnsupported) {
		t.Fatalf("%s answers store.ErrUnsupported: every backend implements every operation (%v)", op, err)
	}
}

// testRefund checks Refund and RefundMulti.
func testRefund(t *testing.T, e *env) {
	_, err := e.s.Refund(context.Background(), store.Request{Key: e.key(), Policy: algo.PerSecond(1).Burst(1), Cost: 0})
	mustSupport(t, "Refund", err)
	t.Run("reference", func(t *testing.T) {
		// Takes, peeks and refunds of any size on one key match the
		// reference, and a refund never raises the bucket above capacity.
		e.interleave(t, "refund", func(t *rapid.T, key string, r *ref) {
			if res := e.refund(t, key, r, genCost(t, r.p)); res.Remaining > r.p.Capacity() || !res.Allowed {
				t.Fatalf("Refund answered %+v", res)
			}
		})
	})
	t.Run("exact", func(t *testing.T) {
		// Two keys see the same requests; on one, an admitted take of c is
		// refunded at once. Every later answer is the same on both.
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t, "")
			plain, undone := e.key(), e.key()
			for range rapid.IntRange(1, 20).Draw(t, "ops") {
				e.clk.Add(genStep(t, p))
				if c := genCost(t, p); rapid.Bool().Draw(t, "undo") {
					if res := e.take(t, undone, p, c); res.Allowed {
						if back, err := e.s.Refund(context.Background(), store.Request{Key: undone, Policy: p, Cost: c}); err != nil || back != e.take(t, plain, p, 0) {
							t.Fatalf("Take(%d)+Refund(%d) = %+v, %v; the untouched key peeks %+v", c, c, back, err, e.take(t, plain, p, 0))
						}
					}
				}
				cost := genCost(t, p)
				if a, b := e.take(t, plain, p, cost), e.take(t, undone, p, cost); a != b {
					t.Fatalf("Take(%d) = %+v on the untouched key, %+v on the one with take+refund", cost, a, b)
				}
			}
		})
	})
	t.Run("multi", func(t *testing.T) { testRefundMulti(t, e) })
	t.Run("bad input", func(t *testing.T) {
		testOpBadInput(t, e, "Refund", func(ctx context.Context, key string, p algo.Policy, n int64) error {
			_, err := e.s.Refund(ctx, store.Request{Key: key, Policy: p, Cost: n})
			return err
		}, true)
	})
	t.Run("close", func(t *testing.T) { testOpsClose(t, e) }) // last: it closes the store
}

// testRefundMulti: RefundMulti over a few keys matches the reference's
// refunds, bad input anywhere or a key named twice refunds nothing.
func testRefundMulti(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		keys := e.tagged(3)
		refs := []*ref{{p: genPolicy(t, "a ")}, {p: genPolicy(t, "b ")}, {p: genPolicy(t, "c ")}}
		for range rapid.IntRange(1, 15).Draw(t, "ops") {
			i := rapid.IntRange(0, 2).Draw(t, "key")
			e.clk.Add(genStep(t, refs[i].p))
			if rapid.IntRange(0, 2).Draw(t, "single") > 0 {
				e.check(t, keys[i], refs[i], genCost(t, refs[i].p))
				continue
			}
			idx := rapid.SliceOfNDistinct(rapid.IntRange(0, 2), 1, 3, rapid.ID[int]).Draw(t, "keys")
			reqs := make([]store.Request, len(idx))
			want := make([]algo.Result, len(idx))
			for j, k := range idx {
				reqs[j] = store.Request{Key: keys[k], Policy: refs[k].p, Cost: genCost(t, refs[k].p)}
				refs[k].apply(t, "Refund", func(s algo.State, at int64) (next algo.State, err error) {
					next, want[j], err = algo.TokenBucket{}.Refund(refs[k].p, s, at, reqs[j].Cost)
					return next, err
				}, e.clk.Now())
			}
			got, err := e.s.RefundMulti(context.Background(), reqs)
			if err != nil {
				t.Fatalf("RefundMulti(%+v): %v", reqs, err)
			}
			e.same(t, "RefundMulti", keys[0], got, want)
		}
	})
	p := algo.PerSecond(1).Burst(5)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		bad  store.Request // Key "" becomes a fresh key, except for ErrEmptyKey
		want error
	}{
		{"empty key", context.Background(), store.Request{Policy: p, Cost: 1}, store.ErrEmptyKey},
		{"invalid policy", context.Background(), store.Request{Policy: algo.Policy{}, Cost: 1}, algo.ErrInvalidPolicy},
		{"negative", context.Background(), store.Request{Policy: p, Cost: -1}, algo.ErrInvalidCost},
		{"above capacity", context.Background(), store.Request{Policy: p, Cost: 6}, algo.ErrCostExceedsCapacity},
		{"duplicate key", context.Background(), store.Request{Policy: p, Cost: 1}, store.ErrDuplicateKey},
		{"canceled", canceled, store.Request{Policy: p, Cost: 1}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := e.tagged(3)
			for _, k := range keys {
				e.take(t, k, p, 3)
			}
			bad := tc.bad
			switch tc.want {
			case store.ErrEmptyKey:
			case store.ErrDuplicateKey:
				bad.Key = keys[0]
			default:
				bad.Key = keys[1]
			}
			reqs := []store.Request{{Key: keys[0], Policy: p, Cost: 1}, bad, {Key: keys[2], Policy: p, Cost: 1}}
			if res, err := e.s.RefundMulti(tc.ctx, reqs); !errors.Is(err, tc.want) {
				t.Fatalf("RefundMulti(%+v) = %+v, %v; want an error matching %v", reqs, res, err, tc.want)
			}
			for _, k := range keys {
				if res := e.take(t, k, p, 0); res.Remaining != 2 {
					t.Fatalf("after a refused RefundMulti, %q holds %d, want the 2 it held", k, res.Remaining)
				}
			}
		})
	}
}

// testOpBadInput: each bad input to op is an error matching its sentinel
// and changes nothing: a bucket with 2 of 5 tokens taken still holds 3.
// capped is whether an amount above capacity is an error (TakeAtMost's is
// not).
func testOpBadInput(t *testing.T, e *env, name string, op func(ctx context.Context, key string, p algo.Policy, n int64) error, capped bool) {
	p := algo.PerSecond(1).Burst(5)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		key    string
		policy algo.Policy
		n      int64
		want   error
	}{
		{"empty key", context.Background(), "", p, 1, store.ErrEmptyKey},
		{"key too long", context.Background(), e.sized(store.DefaultMaxKeyLen + 1), p, 1, store.ErrKeyTooLong},
		{"zero policy", context.Background(), e.key(), algo.Policy{}, 1, algo.ErrInvalidPolicy},
		{"zero rate", context.Background(), e.key(), algo.PerSecond(0).Burst(5), 1, algo.ErrInvalidPolicy},
		{"negative", context.Background(), e.key(), p, -1, algo.ErrInvalidCost},
		{"canceled", canceled, e.key(), p, 1, context.Canceled},
	}
	if capped {
		tests = append(tests, struct {
			name   string
			ctx    context.Context
			key    string
			policy algo.Policy
			n      int64
			want   error
		}{"above capacity", context.Background(), e.key(), p, 6, algo.ErrCostExceedsCapacity})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			touch := tc.key != "" && !errors.Is(tc.want, store.ErrKeyTooLong)
			if touch {
				e.take(t, tc.key, p, 2)
			}
			if err := op(tc.ctx, tc.key, tc.policy, tc.n); !errors.Is(err, tc.want) {
				t.Fatalf("%s(%q, %v, %d) = %v; want an error matching %v", name, tc.key, tc.policy, tc.n, err, tc.want)
			}
			if touch {
				if res := e.take(t, tc.key, p, 0); res.Remaining != 3 {
					t.Fatalf("after the failed %s, %q holds %d, want the 3 it held", name, tc.key, res.Remaining)
				}
			}
		})
	}
}

// testTakeAtMost checks TakeAtMost.
func testTakeAtMost(t *testing.T, e *env) {
	_, _, err := e.s.TakeAtMost(context.Background(), store.Request{Key: e.key(), Policy: algo.PerSecond(1).Burst(1), Cost: 0})
	mustSupport(t, "TakeAtMost", err)
	t.Run("reference", func(t *testing.T) {
		// Partial grants, takes and peeks on one key match the
		// reference, grants included.
		e.interleave(t, "at most", func(t *rapid.T, key string, r *ref) {
			n := rapid.OneOf(rapid.Int64Range(0, r.p.Capacity()), rapid.Int64Range(r.p.Capacity(), 1<<40)).Draw(t, "n")
			var want algo.Result
			var wantG int64
			r.apply(t, "TakeAtMost", func(s algo.State, at int64) (next algo.State, err error) {
				next, wantG, want, err = algo.TokenBucket{}.TakeAtMost(r.p, s, at, n)
				return next, err
			}, e.clk.Now())
			g, got, err := e.s.TakeAtMost(context.Background(), store.Request{Key: key, Policy: r.p, Cost: n})
			if err != nil {
				t.Fatalf("TakeAtMost(%q, %v, %d): %v", key, r.p, n, err)
			}
			e.same(t, fmt.Sprintf("TakeAtMost(%d)", n), key, []any{g, got}, []any{wantG, want})
		})
	})
	t.Run("bad input", func(t *testing.T) {
		testOpBadInput(t, e, "TakeAtMost", func(ctx context.Context, key string, p algo.Policy, n int64) error {
			_, _, err := e.s.TakeAtMost(ctx, store.Request{Key: key, Policy: p, Cost: n})
			return err
		}, false)
	})
	t.Run("close", func(t *testing.T) { testOpsClose(t, e) }) // last: it closes the store
}

// reserver drives store.Store and the reference together on one key,
// and records when each admitted request proceeds.
type reserver struct {
	e     *env
	key   string
	r     *ref
	open  []algo.Reservation // admitted, waiting, not cancelled
	costs []int64
	done  []event // what proceeded (or will, at its time)
}

// reserve reserves cost with maxWait on both and compares the answers.
func (v *reserver) reserve(t tb, cost int64, maxWait time.Duration) algo.Reservation {
	t.Helper()
	now := v.e.clk.Now()
	var want algo.Reservation
	v.r.apply(t, "Reserve", func(s algo.State, at int64) (next algo.State, err error) {
		next, want, err = algo.TokenBucket{}.Reserve(v.r.p, s, at, cost, int64(maxWait/time.Microsecond))
		return next, err
	}, now)
	got, err := v.e.s.Reserve(context.Background(), store.Request{Key: v.key, Policy: v.r.p, Cost: cost}, maxWait)
	if err != nil {
		t.Fatalf("Reserve(%q, %v, %d, %v): %v", v.key, v.r.p, cost, maxWait, err)
	}
	v.e.same(t, fmt.Sprintf("Reserve(%d, %v)", cost, maxWait), v.key, got, want)
	switch {
	case !got.Allowed || cost == 0:
	case got.Delay == 0:
		v.done = append(v.done, event{now.UnixMicro(), cost})
	default:
		v.open, v.costs = append(v.open, got), append(v.costs, cost)
	}
	return got
}

// cancel cancels the i-th open reservation on both and compares.
func (v *reserver) cancel(t tb, i int) bool {
	t.Helper()
	res := v.open[i]
	var want algo.Result
	var wantOK bool
	v.r.apply(t, "Cancel", func(s algo.State, at int64) (next algo.State, err error) {
		next, wantOK, want, err = algo.TokenBucket{}.Cancel(v.r.p, s, at, res.Ticket)
		return next, err
	}, v.e.clk.Now())
	ok, got, err := v.e.s.CancelReservation(context.Background(), v.key, v.r.p, res.Ticket)
	if err != nil {
		t.Fatalf("CancelReservation(%q, %+v): %v", v.key, res.Ticket, err)
	}
	v.e.same(t, fmt.Sprintf("CancelReservation(%+v)", res.Ticket), v.key, []any{ok, got}, []any{wantOK, want})
	if v.e.clk.Now().UnixMicro() >= res.At { // too late: it proceeds
		v.done = append(v.done, event{res.At, v.costs[i]})
	}
	v.open, v.costs = slices.Delete(v.open, i, i+1), slices.Delete(v.costs, i, i+1)
	return ok
}

// take takes on both, recording an admission.
func (v *reserver) take(t tb, cost int64) {
	t.Helper()
	if res := v.e.check(t, v.key, v.r, cost); res.Allowed && cost > 0 {
		v.done = append(v.done, event{v.e.clk.Now().UnixMicro(), cost})
	}
}

// law fails t if what proceeds (takes at once, reservations at their time
// unless cancelled before it) exceeds capacity + ⌊rate·(t2−t1)⌋ in any
// interval [t1, t2].
func (v *reserver) law(t tb) {
	t.Helper()
	out := slices.Clone(v.done)
	for i, r := range v.open {
		out = append(out, event{r.At, v.costs[i]})
	}
	slices.SortStableFunc(out, func(a, b event) int { return int(a.at - b.at) })
	rate := v.r.p.Rate()
	for i := range out {
		var sum int64
		for j := i; j < len(out); j++ {
			sum += out[j].cost
			bound := v.r.p.Capacity() + rate.Tokens*(out[j].at-out[i].at)/rate.Period.Microseconds()
			if sum > bound {
				t.Fatalf("%v: %d tokens proceed in [%d µs, %d µs], law allows %d: %+v", v.r.p, sum, out[i].at, out[j].at, bound, out)
			}
		}
	}
}

// genWait draws a reservation's maxWait: none, about a token's refill,
// the policy's MaxDelay, more.
func genWait(t *rapid.T, p algo.Policy) time.Duration {
	token := (p.Unit() + p.Refill() - 1) / p.Refill()
	return time.Duration(rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, 3*token),
		rapid.Just(p.MaxDelay().Microseconds()),
		rapid.Int64Range(0, 2*p.FillTime().Microseconds()),
	).Draw(t, "maxWait µs")) * time.Microsecond
}

// testReserve checks Reserve and CancelReservation.
func testReserve(t *testing.T, e *env) {
	_, err := e.s.Reserve(context.Background(), store.Request{Key: e.key(), Policy: algo.PerSecond(1).Burst(1), Cost: 0}, 0)
	mustSupport(t, "Reserve", err)
	t.Run("reference", func(t *testing.T) {
		// Reservations, cancellations (of any open one, in any order, early
		// or late), takes and peeks on one key match the reference, and
		// what proceeds keeps the law.
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t, "")
			v := &reserver{e: e, key: e.key(), r: &ref{p: p}}
			for range rapid.IntRange(1, 30).Draw(t, "ops") {
				e.clk.Add(genStep(t, p))
				switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
				case op == 0:
					v.take(t, genCost(t, p))
				case op == 1 && len(v.open) > 0:
					v.cancel(t, rapid.IntRange(0, len(v.open)-1).Draw(t, "which"))
				default:
					v.reserve(t, genCost(t, p), genWait(t, p))
				}
			}
			v.law(t)
		})
	})
	t.Run("law", func(t *testing.T) {
		// A queue of reservations on an emptied bucket, some cancelled in
		// any order before their time, then new ones that would take the
		// freed places: what proceeds keeps the law.
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t, "")
			v := &reserver{e: e, key: e.key(), r: &ref{p: p}}
			v.take(t, p.Capacity())
			token := (p.Unit() + p.Refill() - 1) / p.Refill()
			step := func() {
				e.clk.Add(time.Duration(rapid.Int64Range(0, token).Draw(t, "step µs")) * time.Microsecond)
			}
			cost := rapid.OneOf(rapid.Just(int64(1)), rapid.Just(p.Capacity()), rapid.Int64Range(1, p.Capacity()))
			for range rapid.IntRange(1, 5).Draw(t, "queued") {
				step()
				v.reserve(t, cost.Draw(t, "cost"), p.MaxDelay())
			}
			for range rapid.IntRange(0, len(v.open)).Draw(t, "cancels") {
				step()
				v.cancel(t, rapid.IntRange(0, len(v.open)-1).Draw(t, "which"))
			}
			for range rapid.IntRange(0, 5).Draw(t, "after") {
				step()
				v.reserve(t, cost.Draw(t, "cost"), p.MaxDelay())
			}
			v.law(t)
		})
	})
	t.Run("cancel exact", func(t *testing.T) {
		// Reservations cancelled from the latest back, before their time,
		// each give everything back: afterwards the key answers every
		// request as a twin key that never reserved.
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t, "")
			v := &reserver{e: e, key: e.key(), r: &ref{p: p}}
			twin := e.key()
			c := genCost(t, p)
			e.take(t, twin, p, c)
			v.take(t, c)
			for range rapid.IntRange(1, 4).Draw(t, "reservations") {
				cost := genCost(t, p)
				if r := v.reserve(t, cost, p.MaxDelay()); r.Allowed && r.Delay == 0 {
					e.take(t, twin, p, cost) // a take: the twin takes it too
				}
			}
			for len(v.open) > 0 {
				if !v.cancel(t, len(v.open)-1) {
					t.Fatalf("the latest reservation was not given back")
				}
			}
			for range rapid.IntRange(1, 10).Draw(t, "after") {
				e.clk.Add(genStep(t, p))
				cost := genCost(t, p)
				if a, b := e.take(t, twin, p, cost), e.take(t, v.key, p, cost); a != b {
					t.Fatalf("Take(%d) = %+v on a key that never reserved, %+v on one whose reservations were cancelled", cost, a, b)
				}
			}
		})
	})
	t.Run("concurrent", func(t *testing.T) { testReserveConcurrent(t, e) })
	t.Run("bad input", func(t *testing.T) {
		testOpBadInput(t, e, "Reserve", func(ctx context.Context, key string, p algo.Policy, n int64) error {
			_, err := e.s.Reserve(ctx, store.Request{Key: key, Policy: p, Cost: n}, time.Second)
			return err
		}, true)
		p := algo.PerSecond(1).Burst(5)
		key := e.key()
		e.take(t, key, p, 5)
		if _, _, err := e.s.CancelReservation(context.Background(), key, p, algo.Ticket{At: 1, Units: -1}); !errors.Is(err, algo.ErrInvalidReservation) {
			t.Fatalf("CancelReservation of a forged ticket: %v, want algo.ErrInvalidReservation", err)
		}
		if res := e.take(t, key, p, 0); res.Remaining != 0 || res.ResetAfter != 5*time.Second {
			t.Fatalf("after a forged cancel, %+v: want the bucket still empty", res)
		}
	})
	t.Run("close", func(t *testing.T) { testOpsClose(t, e) }) // last: it closes the store
}

// testReserveConcurrent: goroutines reserve one token each from one key at
// a frozen clock with the longest wait. Exactly capacity are admitted at
// once and capacity more with a delay (the debt is one bucket), at
// distinct times one token's refill apart.
func testReserveConcurrent(t *testing.T, e *env) {
	const goroutines, attempts = 8, 25
	p := algo.PerSecond(10).Burst(50)
	key := e.key()
	var mu sync.Mutex
	var delays []time.Duration
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range attempts {
				r, err := e.s.Reserve(context.Background(), store.Request{Key: key, Policy: p, Cost: 1}, p.MaxDelay())
				if err != nil {
					t.Errorf("Reserve: %v", err)
					return
				}
				if r.Allowed {
					mu.Lock()
					delays = append(delays, r.Delay)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(delays)
	if len(delays) != int(2*p.Capacity()) {
		t.Fatalf("%d reservations admitted at a frozen clock, want %d: capacity at once, capacity in debt", len(delays), 2*p.Capacity())
	}
	for i, d := range delays {
		want := time.Duration(max(0, i+1-int(p.Capacity()))) * 100 * time.Millisecond
		if d != want {
			t.Fatalf("reservation %d of %d waits %v, want %v", i, len(delays), d, want)
		}
	}
}

// testOpsClose: after Close, every operation the store has returns
// store.ErrClosed.
func testOpsClose(t *testing.T, e *env) {
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	p, key, ctx := algo.PerSecond(1).Burst(5), e.key(), context.Background()
	calls := map[string]func() error{}
	calls["Refund"] = func() error { _, err := e.s.Refund(ctx, store.Request{Key: key, Policy: p, Cost: 1}); return err }
	calls["RefundMulti"] = func() error {
		_, err := e.s.RefundMulti(ctx, []store.Request{{Key: key, Policy: p, Cost: 1}})
		return err
	}
	calls["TakeAtMost"] = func() error {
		_, _, err := e.s.TakeAtMost(ctx, store.Request{Key: key, Policy: p, Cost: 1})
		return err
	}
	calls["Reserve"] = func() error {
		_, err := e.s.Reserve(ctx, store.Request{Key: key, Policy: p, Cost: 1}, time.Second)
		return err
	}
	calls["CancelReservation"] = func() error {
		_, _, err := e.s.CancelReservation(ctx, key, p, algo.Ticket{})
		return err
	}
	calls["Hold"] = func() error {
		_, _, err := e.s.Hold(ctx, store.Request{Key: key, Policy: p, Cost: 1}, time.Second)
		return err
	}
	calls["Settle"] = func() error {
		_, err := e.s.Settle(ctx, key, p, algo.Hold{ID: "x", Estimate: 1, Deadline: 1, Policy: p}, 1)
		return err
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want store.ErrClosed", name, err)
		}
	}
}
