package httplimit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// outcomes returns "policy:outcome" of each decision since the last call.
func (d *decisions) outcomes() []string {
	var out []string
	for _, e := range d.Take() {
		out = append(out, e.Policy+":"+e.Outcome.String())
	}
	return out
}

// TestShadowChargesItsOwnBucket pins what a shadow limit charges: its own
// bucket, for every request, apart from the enforced limits: a shadow
// refusal never blocks the enforced limit, and an enforced refusal never
// skips the shadow count.
func TestShadowChargesItsOwnBucket(t *testing.T) {
	for _, tc := range []struct {
		name              string
		enforced, shadow  int64 // bursts
		n                 int
		status            []int
		levels            []int64 // enforced, shadow
		shadowDeniedFirst int     // index of the first request with ShadowDenied
	}{
		// The shadow limit refuses from the 2nd request: nothing is refused.
		{"shadow stricter", 3, 1, 3, []int{200, 200, 200}, []int64{0, 0}, 1},
		// The enforced limit refuses the 3rd and 4th: the shadow counts them.
		{"enforced stricter", 2, 5, 4, []int{200, 200, 429, 429}, []int64{0, 1}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			var ev events
			m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Observer: ev.Observe, Limits: []Limit{
				{Name: "burst", Policy: algo.PerMinute(1).Burst(tc.enforced)},
				{Name: "new", Policy: algo.PerMinute(1).Burst(tc.shadow), Shadow: true},
			}})
			if got := statuses(m.Handler(ok), tc.n); !slices.Equal(got, tc.status) {
				t.Errorf("statuses %v, want %v", got, tc.status)
			}
			if got := levels(t, m); !slices.Equal(got, tc.levels) {
				t.Errorf("buckets at %v, want %v", got, tc.levels)
			}
			for i, e := range ev.ev {
				want := ""
				if tc.shadowDeniedFirst >= 0 && i >= tc.shadowDeniedFirst {
					want = "new"
				}
				if e.ShadowDenied != want || e.Limit != "burst" {
					t.Errorf("event %d: %+v, want ShadowDenied %q and limit burst", i, e, want)
				}
			}
		})
	}
}

// TestShadowReported: a shadow refusal reaches the store's Observer as
// shadow_denied under the limit's name; the headers describe the
// enforced limit, and list the shadow one only with ShadowHeaders.
func TestShadowReported(t *testing.T) {
	clk := newClock()
	var log decisions
	s := observe.Wrap(newStore(t, clk), "memory", &log)
	limits := []Limit{
		{Name: "burst", Policy: algo.PerMinute(1).Burst(5)},
		{Name: "new", Policy: algo.PerMinute(1).Burst(1), Shadow: true},
	}
	m := newMW(t, Config{Store: s, Clock: clk, Limits: limits})
	h := m.Handler(ok)
	do(h, "192.0.2.1:1")
	w := do(h, "192.0.2.1:1")
	want := []string{"new:allowed", "burst:allowed", "new:shadow_denied", "burst:allowed"} // the shadow take first
	if got := log.outcomes(); !slices.Equal(got, want) {
		t.Errorf("decisions %v, want %v", got, want)
	}
	// A shadow limit listed first leaves the enforced ones their names
	// (regression: the enforced take was labelled with the first limit's).
	first := newMW(t, Config{Store: s, Clock: clk, Prefix: "first:", Limits: []Limit{limits[1], limits[0],
		{Name: "daily", Policy: algo.Quota(10, algo.Day, 0)}}})
	do(first.Handler(ok), "192.0.2.1:1")
	want = []string{"new:allowed", "burst:allowed"} // the atomic take, named by its fewest tokens left: burst's 4
	if got := log.outcomes(); !slices.Equal(got, want) {
		t.Errorf("shadow first: decisions %v, want %v", got, want)
	}
	allShadow := slices.Clone(limits)
	for i := range allShadow {
		allShadow[i].Shadow = true
	}
	all := newMW(t, Config{Store: s, Clock: clk, Prefix: "all:", Limits: allShadow})
	do(all.Handler(ok), "192.0.2.1:1")
	want = []string{"burst:allowed", "new:allowed"}
	if got := log.outcomes(); !slices.Equal(got, want) {
		t.Errorf("shadow route: decisions %v, want %v", got, want)
	}
	hd := w.Header()
	if hd.Get("X-RateLimit-Limit") != "5" || hd.Get("X-RateLimit-Remaining") != "3" {
		t.Errorf("X-RateLimit %q/%q, want the enforced limit's 5/3", hd.Get("X-RateLimit-Limit"), hd.Get("X-RateLimit-Remaining"))
	}
	if got := hd.Get("RateLimit-Policy"); got != `"burst";q=5;w=300` {
		t.Errorf("RateLimit-Policy %q, want the enforced limit only", got)
	}
	shown := newMW(t, Config{Store: s, Clock: clk, Limits: limits, Headers: ShadowHeaders})
	hd = do(shown.Handler(ok), "192.0.2.1:1").Header()
	if got := hd.Get("RateLimit-Policy"); got != `"burst";q=5;w=300, "new";q=1;w=60` {
		t.Errorf("with ShadowHeaders, RateLimit-Policy %q", got)
	}
	if got := hd.Get("RateLimit"); got != `"burst";r=2;t=180, "new";r=0;t=60` {
		t.Errorf("with ShadowHeaders, RateLimit %q", got)
	}
	if hd.Get("X-RateLimit-Limit") != "5" {
		t.Errorf("with ShadowHeaders, X-RateLimit-Limit %q, want the enforced 5", hd.Get("X-RateLimit-Limit"))
	}
}

