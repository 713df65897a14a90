package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// hold is one hold a Settle check made: the store's and the reference's
// (the same but for the ID), and whether the store still has it open.
type hold struct {
	got, want algo.Hold
	open      bool
}

// holder checks holds and settlements on one key against the reference.
type holder struct {
	e     *env
	key   string
	r     *ref
	holds []hold
}

// hold holds cost tokens for ttl on both and compares the answers.
func (v *holder) hold(t *rapid.T, cost int64, ttl time.Duration) {
	var want algo.Hold
	var wres algo.Result
	v.r.apply(t, "Hold", func(s algo.State, at int64) (next algo.State, err error) {
		next, want, wres, err = algo.TokenBucket{}.Hold(v.r.p, s, at, cost, ttl.Microseconds())
		return next, err
	}, v.e.clk.Now())
	got, res, err := v.e.s.Hold(context.Background(), store.Request{Key: v.key, Policy: v.r.p, Cost: cost}, ttl)
	if err != nil {
		t.Fatalf("Hold(%q, %v, %d, %v): %v", v.key, v.r.p, cost, ttl, err)
	}
	anon := got
	anon.ID = ""
	v.e.same(t, fmt.Sprintf("Hold(%d, %v)", cost, ttl), v.key, []any{anon, res}, []any{want, wres})
	if res.Allowed {
		if got.ID == "" {
			t.Fatalf("Hold(%d) admitted with no ID", cost)
		}
		v.holds = append(v.holds, hold{got: got, want: want, open: true})
	}
}

// settle settles hold i at actual on both; a hold the store has settled
// must be refused with algo.ErrHoldSettled, and any refusal must change
// nothing (the next peek compares the bucket with the reference's).
func (v *holder) settle(t *rapid.T, i int, actual int64) {
	h := &v.holds[i]
	var want algo.Settlement
	next, want, werr := algo.TokenBucket{}.Settle(v.r.p, v.r.s, v.e.clk.Now().UnixMicro(), h.want, actual)
	if werr == nil && !h.open {
		next, want, werr = v.r.s, algo.Settlement{}, algo.ErrHoldSettled
	}
	got, err := v.e.s.Settle(context.Background(), v.key, v.r.p, h.got, actual)
	op := fmt.Sprintf("Settle(hold %d of %d, %d)", i, h.want.Estimate, actual)
	if !errors.Is(err, werr) || werr == nil && err != nil {
		t.Fatalf("%s on %q = %+v, %v; algo says %v", op, v.key, got, err, werr)
	}
	if werr == nil {
		v.e.same(t, op, v.key, got, want)
	}
	v.r.s = next
	if werr == nil || errors.Is(werr, algo.ErrHoldExpired) {
		h.open = false
	}
	v.e.check(t, v.key, v.r, 0)
}

// bad makes one bad settle of the open hold i: its error must match, and
// nothing be charged or given back.
func (v *holder) bad(t *rapid.T, i int) {
	h := v.holds[i]
	other := algo.Per(v.r.p.Rate().Tokens+1, v.r.p.Rate().Period).Burst(v.r.p.Capacity())
	forged := h.got
	forged.Estimate = min(forged.Estimate+1, v.r.p.Capacity())
	if forged.Estimate == h.got.Estimate {
		forged.Estimate--
	}
	unknown := h.got
	unknown.ID = store.NewLeaseID()
	cases := []struct {
		name   string
		p      algo.Policy
		h      algo.Hold
		actual int64
		want   error
	}{
		{"negative actual", v.r.p, h.got, -1, algo.ErrInvalidCost},
		{"overflowing actual", v.r.p, h.got, algo.MaxCapacity + 1, algo.ErrInvalidCost},
		{"another policy", other, h.got, 1, algo.ErrHoldPolicy},
		{"forged estimate", v.r.p, forged, 1, algo.ErrInvalidHold},
		{"unknown id", v.r.p, unknown, 1, algo.ErrHoldSettled},
		{"zero hold", v.r.p, algo.Hold{}, 1, algo.ErrInvalidHold},
	}
	c := rapid.SampledFrom(cases).Draw(t, "bad")
	if max(v.e.clk.Now().UnixMicro(), v.r.s.Stamp) > h.want.Deadline && (c.want == algo.ErrInvalidHold && c.h.ID != "" || c.want == algo.ErrHoldSettled) {
		c.want = algo.ErrHoldExpired // past the deadline, whatever the record says
	}
	if _, err := v.e.s.Settle(context.Background(), v.key, c.p, c.h, c.actual); !errors.Is(err, c.want) {
		t.Fatalf("Settle with %s = %v, want an error matching %v", c.name, err, c.want)
	} else if !store.IsInputError(err) {
		t.Fatalf("Settle with %s = %v: not an input error", c.name, err)
	}
	v.e.check(t, v.key, v.r, 0)
}

