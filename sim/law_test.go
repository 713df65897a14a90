package sim

import (
	"errors"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// The order of matrix's reports: every algorithm of algorithms, each on
// both topologies, as Run documents.
const (
	tokenShared = iota
	tokenPerInstance
	fixedShared
	fixedPerInstance
	slidingShared
	slidingPerInstance
)

// TestLawHoldsOnSharedStores checks the never-exceed law on every
// multi-instance run with a shared store: the token bucket (and the
// sliding window, which never admits more than the bound either) keep it in
// every scenario, in every interval and in every 1/10/60 s window.
func TestLawHoldsOnSharedStores(t *testing.T) {
	for _, sc := range Scenarios() {
		reps := matrix(t, sc.Name)
		for _, r := range []*Report{reps[tokenShared], reps[slidingShared]} {
			if r.Topology != Shared || r.Instances != 3 {
				t.Fatalf("%s: matrix order changed: %s", sc.Name, r.Title())
			}
			if !r.Law.Holds {
				t.Errorf("%s: law broken on a shared store: %v", r.Title(), r.Law)
			}
			for _, w := range r.Windows {
				if w.Peak > w.Bound {
					t.Errorf("%s: %v window admitted %d > bound %d at %s", r.Title(), w.Width, w.Peak, w.Bound, w.Key)
				}
			}
		}
	}
}

// TestLawFindsViolations: the same checker, run the same way, must find
// the fixed window's boundary spike and the per-instance stores' N× limit.
func TestLawFindsViolations(t *testing.T) {
	tests := []struct {
		name     string
		scenario string
		run      int
		// minRatio is the least admitted/bound the worst interval must
		// show; maxLen bounds its length (0: any).
		minRatio float64
		maxLen   time.Duration
	}{
		{"fixed window boundary spike is 2x in about a second", "boundary-spike", fixedShared, 1.9, 1100 * time.Millisecond},
		{"per-instance token buckets admit 3x the abuser", "abuser", tokenPerInstance, 2.9, 0},
		{"per-instance fixed windows admit 3x the abuser", "abuser", fixedPerInstance, 2.8, 0},
		{"per-instance buckets behind a NAT admit 3x", "campus-nat-ip", tokenPerInstance, 2.9, 0},
		{"per-instance sliding windows let the spike through", "boundary-spike", slidingPerInstance, 1.9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := matrix(t, tt.scenario)[tt.run]
			l := r.Law
			if l.Holds {
				t.Fatalf("%s: law reported as holding: %v", r.Title(), l)
			}
			if got := float64(l.Admitted) / float64(l.Bound); got < tt.minRatio {
				t.Errorf("%s: worst interval %v is %.2f× the bound, want ≥ %.2f×", r.Title(), l, got, tt.minRatio)
			}
			if tt.maxLen > 0 && l.To-l.From > tt.maxLen {
				t.Errorf("%s: worst interval %v lasts %v, want ≤ %v", r.Title(), l, l.To-l.From, tt.maxLen)
			}
		})
	}
	// The abuser gets about three times as much through three
	// per-instance stores as through one shared store.
	reps := matrix(t, "abuser")
	shared, _ := reps[tokenShared].Class("abuser")
	split, _ := reps[tokenPerInstance].Class("abuser")
	if ratio := float64(split.Admitted) / float64(shared.Admitted); ratio < 2.7 || ratio > 3.1 {
		t.Errorf("abuser admitted %d per-instance vs %d shared: %.2f×, want about 3×", split.Admitted, shared.Admitted, ratio)
	}
}

