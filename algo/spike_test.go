package algo_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// TestPropFixedWindowSpike shows the boundary spike: rapid finds traffic
// that makes FixedWindow admit at least 1.9× its limit inside an interval
// shorter than a tenth of its window, and the same traffic gets much less
// from SlidingWindow and TokenBucket.
//
// rapid has no way to expect a property to fail, and running rapid.Check on
// a stand-in testing.TB would write fail files and spend up to 30 s
// shrinking. So rapid is used as the attacker: it draws the policy, the
// attacker's cost, the moment it probes and how close to the boundary it
// fires. Each draw computes the cost admitted inside the short interval, and
// after all draws the test asserts that the spike was reached (and how
// often), and compares the worst cases of the three algorithms.
//
// The attacker is one a real client can be: windows are aligned to the
// epoch, so it knows the next boundary b; it fires greedily (requests until
// one is denied) at b−δ1 and again at b+δ2, with δ1 ≥ 1 and δ1+δ2 < W/10.
func TestPropFixedWindowSpike(t *testing.T) {
	worst := map[string]float64{}
	spikes, draws := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		w := window(p)
		if w < 20 {
			return // no room for an interval shorter than W/10 around a boundary
		}
		cost := rapid.OneOf(rapid.Just(int64(1)), rapid.Int64Range(1, p.Capacity())).Draw(t, "cost")
		span := rapid.Int64Range(1, (w-1)/10).Draw(t, "span") // δ1+δ2 < W/10
		before := rapid.Int64Range(1, span).Draw(t, "δ1")
		b := rapid.Int64Range(1, max(1, maxT/w)).Draw(t, "window") * w
		draws++
		for _, a := range algorithms {
			var s algo.State
			got := int64(0)
			for _, at := range []int64{b - before, b - before + span} {
				// Greedy: requests of cost until one is denied. At one
				// instant, k of them are one request of k·cost.
				_, peek := take(t, a, p, s, at, 0)
				if k := peek.Remaining / cost; k > 0 {
					var r algo.Result
					if s, r = take(t, a, p, s, at, k*cost); !r.Allowed {
						t.Fatalf("%s: %d·%d denied with %d remaining", a.Name(), k, cost, peek.Remaining)
					}
					got += k * cost
				}
				if _, r := take(t, a, p, s, at, cost); r.Allowed {
					t.Fatalf("%s: cost %d admitted after the greedy burst", a.Name(), cost)
				}
			}
			ratio := float64(got) / float64(p.Capacity())
			worst[a.Name()] = max(worst[a.Name()], ratio)
			if a == (algo.FixedWindow{}) && ratio >= 1.9 {
				spikes++
			}
		}
	})
	t.Logf("%d of %d draws reached a 1.9× spike; worst admitted/limit within W/10: %v", spikes, draws, worst)
	switch {
	case spikes == 0:
		t.Fatalf("rapid found no boundary spike for FixedWindow in %d draws", draws)
	case worst["fixedwindow"] < 1.9:
		t.Fatalf("FixedWindow worst case %.3f× < 1.9×", worst["fixedwindow"])
	case worst["slidingwindow"] >= worst["fixedwindow"]:
		t.Fatalf("SlidingWindow worst case %.3f× not below FixedWindow's %.3f×", worst["slidingwindow"], worst["fixedwindow"])
	case worst["tokenbucket"] > 1.1:
		t.Fatalf("TokenBucket admitted %.3f× its capacity within W/10: the law allows 1.1×", worst["tokenbucket"])
	}
}
