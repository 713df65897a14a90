package httplimit

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/store"
)

// decisions records what an observed store reports.
type decisions struct{ observetest.Recorder }

// summary lists the decisions since the last call as
// "op outcome policy route" lines.
func (d *decisions) summary() string {
	var b strings.Builder
	for _, e := range d.Take() {
		b.WriteString(e.Op.String() + " " + e.Outcome.String() + " " + e.Policy + " " + e.Route + "\n")
	}
	return b.String()
}

// TestObservedStore checks that the middleware labels its store calls with
// the route pattern and the deciding limit's name, atomically (one
// TakeMulti) and in order (one Take per limit, each with its own name), and
// that the request's identity is in no label.
func TestObservedStore(t *testing.T) {
	limits := []Limit{{Name: "burst", Policy: algo.PerHour(1).Burst(1)}, {Name: "daily", Policy: algo.PerHour(1).Burst(10)}}
	for _, tc := range []struct {
		name          string
		atomic        bool
		first, second string
	}{
		{"TakeMulti", true,
			"take_multi allowed burst GET /api/{item}\n",
			"take_multi denied burst GET /api/{item}\n"},
		{"in order", false,
			"take allowed burst GET /api/{item}\ntake allowed daily GET /api/{item}\n",
			"take denied burst GET /api/{item}\ntake allowed daily GET /api/{item}\n"}, // the peek after the refusal
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			var s store.Store = newStore(t, clk)
			if !tc.atomic {
				s = crossSlot{s}
			}
			obs := &decisions{}
			mux := http.NewServeMux()
			mux.Handle("GET /api/{item}", newMW(t, Config{Store: observe.Wrap(s, "memory", obs), Clock: clk, Limits: limits}).Handler(ok))
			if w := do(mux, "198.51.100.7:1"); w.Code != http.StatusOK {
				t.Fatalf("first request: %d", w.Code)
			}
			if got := obs.summary(); got != tc.first {
				t.Errorf("first request:\n%s want\n%s", got, tc.first)
			}
			if w := do(mux, "198.51.100.7:1"); w.Code != http.StatusTooManyRequests {
				t.Fatalf("second request: %d", w.Code)
			}
			if got := obs.summary(); got != tc.second || strings.Contains(got, "198.51") {
				t.Errorf("second request:\n%s want\n%s", got, tc.second)
			}
		})
	}
}

// BenchmarkObservedMiddleware is BenchmarkMiddleware's one-limit case over
// an observed store: what the labels add to a request (one allocation) and
// the observed store call.
func BenchmarkObservedMiddleware(b *testing.B) {
	big := algo.PerSecond(algo.MaxPerSecond).Burst(algo.MaxCapacity / 1000)
	var n int
	counting := observe.Funcs{Decision: func(context.Context, observe.Decision) { n++ }}
	m, err := New(Config{Store: observe.Wrap(newStore(b, newClock()), "memory", counting), Limits: []Limit{{Name: "burst", Policy: big}}})
	if err != nil {
		b.Fatal(err)
	}
	serveBench(b, m)
}