// TestSkewNeedsSlack: with instances' clocks 2 s apart on a shared store,
// the bucket may refill early by rate·2s, and the law holds with that
// slack; the checker reports the slack it used.
func TestSkewNeedsSlack(t *testing.T) {
	r, err := run1(Config{Scenario: "abuser", Instances: 3, Seed: 1, Skew: []time.Duration{-time.Second, 0, time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Law.Slack != 2*time.Second || !r.Law.Holds {
		t.Fatalf("skewed shared run: law %v with slack %v, want holding with slack 2s", r.Law, r.Law.Slack)
	}
}

func adm(pairs ...int64) []admission {
	var a []admission
	for i := 0; i < len(pairs); i += 2 {
		a = append(a, admission{At: time.Duration(pairs[i]) * time.Millisecond, Cost: pairs[i+1]})
	}
	return a
}

func TestCheck(t *testing.T) {
	p := algo.PerSecond(2).Burst(10) // bound 10 + ⌊2·len⌋
	tests := []struct {
		name     string
		adm      []admission
		slack    time.Duration
		holds    bool
		admitted int64
		bound    int64
	}{
		{"empty holds", nil, 0, true, 0, 0},
		{"a full burst at one instant is exactly the bound", adm(0, 10), 0, true, 10, 10},
		{"one over the burst", adm(0, 10, 0, 1), 0, false, 11, 10},
		{"refill of one token per 500ms", adm(0, 10, 500, 1, 500, 1), 0, false, 12, 11},
		{"a microsecond early is one too many", adm(0, 10, 499, 1), 0, false, 11, 10},
		{"slack allows the early token", adm(0, 10, 499, 1), time.Millisecond, true, 11, 11},
		{"unsorted input is sorted", adm(499, 1, 0, 10), 0, false, 11, 10},
		{"worst interval inside a long run", adm(0, 1, 10_000, 10, 10_100, 5), 0, false, 15, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := checkLaw(p, tt.adm, tt.slack)
			if err != nil {
				t.Fatal(err)
			}
			if l.Holds != tt.holds || l.Admitted != tt.admitted || (tt.adm != nil && l.Bound != tt.bound) {
				t.Errorf("Check = %v (holds %v), want holds %v, %d admitted, bound %d", l, l.Holds, tt.holds, tt.admitted, tt.bound)
			}
		})
	}
	if _, err := checkLaw(algo.Policy{}, adm(0, 1), 0); !errors.Is(err, algo.ErrInvalidPolicy) {
		t.Errorf("checkLaw(zero policy) error = %v, want ErrInvalidPolicy", err)
	}
	if _, err := checkLaw(p, adm(0, 1), -time.Second); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("checkLaw(negative slack) error = %v, want ErrInvalidConfig", err)
	}
}

// genAdmissions draws a small sorted run of admissions.
func genAdmissions(t *rapid.T) []admission {
	n := rapid.IntRange(0, 40).Draw(t, "n")
	a := make([]admission, n)
	for i := range a {
		a[i] = admission{At: time.Duration(rapid.Int64Range(0, 5_000_000).Draw(t, "at")) * time.Microsecond,
			Cost: rapid.Int64Range(1, 5).Draw(t, "cost")}
	}
	slices.SortFunc(a, byAt)
	return a
}

// TestCheckMatchesBruteForce compares the linear scan with trying every
// interval.
func TestCheckMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := algo.Per(rapid.Int64Range(1, 7).Draw(t, "tokens"), time.Duration(rapid.Int64Range(1, 3_000_000).Draw(t, "period"))*time.Microsecond).
			Burst(rapid.Int64Range(1, 20).Draw(t, "capacity"))
		a := genAdmissions(t)
		slack := time.Duration(rapid.Int64Range(0, 1_000_000).Draw(t, "slack")) * time.Microsecond
		l, err := checkLaw(p, a, slack)
		if err != nil {
			t.Fatal(err)
		}
		holds := true
		for i := range a {
			var sum int64
			for j := i; j < len(a); j++ {
				sum += a[j].Cost
				if sum > p.Bound(a[j].At-a[i].At+slack) {
					holds = false
				}
			}
		}
		if l.Holds != holds {
			t.Fatalf("Check says holds=%v (%v), brute force says %v", l.Holds, l, holds)
		}
		if len(a) > 0 && l.Bound != p.Bound(l.To-l.From+slack) {
			t.Fatalf("reported bound %d for [%v, %v], want %d", l.Bound, l.From, l.To, p.Bound(l.To-l.From+slack))
		}
	})
}

// TestPeakMatchesBruteForce compares the sliding maximum with summing
// every window that starts at an admission.
func TestPeakMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genAdmissions(t)
		w := time.Duration(rapid.Int64Range(0, 2_000_000).Draw(t, "w")) * time.Microsecond
		got, from := peakIn(a, w)
		var want int64
		for _, s := range a {
			var sum int64
			for _, e := range a {
				if e.At >= s.At && e.At <= s.At+w {
					sum += e.Cost
				}
			}
			want = max(want, sum)
		}
		if got != want {
			t.Fatalf("peakIn(w=%v) = %d from %v, brute force %d", w, got, from, want)
		}
	})
}
