package algo_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// Named instants, in µs since the epoch, in the style of x/time/rate's
// rate_test.go.
const (
	t0 = int64(1_700_000_000_000_000) // 2023-11-14, a second boundary
	ms = int64(1000)
	s1 = int64(1_000_000)
)

// step is one Take of a table test and what it must answer. retry and
// reset are checked exactly; remaining too.
type step struct {
	name      string // the instant, for the failure message
	at, cost  int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// runSteps applies steps in order to a fresh state and returns the final
// state.
func runSteps(t *testing.T, a algo.Algorithm, p algo.Policy, steps []step) algo.State {
	t.Helper()
	var s algo.State
	for i, st := range steps {
		next, res, err := a.Take(p, s, st.at, st.cost)
		if err != nil {
			t.Fatalf("step %d (%s): %s.Take(%d, %d): %v", i, st.name, a.Name(), st.at, st.cost, err)
		}
		want := algo.Result{Allowed: st.allowed, Remaining: st.remaining, RetryAfter: st.retry, ResetAfter: st.reset}
		if res != want {
			t.Errorf("step %d (%s): %s.Take(%d, %d) = %+v want %+v", i, st.name, a.Name(), st.at, st.cost, res, want)
		}
		if next.Stamp < s.Stamp {
			t.Errorf("step %d (%s): stamp went back from %d to %d", i, st.name, s.Stamp, next.Stamp)
		}
		s = next
	}
	return s
}

func TestTokenBucketBurstThenRate(t *testing.T) {
	p := algo.PerSecond(2).Burst(3) // a token every 500ms
	runSteps(t, algo.TokenBucket{}, p, []step{
		{"t0", t0, 1, true, 2, 0, 500 * time.Millisecond},
		{"t0", t0, 2, true, 0, 0, 1500 * time.Millisecond},
		{"t0", t0, 1, false, 0, 500 * time.Millisecond, 1500 * time.Millisecond},
		{"t0", t0, 0, true, 0, 0, 1500 * time.Millisecond}, // peek
		{"t0+499.999ms", t0 + 500*ms - 1, 1, false, 0, time.Microsecond, 1000*time.Millisecond + time.Microsecond},
		{"t0+500ms", t0 + 500*ms, 1, true, 0, 0, 1500 * time.Millisecond},
		{"t0+500ms", t0 + 500*ms, 3, false, 0, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"t0+10s", t0 + 10*s1, 0, true, 3, 0, 0}, // idle: full, nothing to wait for
		{"t0+10s", t0 + 10*s1, 3, true, 0, 0, 1500 * time.Millisecond},
	})
}

// TestTokenBucketThirds pins golang/go#34861 (rounding converting durations
// to tokens): at 3 per second a token takes 333333.33µs, so a drained bucket
// has its 1st token at exactly 333334µs, its 2nd at 666667µs and its 3rd at
// 1000000µs, for a client retrying at each RetryAfter: no fraction is lost.
func TestTokenBucketThirds(t *testing.T) {
	p := algo.PerSecond(3).Burst(3)
	runSteps(t, algo.TokenBucket{}, p, []step{
		{"t0", t0, 3, true, 0, 0, time.Second},
		{"t0+333333µs", t0 + 333333, 1, false, 0, time.Microsecond, 666667 * time.Microsecond},
		{"t0+333334µs", t0 + 333334, 1, true, 0, 0, time.Second},
		{"t0+666666µs", t0 + 666666, 1, false, 0, time.Microsecond, 666668 * time.Microsecond},
		{"t0+666667µs", t0 + 666667, 1, true, 0, 0, time.Second},
		{"t0+999999µs", t0 + 999999, 1, false, 0, time.Microsecond, 666668 * time.Microsecond},
		{"t0+1s", t0 + s1, 1, true, 0, 0, time.Second},
		{"t0+1s", t0 + s1, 1, false, 0, 333334 * time.Microsecond, time.Second},
	})
	if got, want := p.Unit(), int64(1_000_000); got != want {
		t.Errorf("PerSecond(3).Unit() = %d want %d", got, want)
	}
	if got, want := p.Refill(), int64(3); got != want {
		t.Errorf("PerSecond(3).Refill() = %d want %d", got, want)
	}
}

// TestTokenBucketClockBackwards: a caller whose clock is behind the stored
// stamp is evaluated at the stamp. It mints nothing, the stamp does not move
// back, and its waits count from its own clock.
func TestTokenBucketClockBackwards(t *testing.T) {
	p := algo.PerSecond(1).Burst(2)
	s := runSteps(t, algo.TokenBucket{}, p, []step{
		{"t0+10s", t0 + 10*s1, 2, true, 0, 0, 2 * time.Second},
		{"t0+9s (1s behind)", t0 + 9*s1, 1, false, 0, 2 * time.Second, 3 * time.Second},
		{"t0 (10s behind)", t0, 0, true, 0, 0, 12 * time.Second},
		{"t0+10.5s", t0 + 10*s1 + 500*ms, 1, false, 0, 500 * time.Millisecond, 1500 * time.Millisecond},
		{"t0+11s", t0 + 11*s1, 1, true, 0, 0, 2 * time.Second},
		{"t0+5s, bucket full later", t0 + 5*s1, 0, true, 0, 0, 8 * time.Second},
	})
	if s.Stamp != t0+11*s1 {
		t.Errorf("stamp = %d want %d", s.Stamp, t0+11*s1)
	}
	// A full bucket has nothing to wait for, however far behind the clock.
	full, res, err := algo.TokenBucket{}.Take(p, algo.State{Stamp: t0}, 0, 0)
	if err != nil || res.ResetAfter != 0 || res.Remaining != 2 || full.Stamp != t0 {
		t.Errorf("full bucket read from time 0: %+v, %+v, %v", full, res, err)
	}
}

// TestFarBehindSaturates: a clock at 0 against a stamp at MaxTime must not
// overflow a Duration.
func TestFarBehindSaturates(t *testing.T) {
	p := algo.PerDay(1).Burst(52124) // fills in 142 years
	for _, a := range algorithms {
		t.Run(a.Name(), func(t *testing.T) {
			s, _, err := a.Take(p, algo.State{}, algo.MaxTime, p.Capacity())
			if err != nil {
				t.Fatal(err)
			}
			_, res, err := a.Take(p, s, 0, 1)
			if err != nil || res.Allowed || res.RetryAfter <= 0 || res.ResetAfter <= 0 {
				t.Fatalf("Take(%+v, 0, 1) = %+v, %v: want a denial with positive waits", s, res, err)
			}
			if max := time.Duration(math.MaxInt64/1000) * time.Microsecond; res.ResetAfter != max {
				t.Errorf("ResetAfter = %v want the saturated %v", res.ResetAfter, max)
			}
		})
	}
}

// TestTokenBucketLevelAboveFull: a stored deficit above full is debt (a
// reservation's), read as at most one full bucket of debt: a deficit far
// above that (the policy shrank, or a foreign writer) is not credit, and
// not an endless denial either.
func TestTokenBucketLevelAboveFull(t *testing.T) {
	p := algo.PerSecond(1).Burst(2)
	big := algo.State{Level: 10 * 2 * p.Unit(), Stamp: t0}
	s, res, err := algo.TokenBucket{}.Take(p, big, t0, 1)
	if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter != 3*time.Second || res.ResetAfter != 4*time.Second {
		t.Fatalf("Take = %+v, %v: want denied, 0 remaining, retry 3s, reset 4s", res, err)
	}
	if s.Level != 4*p.Unit() {
		t.Errorf("level = %d want it clamped to full plus one bucket of debt %d", s.Level, 4*p.Unit())
	}
	if _, res, _ := (algo.TokenBucket{}).Take(p, big, t0, 0); !res.Allowed || res.RetryAfter != 0 {
		t.Errorf("peek in debt = %+v, want allowed", res)
	}
	if idle := (algo.TokenBucket{}).IdleAt(p, big); idle != t0+4e6 {
		t.Errorf("IdleAt = %d, want %d: two fill times, the debt's and the bucket's", idle, t0+4e6)
	}
}

// TestTakeErrors checks every error path of every algorithm: the error
// wraps the sentinel, the state comes back unchanged, and the result is the
// zero Result: never an open limiter (golang/go#71154, #18763) and never a
// remaining above the limit (throttled#81).
func TestTakeErrors(t *testing.T) {
	p := algo.PerSecond(10).Burst(5)
	ok := algo.State{Level: 1, Stamp: t0}
	tests := []struct {
		name string
		p    algo.Policy
		s    algo.State
		now  int64
		cost int64
		want error
	}{
		{"zero policy", algo.Policy{}, ok, t0, 1, algo.ErrInvalidPolicy},
		{"zero rate, jams open in x/time/rate", algo.PerSecond(0).Burst(5), ok, t0, 1, algo.ErrInvalidPolicy},
		{"zero burst", algo.PerSecond(10).Burst(0), ok, t0, 1, algo.ErrInvalidPolicy},
		{"sub-µs period", algo.Per(1, 10*time.Nanosecond).Burst(5), ok, t0, 1, algo.ErrInvalidPolicy},
		{"negative cost", p, ok, t0, -1, algo.ErrInvalidCost},
		{"cost above burst", p, ok, t0, 6, algo.ErrCostExceedsCapacity},
		{"cost far above burst", p, ok, t0, math.MaxInt64, algo.ErrCostExceedsCapacity},
		{"time before epoch", p, ok, -1, 1, algo.ErrInvalidTime},
		{"time after MaxTime", p, ok, algo.MaxTime + 1, 1, algo.ErrInvalidTime},
		{"negative level", p, algo.State{Level: -1, Stamp: t0}, t0, 1, algo.ErrInvalidState},
		{"negative stamp", p, algo.State{Stamp: -1}, t0, 1, algo.ErrInvalidState},
		{"stamp after MaxTime", p, algo.State{Stamp: algo.MaxTime + 1}, t0, 1, algo.ErrInvalidState},
		{"negative prev", p, algo.State{Prev: -1, Stamp: t0}, t0, 1, algo.ErrInvalidState},
	}
	for _, a := range algorithms {
		for _, tt := range tests {
			t.Run(a.Name()+"/"+tt.name, func(t *testing.T) {
				s, res, err := a.Take(tt.p, tt.s, tt.now, tt.cost)
				if !errors.Is(err, tt.want) {
					t.Errorf("err = %v want %v", err, tt.want)
				}
				if s != tt.s || res != (algo.Result{}) {
					t.Errorf("Take = %+v, %+v: want the state unchanged and a zero Result", s, res)
				}
			})
		}
	}
}

// TestTimeEdges: times 0 and MaxTime are accepted.
func TestTimeEdges(t *testing.T) {
	p := algo.PerSecond(1).Burst(1)
	for _, a := range algorithms {
		for _, now := range []int64{0, algo.MaxTime} {
			if _, res, err := a.Take(p, algo.State{}, now, 1); err != nil || !res.Allowed {
				t.Errorf("%s.Take(zero, %d, 1) = %+v, %v: want admitted", a.Name(), now, res, err)
			}
		}
	}
}

func TestNames(t *testing.T) {
	for a, want := range map[algo.Algorithm]string{
		algo.TokenBucket{}: "tokenbucket", algo.FixedWindow{}: "fixedwindow", algo.SlidingWindow{}: "slidingwindow",
	} {
		if got := a.Name(); got != want {
			t.Errorf("Name() = %q want %q", got, want)
		}
	}
}

// TestExtremeRatesLimit: the slowest and fastest valid rates still limit,
// with exact waits; neither jams open nor shut.
func TestExtremeRatesLimit(t *testing.T) {
	year := algo.MaxPeriod
	runSteps(t, algo.TokenBucket{}, algo.Per(1, year).Burst(1), []step{
		{"t0", t0, 1, true, 0, 0, year},
		{"t0", t0, 1, false, 0, year, year},
		{"t0+366d-1µs", t0 + year.Microseconds() - 1, 1, false, 0, time.Microsecond, time.Microsecond},
		{"t0+366d", t0 + year.Microseconds(), 1, true, 0, 0, year},
	})
	// 1e9 per second: 1000 tokens per µs.
	runSteps(t, algo.TokenBucket{}, algo.PerSecond(algo.MaxPerSecond).Burst(1500), []step{
		{"t0", t0, 1500, true, 0, 0, 2 * time.Microsecond},
		{"t0", t0, 1, false, 0, time.Microsecond, 2 * time.Microsecond},
		{"t0+1µs", t0 + 1, 1000, true, 0, 0, 2 * time.Microsecond},
		{"t0+1µs", t0 + 1, 1, false, 0, time.Microsecond, 2 * time.Microsecond},
		{"t0+3µs", t0 + 3, 1500, true, 0, 0, 2 * time.Microsecond},
	})
}
