package algo_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// Both window tests use 10 per second with a burst of 10: W = 1s.
var tenPerSecond = algo.PerSecond(10).Burst(10)

func TestFixedWindow(t *testing.T) {
	ms := time.Millisecond
	s := runSteps(t, algo.FixedWindow{}, tenPerSecond, []step{
		{"t0+500ms", t0 + 500*ms.Microseconds(), 4, true, 6, 0, 500 * ms},
		{"t0+500ms", t0 + 500*ms.Microseconds(), 6, true, 0, 0, 500 * ms},
		{"t0+500ms", t0 + 500*ms.Microseconds(), 1, false, 0, 500 * ms, 500 * ms},
		{"t0+999.999ms", t0 + s1 - 1, 1, false, 0, time.Microsecond, time.Microsecond},
		{"t0+1s: the spike", t0 + s1, 10, true, 0, 0, time.Second},
		{"t0+999ms, clock behind", t0 + s1 - 1000, 1, false, 0, 1001 * ms, 1001 * ms},
		{"t0+1.5s", t0 + 1500*ms.Microseconds(), 0, true, 0, 0, 500 * ms},
		{"t0+5.25s, idle", t0 + 5250*ms.Microseconds(), 0, true, 10, 0, 0},
		{"t0+5.25s", t0 + 5250*ms.Microseconds(), 10, true, 0, 0, 750 * ms},
	})
	if want := (algo.State{Level: 10, Stamp: t0 + 5*s1}); s != want {
		t.Errorf("state = %+v want %+v (stamp aligned to the window)", s, want)
	}
}

// TestSlidingWindow walks the estimate prev·(W−e)/W + curr across two
// boundaries, with exact retry times.
func TestSlidingWindow(t *testing.T) {
	ms := time.Millisecond.Microseconds()
	s := runSteps(t, algo.SlidingWindow{}, tenPerSecond, []step{
		{"t0+500ms", t0 + 500*ms, 10, true, 0, 0, 1500 * time.Millisecond},
		{"t0+999.999ms", t0 + s1 - 1, 1, false, 0, 100*time.Millisecond + time.Microsecond, 1000*time.Millisecond + time.Microsecond},
		// The next window: prev = 10 weighs 10·(W−e)/W; one fits at e = 100ms.
		{"t0+1s", t0 + s1, 1, false, 0, 100 * time.Millisecond, time.Second},
		{"t0+1.099999s", t0 + 1100*ms - 1, 1, false, 0, time.Microsecond, 900*time.Millisecond + time.Microsecond},
		{"t0+1.1s", t0 + 1100*ms, 1, true, 0, 0, 1900 * time.Millisecond},
		{"t0+1.5s", t0 + 1500*ms, 0, true, 4, 0, 1500 * time.Millisecond}, // 10·0.5 + 1 = 6 used
		{"t0+1.5s", t0 + 1500*ms, 4, true, 0, 0, 1500 * time.Millisecond},
		// curr = 5 + prev's share: nothing more this window; next window
		// prev = 5, so cost 6 fits once 5·(W−e)/W ≤ 4, at e = 200ms.
		{"t0+1.9s", t0 + 1900*ms, 6, false, 4, 300 * time.Millisecond, 1100 * time.Millisecond},
		{"t0+2.199999s", t0 + 2200*ms - 1, 6, false, 5, time.Microsecond, 800*time.Millisecond + time.Microsecond},
		{"t0+2.2s", t0 + 2200*ms, 6, true, 0, 0, 1800 * time.Millisecond},
		{"t0+9s, idle", t0 + 9*s1, 0, true, 10, 0, 0},
	})
	if want := (algo.State{Level: 0, Prev: 0, Stamp: t0 + 9*s1}); s != want {
		t.Errorf("state = %+v want %+v", s, want)
	}
}

// TestSlidingWindowClockBehind: a clock behind the stored window is
// evaluated at the window's start, where prev weighs most, and does not
// move the stamp back.
func TestSlidingWindowClockBehind(t *testing.T) {
	ms := time.Millisecond.Microseconds()
	runSteps(t, algo.SlidingWindow{}, tenPerSecond, []step{
		{"t0+900ms", t0 + 900*ms, 10, true, 0, 0, 1100 * time.Millisecond},
		{"t0+1.5s", t0 + 1500*ms, 5, true, 0, 0, 1500 * time.Millisecond},
		// 1.5s behind the window start t0+1s: e = 0, prev weighs 10.
		{"t0 (behind)", t0, 0, true, 0, 0, 3 * time.Second},
		// 5 + 10·(W−e)/W + 1 ≤ 10 from e = 600ms on.
		{"t0+500ms (behind)", t0 + 500*ms, 1, false, 0, 1100 * time.Millisecond, 2500 * time.Millisecond},
		{"t0+1s", t0 + s1, 1, false, 0, 600 * time.Millisecond, 2 * time.Second},
		{"t0+1.6s", t0 + 1600*ms, 1, true, 0, 0, 1400 * time.Millisecond},
	})
}

// TestWindowCountAboveLimit: stored counts above the limit (the policy
// shrank) read as a full window, not as credit.
func TestWindowCountAboveLimit(t *testing.T) {
	for _, a := range []algo.Algorithm{algo.FixedWindow{}, algo.SlidingWindow{}} {
		s := algo.State{Level: 1000, Prev: 1000, Stamp: t0}
		next, res, err := a.Take(tenPerSecond, s, t0, 1)
		if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 {
			t.Errorf("%s: Take = %+v, %v: want denied", a.Name(), res, err)
		}
		if next.Level != 10 || next.Prev > 10 {
			t.Errorf("%s: state %+v: want counts clamped to 10", a.Name(), next)
		}
	}
}

// TestSlidingWindowAgainstBigRat checks SlidingWindow's decision and
// remaining count against the estimate computed in exact rationals, at the
// sizes where prev·(W−e) overflows 64 bits.
func TestSlidingWindowAgainstBigRat(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		w, c := window(p), p.Capacity()
		s := algo.State{
			Stamp: rapid.Int64Range(0, maxT/w).Draw(t, "window") * w,
			Level: rapid.Int64Range(0, c).Draw(t, "curr"),
			Prev:  rapid.Int64Range(0, c).Draw(t, "prev"),
		}
		e := rapid.Int64Range(0, w-1).Draw(t, "elapsed")
		cost := rapid.Int64Range(0, c).Draw(t, "cost")
		_, res := take(t, algo.SlidingWindow{}, p, s, s.Stamp+e, cost)

		// estimate = prev·(W−e)/W + curr; admitted iff estimate + cost ≤ c.
		est := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(s.Prev), big.NewInt(w-e)), big.NewInt(w))
		est.Add(est, new(big.Rat).SetInt64(s.Level))
		left := new(big.Rat).Sub(new(big.Rat).SetInt64(c), est) // tokens left before this request
		allowed := cost == 0 || left.Cmp(new(big.Rat).SetInt64(cost)) >= 0
		if allowed {
			left.Sub(left, new(big.Rat).SetInt64(cost))
		}
		remaining := new(big.Int).Quo(left.Num(), left.Denom()) // truncates; floor for left ≥ 0
		if left.Sign() < 0 {
			remaining.SetInt64(0)
		}
		if res.Allowed != allowed || res.Remaining != remaining.Int64() {
			t.Fatalf("%v, state %+v at e=%d, cost %d: %+v; exact estimate %v says allowed %v, remaining %v",
				p, s, e, cost, res, est.FloatString(6), allowed, remaining)
		}
	})
}
