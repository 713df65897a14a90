package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/sim"
	"github.com/ratebucket/ratebucket/store"
)

// TestDenyCacheInSimulator runs the simulator's "abuser" scenario (one
// client at 18,000 requests a minute among 50 ordinary web users, burst 100
// at 2 per second) with and without a DenyCache in front of the shared
// store, and requires the same admissions and denials for every class of
// client while the backend calls fall. The abuser's calls are bounded from
// above by all calls less the web users' admissions (each of which needed
// a call), which gives a lower bound on the reduction of the abuser's
// calls: at least 99% with one instance over ten minutes (the admissions
// alone are 0.72% of the abuser's requests; the 1ms ClockMargin adds about
// a third of a call per token). With three instances each has its own
// cache, and each may spend a call per refilled token.
func TestDenyCacheInSimulator(t *testing.T) {
	tests := []struct {
		instances int
		d         time.Duration
		want      float64 // least reduction of the abuser's backend calls
	}{
		{1, 10 * time.Minute, 0.99},
		{3, 2 * time.Minute, 0.97},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d instances", tc.instances), func(t *testing.T) {
			cfg := sim.Config{Scenario: "abuser", Instances: tc.instances, Seed: 1, Duration: tc.d}
			reps, err := sim.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			plain := reps[0]
			cfg.Wrap = func(_ int, clk store.Clock, s store.Store) (store.Store, error) {
				return hybrid.NewDenyCache(s, hybrid.DenyCacheConfig{Clock: clk})
			}
			reps, err = sim.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			cached := reps[0]
			if len(plain.Classes) != len(cached.Classes) {
				t.Fatalf("classes %d and %d", len(plain.Classes), len(cached.Classes))
			}
			var abuser, web sim.Stats
			for i, p := range plain.Classes {
				c := cached.Classes[i]
				if c.Admitted != p.Admitted || c.Denied != p.Denied || c.LegitDenied != p.LegitDenied {
					t.Errorf("class %s: cached %+v, plain %+v", p.Class, c, p)
				}
				if p.Class == "abuser" {
					abuser = p
				} else {
					web.Admitted += p.Admitted
				}
			}
			if abuser.Requests == 0 {
				t.Fatalf("no abuser class in %+v", plain.Classes)
			}
			abuserCalls := cached.BackendCalls - web.Admitted
			reduction := 1 - float64(abuserCalls)/float64(abuser.Requests)
			t.Logf("%d instances, %v: backend calls %d plain, %d cached (%.1f%% fewer); abuser %d requests, %d admitted, at most %d calls: %.2f%% fewer",
				tc.instances, plain.Duration, plain.BackendCalls, cached.BackendCalls,
				100*(1-float64(cached.BackendCalls)/float64(plain.BackendCalls)),
				abuser.Requests, abuser.Admitted, abuserCalls, 100*reduction)
			if reduction < tc.want {
				t.Errorf("abuser's calls fell by %.4f, want at least %.2f", reduction, tc.want)
			}
		})
	}
}
