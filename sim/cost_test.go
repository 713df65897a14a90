package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// TestCostOverride: Config.Cost makes every request of a named scenario
// cost that many tokens, and the admitted counts are those of a hand
// computation. Each sensor reads every 5 s (12 readings in a minute) on
// its own key, limited to a bucket of 3 refilled at 1 per 10 s, so 0.5
// token comes back between two readings:
//
//	cost 1: 3→2→1.5→0.5→… five admitted, then one in two: 5 + 3 = 8
//	cost 2: 3→1, 1.5→0, then one in four (readings 6 and 10): 4
func TestCostOverride(t *testing.T) {
	p := algo.Per(1, 10*time.Second).Burst(3)
	for _, tt := range []struct {
		cost, admitted int64
	}{{0, 8}, {1, 8}, {2, 4}} {
		rep, err := run1(Config{Scenario: "sensor", Policy: p, Duration: time.Minute, Cost: tt.cost})
		if err != nil {
			t.Fatalf("cost %d: %v", tt.cost, err)
		}
		tl := rep.Timeline
		if len(tl.Requests) != 12 || tl.Admitted != tt.admitted {
			t.Errorf("cost %d: %d requests, %d admitted at %s; want 12, %d", tt.cost, len(tl.Requests), tl.Admitted, tl.Key, tt.admitted)
		}
		want := max(tt.cost, 1)
		for _, q := range tl.Requests {
			if q.Cost != want {
				t.Fatalf("cost %d: request at %v cost %d", tt.cost, q.At, q.Cost)
			}
		}
		sensors := int64(rep.Total.Clients)
		if rep.Total.Admitted != sensors*tt.admitted || rep.Total.AdmittedCost != sensors*tt.admitted*want {
			t.Errorf("cost %d: all sensors admitted %d (cost %d), want %d (cost %d)", tt.cost,
				rep.Total.Admitted, rep.Total.AdmittedCost, sensors*tt.admitted, sensors*tt.admitted*want)
		}
		if rep.Cost != tt.cost {
			t.Errorf("cost %d: Report.Cost = %d", tt.cost, rep.Cost)
		}
	}
	// The boundary spike's attacker fires a full limit either side of the
	// boundary: at cost 2, 50 requests, 198 tokens through in a second.
	rep, err := run1(Config{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Instances: 3, Seed: 1,
		Duration: 3 * time.Minute, Cost: 2})
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Timeline.Law; l.Holds || l.Admitted != 198 {
		t.Errorf("boundary spike at cost 2: law %v, want 198 admitted", l)
	}
	for _, tt := range []struct {
		cost int64
		want error
	}{{-1, ErrInvalidConfig}, {4, algo.ErrCostExceedsCapacity}} {
		if rep, err := run1(Config{Scenario: "sensor", Policy: p, Cost: tt.cost}); !errors.Is(err, tt.want) || rep != nil {
			t.Errorf("cost %d: Run = %v, %v; want an error matching %v", tt.cost, rep, err, tt.want)
		}
	}
}

// TestLevelWindowStart: with a store per instance and skewed clocks, each
// Level's WindowStart is where its own store's windows begin on the run's
// time, the fixed window's room comes back only there, and a chart draws
// those boundaries.
func TestLevelWindowStart(t *testing.T) {
	skew := []time.Duration{0, 400 * time.Millisecond, -time.Second}
	rep, err := run1(Config{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Topologies: []Topology{PerInstance},
		Instances: 3, Skew: skew, Seed: 1, Duration: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tl := rep.Timeline
	if tl.Window != time.Minute || len(tl.Levels) == 0 {
		t.Fatalf("window %v, %d levels", tl.Window, len(tl.Levels))
	}
	mod := func(d time.Duration) time.Duration { return (d%tl.Window + tl.Window) % tl.Window }
	resets := 0
	for _, lv := range tl.Levels {
		if lv.Skew != skew[lv.Instance] {
			t.Errorf("instance %d: skew %v, want %v", lv.Instance, lv.Skew, skew[lv.Instance])
		}
		if want := mod(tl.WindowStart - lv.Skew); lv.WindowStart != want {
			t.Errorf("instance %d: window start %v, want %v", lv.Instance, lv.WindowStart, want)
		}
		for k := 1; k < len(lv.Points); k++ {
			if a, b := lv.Points[k-1], lv.Points[k]; b.Tokens > a.Tokens {
				resets++
				if mod(b.At-lv.WindowStart) != 0 {
					t.Errorf("instance %d: room back up at %v, not on a boundary (start %v)", lv.Instance, b.At, lv.WindowStart)
				}
			}
		}
	}
	if resets == 0 {
		t.Error("no window reset seen")
	}
	// WriteSVG draws every instance's boundaries: three sets where an
	// unskewed run has one.
	if starts := tl.windowStarts(); len(starts) != 3 {
		t.Errorf("the chart draws windows from %v, want the 3 instances' starts", starts)
	}
	unskewed, err := run1(Config{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Topologies: []Topology{PerInstance},
		Instances: 3, Seed: 1, Duration: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if starts := unskewed.Timeline.windowStarts(); len(starts) != 1 || starts[0] != unskewed.Timeline.WindowStart {
		t.Errorf("unskewed, the chart draws windows from %v, want %v only", starts, unskewed.Timeline.WindowStart)
	}
}
