package sim

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// levelAt returns the level of pts at t: the last point at t (the room just
// after what happened there), else the straight line between its
// neighbours.
func levelAt(pts []Point, t time.Duration) float64 {
	i, _ := slices.BinarySearchFunc(pts, t+1, func(p Point, at time.Duration) int { return cmp.Compare(p.At, at) })
	if i > 0 && pts[i-1].At == t {
		return pts[i-1].Tokens
	}
	if i == 0 || i == len(pts) {
		return math.NaN()
	}
	a, b := pts[i-1], pts[i]
	return a.Tokens + (b.Tokens-a.Tokens)*float64(t-a.At)/float64(b.At-a.At)
}

// TestTimelineAgreesWithStore: the shadow replays every request at the
// focus key and gets the store's answer, and the level drawn just after
// each request, rounded down, is the Remaining the store reported, for
// every algorithm, shared and per instance.
func TestTimelineAgreesWithStore(t *testing.T) {
	for _, alg := range algorithms {
		for _, top := range []Topology{Shared, PerInstance} {
			for _, sc := range []string{"boundary-spike", "mobile", "cost"} {
				cfg := Config{Scenario: sc, Algorithms: []algo.Algorithm{alg}, Topologies: []Topology{top}, Instances: 3, Seed: 3, Duration: 4 * time.Minute}
				r, err := run1(cfg)
				if err != nil {
					t.Fatal(err)
				}
				tl := r.Timeline
				name := r.Title()
				if !tl.Exact || len(tl.Levels) == 0 || tl.Admitted+tl.Denied != int64(len(tl.Requests)) || len(tl.Requests) == 0 {
					t.Fatalf("%s: exact %v, %d levels, %d+%d of %d requests", name, tl.Exact, len(tl.Levels), tl.Admitted, tl.Denied, len(tl.Requests))
				}
				level := map[int][]Point{}
				for _, lv := range tl.Levels {
					level[lv.Instance] = lv.Points
				}
				for k, q := range tl.Requests {
					if k+1 < len(tl.Requests) && tl.Requests[k+1].At == q.At || k > 0 && tl.Requests[k-1].At == q.At {
						continue // several at one µs: the point is after the last
					}
					id := -1
					if top == PerInstance {
						id = q.Instance
					}
					got := math.Floor(levelAt(level[id], q.At) + 1e-9)
					if got != float64(q.Remaining) {
						t.Fatalf("%s: request %d at %v: level after it %v, store said %d left", name, k, q.At, levelAt(level[id], q.At), q.Remaining)
					}
				}
			}
		}
	}
}

// TestLevelIsPiecewiseLinear feeds a tracer requests by hand and compares
// the drawn level, between its points, with the algorithm's own state
// read at every 7 ms: the breakpoints (refilled to capacity, window
// boundaries) are all there.
func TestLevelIsPiecewiseLinear(t *testing.T) {
	p := algo.PerSecond(3).Burst(5) // windows of 1.666667 s, not aligned to the start
	at := []int64{0, 100, 200, 300, 400, 450, 1_900, 1_950, 2_000, 2_010, 3_400, 3_401, 7_000, 7_100}
	for _, alg := range algorithms {
		tr := newTracer(layout{alg: alg, topology: Shared, skews: []int64{0}}, p)
		var s algo.State
		var states []algo.State
		c := &client{name: "hand 0"}
		for _, ms := range at {
			e := event{at: ms * 1000, cost: 1}
			var res algo.Result
			var err error
			s, res, err = alg.Take(p, s, tr.start+e.at, 1)
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, s)
			tr.add(c, e, 0, res, nil)
		}
		length := 10 * time.Second
		lv := tr.levels(length)
		if !tr.exact || len(lv) != 1 {
			t.Fatalf("%s: exact %v, %d levels", alg.Name(), tr.exact, len(lv))
		}
		for u := int64(1); u < length.Microseconds(); u += 7_000 {
			k := countAtMost(at, u/1000) - 1 // the last request before u
			s := algo.State{}
			if k >= 0 {
				s = states[k]
			}
			want := tr.room(s, tr.start+u)
			if got := levelAt(lv[0].Points, dur(u)); math.Abs(got-want) > 1e-6 {
				t.Fatalf("%s at %v: drawn %v, the state says %v", alg.Name(), dur(u), got, want)
			}
		}
	}
}