// testSettle checks Hold and Settle.
func testSettle(t *testing.T, e *env) {
	_, _, err := e.s.Hold(context.Background(), store.Request{Key: e.key(), Policy: algo.PerSecond(1).Burst(1)}, time.Second)
	mustSupport(t, "Hold", err)
	t.Run("reference", func(t *testing.T) {
		// Takes, holds, settles (early, late, twice) and bad settles on
		// one key match algo's, and no refused settle charges or gives back
		// a token: the differential property, and the bad-input one.
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t, "")
			v := &holder{e: e, key: e.key(), r: &ref{p: p}}
			ttl := rapid.SampledFrom([]time.Duration{time.Microsecond, 3 * time.Second, min(p.FillTime(), algo.MaxHoldTTL), algo.MaxHoldTTL})
			for range rapid.IntRange(1, 30).Draw(t, "ops") {
				e.clk.Add(genStep(t, p))
				switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
				case op == 0 || len(v.holds) == 0 && op > 1:
					v.hold(t, genCost(t, p), ttl.Draw(t, "ttl"))
				case op == 1:
					e.check(t, v.key, v.r, genCost(t, p))
				case op == 2:
					actual := rapid.OneOf(genCostGen(p), rapid.Int64Range(0, 3*p.Capacity())).Draw(t, "actual")
					v.settle(t, rapid.IntRange(0, len(v.holds)-1).Draw(t, "hold"), actual)
				default:
					var open []int
					for i, h := range v.holds {
						if h.open {
							open = append(open, i)
						}
					}
					if len(open) == 0 {
						v.hold(t, genCost(t, p), ttl.Draw(t, "ttl"))
						continue
					}
					v.bad(t, rapid.SampledFrom(open).Draw(t, "hold"))
				}
			}
		})
	})
	t.Run("expired", func(t *testing.T) {
		// A hold left open settles at its estimate: past its deadline
		// Settle is algo.ErrHoldExpired and the estimate stays charged.
		p, key := algo.PerHour(1).Burst(10), e.key()
		h, res, err := e.s.Hold(context.Background(), store.Request{Key: key, Policy: p, Cost: 4}, time.Second)
		if err != nil || !res.Allowed {
			t.Fatalf("Hold(4) = %+v, %+v, %v", h, res, err)
		}
		e.clk.Add(time.Second + time.Microsecond)
		if _, err := e.s.Settle(context.Background(), key, p, h, 0); !errors.Is(err, algo.ErrHoldExpired) {
			t.Fatalf("Settle past the deadline: %v, want algo.ErrHoldExpired", err)
		}
		if got := e.take(t, key, p, 0); got.Remaining != 6 {
			t.Fatalf("after the expired hold the bucket holds %d, want 6", got.Remaining)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		testOpBadInput(t, e, "Hold", func(ctx context.Context, key string, p algo.Policy, n int64) error {
			_, _, err := e.s.Hold(ctx, store.Request{Key: key, Policy: p, Cost: n}, time.Second)
			return err
		}, true)
		p := algo.PerSecond(1).Burst(5)
		for _, ttl := range []time.Duration{0, -time.Second, algo.MaxHoldTTL + time.Microsecond, time.Nanosecond} {
			key := e.key()
			if _, _, err := e.s.Hold(context.Background(), store.Request{Key: key, Policy: p, Cost: 1}, ttl); !errors.Is(err, algo.ErrInvalidHold) {
				t.Errorf("Hold with ttl %v: %v, want algo.ErrInvalidHold", ttl, err)
			}
			e.full(t, key, p)
		}
		q := algo.Quota(5, algo.Day, 0)
		if _, _, err := e.s.Hold(context.Background(), store.Request{Key: e.key(), Policy: q, Cost: 1}, time.Second); !errors.Is(err, algo.ErrQuotaUnsupported) {
			t.Errorf("Hold of a quota: %v, want algo.ErrQuotaUnsupported", err)
		}
	})
	t.Run("close", func(t *testing.T) { testOpsClose(t, e) }) // last: it closes the store
}