// TestShadowRoute: a route in shadow never answers 429, and charges and
// reports as its limits would.
func TestShadowRoute(t *testing.T) {
	clk := newClock()
	var ev events
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Observer: ev.Observe, Limits: []Limit{{Name: "login", Policy: algo.PerMinute(1).Burst(2), Shadow: true}}})
	if got := statuses(m.Handler(ok), 4); !slices.Equal(got, []int{200, 200, 200, 200}) {
		t.Errorf("statuses %v, want all served", got)
	}
	if got := levels(t, m); got[0] != 0 {
		t.Errorf("bucket at %d, want drained by the first two", got[0])
	}
	var denied []string
	for _, e := range ev.ev {
		if e.Outcome != Allowed {
			t.Errorf("event %+v, want Allowed", e)
		}
		denied = append(denied, e.ShadowDenied)
	}
	if want := []string{"", "", "login", "login"}; !slices.Equal(denied, want) {
		t.Errorf("ShadowDenied %q, want %q", denied, want)
	}
	hd := do(m.Handler(ok), "192.0.2.1:1").Header()
	if hd.Get("X-RateLimit-Limit") != "" || hd.Get("RateLimit") != "" {
		t.Errorf("headers %v, want none for a shadow route", hd)
	}
	shown, err := m.With(Config{Headers: ShadowHeaders})
	if err != nil {
		t.Fatal(err)
	}
	hd = do(shown.Handler(ok), "192.0.2.1:1").Header()
	if hd.Get("X-RateLimit-Limit") != "" || hd.Get("RateLimit") != `"login";r=0;t=120` {
		t.Errorf("with ShadowHeaders: X-RateLimit-Limit %q, RateLimit %q; want only the draft fields",
			hd.Get("X-RateLimit-Limit"), hd.Get("RateLimit"))
	}
	for name, route := range map[string]Config{
		"Delay":       {Delay: time.Second},
		"Concurrency": {Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 1, TTL: time.Minute}}},
	} {
		if _, err := m.With(route); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("a shadow route with %s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// failKeys fails the takes of keys containing part, as a store whose
// node for them is down.
type failKeys struct {
	store.Store
	part string
}

func (f failKeys) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	key := req.Key
	if strings.Contains(key, f.part) {
		return algo.Result{}, errDown
	}
	return f.Store.Take(ctx, req)
}

// TestShadowFailureIsNotTheRoutes: a shadow take that fails is logged and
// leaves the request to the enforced limits, under FailClosed too.
func TestShadowFailureIsNotTheRoutes(t *testing.T) {
	clk := newClock()
	var logs bytes.Buffer
	var ev events
	m := newMW(t, Config{Store: failKeys{newStore(t, clk), ":new:"}, Clock: clk, Observer: ev.Observe, Fail: FailClosed(time.Second),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Limits: []Limit{
			{Name: "burst", Policy: algo.PerMinute(1).Burst(1)},
			{Name: "new", Policy: algo.PerMinute(1).Burst(1), Shadow: true},
		}})
	if got := statuses(m.Handler(ok), 2); !slices.Equal(got, []int{200, 429}) {
		t.Errorf("statuses %v, want the enforced limit's", got)
	}
	if e := ev.last(t); e.Outcome != Denied || e.Err != nil {
		t.Errorf("event %+v, want Denied by the enforced limit", e)
	}
	if n := strings.Count(logs.String(), "shadow limit failed"); n != 1 {
		t.Errorf("%d log records in one LogEvery, want 1:\n%s", n, logs.String())
	}
}