// countAtMost returns how many of the sorted xs are at most v.
func countAtMost(xs []int64, v int64) int {
	n, _ := slices.BinarySearch(xs, v+1)
	return n
}

// TestTimelineBoundarySpike: the fixed window's worst interval at the
// attacker is the one the report found, around the minute's boundary; the
// token bucket keeps the law there.
func TestTimelineBoundarySpike(t *testing.T) {
	reps := matrix(t, "boundary-spike")
	fixed, token := reps[fixedShared].Timeline, reps[tokenShared].Timeline
	l := fixed.Law
	if l.Holds || l != reps[fixedShared].Law || l.From >= time.Minute || l.To <= time.Minute {
		t.Fatalf("fixed window: timeline law %v, report's %v", l, reps[fixedShared].Law)
	}
	if z := fixed.Zoom; z.From > l.From || z.To < l.To || z.To-z.From > 3*time.Second || z.Admitted < l.Admitted {
		t.Errorf("zoom %+v does not frame the worst interval %v", z, l)
	}
	if fixed.Window != time.Minute || fixed.WindowStart != 0 || len(fixed.Windows) != 10 {
		t.Errorf("windows: %v from %v, %d of them", fixed.Window, fixed.WindowStart, len(fixed.Windows))
	}
	var sum int64
	for _, w := range fixed.Windows {
		sum += w.Admitted
	}
	if sum != fixed.Admitted {
		t.Errorf("windows add up to %d admitted, the timeline has %d", sum, fixed.Admitted)
	}
	if !token.Law.Holds || token.Window != 0 || token.Windows != nil {
		t.Errorf("token bucket: law %v, window %v", token.Law, token.Window)
	}
	broken := false
	for _, pk := range fixed.Peaks {
		broken = broken || pk.Peak > pk.Bound
	}
	for _, pk := range token.Peaks {
		if pk.Peak > pk.Bound {
			t.Errorf("token bucket: %v peak %d above %d", pk.Width, pk.Peak, pk.Bound)
		}
	}
	if !broken || len(fixed.Peaks) < 10 {
		t.Errorf("fixed window: %d peaks, none above its bound", len(fixed.Peaks))
	}
}

func TestTraffic(t *testing.T) {
	text := "100 at 59.5s over 490ms, 100 at 1m0.01s over 490ms, every 5s, cost 2"
	var p Pattern
	if err := p.UnmarshalText([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if p.String() != text || len(p.Bursts) != 2 || p.Every != 5*time.Second || p.Cost != 2 {
		t.Fatalf("UnmarshalText(%q) = %+v, String %q", text, p, p.String())
	}
	for _, bad := range []string{"100 at", "every -1s", "x at 5s", "5 at 1s over", "cost 0", "at 5 100"} {
		if err := p.UnmarshalText([]byte(bad)); !errors.Is(err, ErrInvalidConfig) || p.String() != text {
			t.Errorf("UnmarshalText(%q) error = %v, pattern now %q", bad, err, p)
		}
	}
	spike := []Pattern{{Bursts: []Burst{{At: 59500 * time.Millisecond, Count: 100, Over: 490 * time.Millisecond}}},
		{Bursts: []Burst{{At: 60010 * time.Millisecond, Count: 100, Over: 490 * time.Millisecond}}}}
	r, err := run1(Config{Traffic: spike, Algorithms: []algo.Algorithm{algo.FixedWindow{}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != custom || r.Duration != 2*time.Minute || r.Total.Admitted != 200 || r.Law.Holds || len(r.Timeline.Clients) != 2 {
		t.Errorf("two bursts across a boundary: %s, %d admitted, law %v, clients %v", r.Title(), r.Total.Admitted, r.Law, r.Timeline.Clients)
	}
	r, err = run1(Config{Traffic: spike})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total.Admitted != 101 || !r.Law.Holds {
		t.Errorf("token bucket: %d admitted, law %v", r.Total.Admitted, r.Law)
	}
	for _, cfg := range []Config{
		{Traffic: spike, Scenario: "mobile"},
		{Traffic: []Pattern{{Every: time.Microsecond}}},
		{Traffic: make([]Pattern, 11)},
	} {
		if _, err := run1(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("run1(%+v) error = %v", cfg, err)
		}
	}
}
