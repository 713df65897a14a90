package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// admitted sends n requests through h and counts the 200s.
func admitted(h http.Handler, n int, remote string, edit ...func(*http.Request)) int {
	c := 0
	for range n {
		if do(h, remote, edit...).Code == http.StatusOK {
			c++
		}
	}
	return c
}

func TestZeroConfig(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(ok)
	// defaultPolicy: a burst of 100, then 2/s; the test takes well under
	// the half second that would refill a token.
	if got := admitted(h, 101, "198.51.100.7:1"); got != 100 {
		t.Errorf("admitted %d of 101, want 100", got)
	}
	w := do(h, "198.51.100.7:1")
	if w.Code != 429 || w.Header().Get("X-RateLimit-Limit") != "100" || w.Header().Get("RateLimit-Policy") != `"default";q=100;w=50` {
		t.Errorf("%d %v", w.Code, w.Header())
	}
	if got := admitted(h, 1, "198.51.100.8:1"); got != 1 {
		t.Error("another client shares the bucket")
	}

	// With only a Clock, the default store reads it too.
	clk := newClock()
	h = newMW(t, Config{Clock: clk}).Handler(ok)
	admitted(h, 100, "198.51.100.7:1")
	for _, step := range []struct {
		after time.Duration
		want  int
	}{{0, 0}, {499 * time.Millisecond, 0}, {time.Millisecond, 1}, {time.Minute, 100}} {
		clk.Add(step.after)
		if got := admitted(h, 101, "198.51.100.7:1"); got != step.want {
			t.Errorf("after %v more: admitted %d, want %d", step.after, got, step.want)
		}
	}
}

// TestFromLimiter: a ratebucket.Limiter's store and policy configure the
// middleware as any others do.
func TestFromLimiter(t *testing.T) {
	clk := newClock()
	lim, err := ratebucket.NewLimiter(newStore(t, clk), algo.PerMinute(3).Burst(3), ratebucket.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := newMW(t, Config{Store: lim.Store(), Limits: []Limit{{Policy: lim.Policy()}}, Clock: clk}).Handler(ok)
	if got := admitted(h, 5, "198.51.100.7:1"); got != 3 {
		t.Errorf("admitted %d of 5, want the limiter's burst of 3", got)
	}
}

// The article's tiers: anonymous 50/min, authenticated 200/min, paid
// 2000/min, in one middleware.
var articleTiers = map[string]algo.Policy{
	"":              algo.PerMinute(50).Burst(50),
	"authenticated": algo.PerMinute(200).Burst(200),
	"paid":          algo.PerMinute(2000).Burst(2000),
}

// TestTiers: ResolveByTier applies each tier's policy and reports the
// tier; a tier is not in the key, so a user who upgrades keeps its
// bucket under the new policy; a tier without a policy goes to the
// FailMode as a resolution failure.
func TestTiers(t *testing.T) {
	clk := newClock()
	var ev events
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(IP), Observer: ev.Observe, Logger: quiet,
		Limits: []Limit{{Name: "minute", Resolve: byTier(t, articleTiers)}}})
	h := m.Handler(ok)
	for _, c := range []struct {
		name   string
		edit   func(*http.Request)
		want   int
		policy string
	}{
		{"anonymous", func(*http.Request) {}, 50, `"minute";q=50;w=60`},
		{"authenticated", asUser("bob", "authenticated"), 200, `"minute";q=200;w=60`},
		{"paid", asUser("carol", "paid"), 2000, `"minute";q=2000;w=60`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := admitted(h, c.want+5, "198.51.100.7:1", c.edit); got != c.want {
				t.Errorf("admitted %d, want %d", got, c.want)
			}
			w := do(h, "198.51.100.7:1", c.edit)
			if got := w.Header().Get("RateLimit-Policy"); got != c.policy {
				t.Errorf("RateLimit-Policy %q, want %q", got, c.policy)
			}
		})
	}
	if e := ev.last(t); e.Tier != "paid" || e.Class != "user" || e.Limit != "minute" || e.Outcome != Denied {
		t.Errorf("last event %+v", e)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	asUser("bob", "authenticated")(r)
	before, _ := m.Keys(r)
	asUser("bob", "paid")(r)
	if after, _ := m.Keys(r); len(before) != 1 || len(after) != 1 || before[0] != after[0] {
		t.Errorf("bob's keys %q, then %q upgraded: want one, the same", before, after)
	}
	if w := do(h, "198.51.100.7:1", asUser("dave", "platinum")); w.Code != 200 || w.Header().Get("RateLimit-Policy") != "" ||
		ev.last(t).Outcome != FailedOpen || !errors.Is(ev.last(t).Err, ratebucket.ErrResolve) {
		t.Errorf("tier without a policy: %d, event %+v; want the FailMode's answer with ratebucket.ErrResolve", w.Code, ev.last(t))
	}
}

// TestResolveByTierRefuses: tiers ResolveByTier could not apply are
// refused when it is called, never met by a request.
func TestResolveByTierRefuses(t *testing.T) {
	p := algo.PerMinute(1).Burst(1)
	for name, c := range map[string]struct {
		tiers map[string]algo.Policy
		tier  func(context.Context) string
	}{
		"no tiers":           {nil, tierOf},
		"no tier function":   {map[string]algo.Policy{"a": p}, nil},
		"invalid policy":     {map[string]algo.Policy{"x": {}}, tierOf},
		"bad tier name":      {map[string]algo.Policy{"x:y": p}, tierOf},
		"tier name too long": {map[string]algo.Policy{strings.Repeat("t", maxNameLen+1): p}, tierOf},
	} {
		if _, err := ResolveByTier(c.tiers, c.tier); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestCosts(t *testing.T) {
	clk := newClock()
	st := newStore(t, clk)
	base := newMW(t, Config{Store: st, Clock: clk, Limits: []Limit{{Policy: algo.PerSecond(2).Burst(100)}}})
	upload, err := base.With(Config{Cost: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := admitted(upload.Handler(ok), 11, "198.51.100.7:1"); got != 10 {
		t.Errorf("cost 10 on a burst of 100: admitted %d, want 10", got)
	}
	// Routes share the bucket: the feed (cost 1) now finds it empty.
	if got := admitted(base.Handler(ok), 1, "198.51.100.7:1"); got != 0 {
		t.Errorf("feed after uploads: admitted %d, want 0", got)
	}
	clk.Add(time.Second) // 2 tokens
	free, _ := base.With(Config{CostBy: func(*http.Request) int64 { return 0 }})
	if w := do(free.Handler(ok), "198.51.100.7:1"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("cost 0: %d, remaining %q; want 200 and 2 (nothing charged)", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}

	for _, c := range []struct {
		name  string
		route Config
		want  error
	}{
		{"cost above capacity", Config{Cost: 101}, algo.ErrCostExceedsCapacity},
		{"negative cost", Config{Cost: -1}, algo.ErrInvalidCost},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := base.With(c.route)
			if !errors.Is(err, c.want) || !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v, want ErrInvalidConfig and %v", err, c.want)
			}
		})
	}

	// A CostFunc can only be checked per request: a clear 500, no waiting.
	var ev events
	ai, err := base.With(Config{CostBy: func(r *http.Request) int64 { return 1000 }})
	if err != nil {
		t.Fatal(err)
	}
	ai.observer = ev.Observe
	if w := do(ai.Handler(ok), "198.51.100.9:1"); w.Code != 500 || !errors.Is(ev.last(t).Err, algo.ErrCostExceedsCapacity) {
		t.Errorf("cost 1000 on burst 100: %d, %+v", w.Code, ev.last(t))
	}
	// A ResolveByTier's tiers are known when the route is built: a fixed
	// Cost above one tier's capacity is refused by With and New, naming it.
	tiers := map[string]algo.Policy{"": algo.PerSecond(1).Burst(50), "free": algo.PerSecond(1).Burst(5)}
	route := Config{Cost: 10, Limits: []Limit{{Name: "t", Resolve: byTier(t, tiers)}}}
	withStore := route
	withStore.Store = st
	for name, build := range map[string]func() (*Middleware, error){
		"With": func() (*Middleware, error) { return base.With(route) },
		"New":  func() (*Middleware, error) { return New(withStore) },
	} {
		_, err := build()
		if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, algo.ErrCostExceedsCapacity) || !strings.Contains(err.Error(), `tier "free"`) {
			t.Errorf("%s: cost 10 on a tier's burst 5: %v, want ErrInvalidConfig and ErrCostExceedsCapacity naming the tier", name, err)
		}
	}
	if _, err := base.With(Config{Cost: 5, Limits: []Limit{{Name: "t", Resolve: byTier(t, tiers)}}}); err != nil {
		t.Errorf("cost 5 within every tier: %v", err)
	}
	// Any other resolver's policy is known per request only: the same 500.
	plan := ratebucket.Resolver(func(context.Context, string) (ratebucket.Resolved, error) {
		return ratebucket.Resolved{Policy: algo.PerSecond(1).Burst(5), Name: "free"}, nil
	})
	resolved, err := base.With(Config{Cost: 10, Observer: ev.Observe, Limits: []Limit{{Name: "t", Resolve: plan}}})
	if err != nil {
		t.Fatal(err)
	}
	if w := do(resolved.Handler(ok), "198.51.100.9:1"); w.Code != 500 || !errors.Is(ev.last(t).Err, algo.ErrCostExceedsCapacity) {
		t.Errorf("cost 10 on a resolved burst 5: %d, %+v", w.Code, ev.last(t))
	}
}

// daily and burst: a request must pass both.
func twoLimits() []Limit {
	return []Limit{
		{Name: "burst", Policy: algo.PerSecond(10).Burst(5)},
		{Name: "daily", Policy: algo.PerDay(8).Burst(8)},
	}
}

func TestSeveralLimits(t *testing.T) {
	for _, c := range []struct {
		name   string
		wrap   func(store.Store) store.Store
		atomic bool
	}{
		{"memstore TakeMulti: atomic", func(s store.Store) store.Store { return s }, true},
		{"cross-slot TakeMulti: in order", func(s store.Store) store.Store { return crossSlot{s} }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			h := newMW(t, Config{Store: c.wrap(newStore(t, clk)), Clock: clk, Limits: twoLimits()}).Handler(ok)
			if got := admitted(h, 6, "198.51.100.7:1"); got != 5 {
				t.Errorf("burst: admitted %d of 6, want 5", got)
			}
			w := do(h, "198.51.100.7:1")
			if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"burst";r=0;t=1, "daily";r=3;t=`) {
				t.Errorf("RateLimit %q: want one item per limit", got)
			}
			if got := w.Header().Get("RateLimit-Policy"); got != `"burst";q=5;w=1, "daily";q=8;w=86400` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			if v := body(t, w); v["retry_after_ms"] != float64(100) {
				t.Errorf("body %v", v)
			}
			clk.Add(time.Second) // burst refilled; daily has 3 left
			if got := admitted(h, 5, "198.51.100.7:1"); got != 3 {
				t.Errorf("after refill: admitted %d of 5, want 3 (daily)", got)
			}
			w = do(h, "198.51.100.7:1")
			// Atomic: the two refusals by daily charged burst nothing, so
			// burst has 2 left and daily decides: a token per 3 hours, the
			// first of which started refilling 1s ago. In order: each
			// refusal was charged 1 by burst first (the documented
			// overcharge), so now burst refuses too, for 100ms.
			limit, burst, retry := "8", `"burst";r=2;t=1, "daily";r=0;`, "10799"
			if !c.atomic {
				limit, burst, retry = "5", `"burst";r=0;t=1, "daily";r=0;`, "1"
			}
			if w.Code != 429 || w.Header().Get("X-RateLimit-Limit") != limit || !strings.HasPrefix(w.Header().Get("RateLimit"), burst) {
				t.Errorf("%d: X-RateLimit-Limit %q, RateLimit %q; want %s, %s", w.Code, w.Header().Get("X-RateLimit-Limit"), w.Header().Get("RateLimit"), limit, burst)
			}
			if w.Header().Get("Retry-After") != retry {
				t.Errorf("Retry-After %q, want %s", w.Header().Get("Retry-After"), retry)
			}
		})
	}
}

func TestSkip(t *testing.T) {
	clk := newClock()
	st := &countingStore{Store: newStore(t, clk)}
	var ev events
	health := func(r *http.Request) bool { return r.URL.Path == "/healthz" }
	h := newMW(t, Config{Store: st, Clock: clk, Skip: health, Observer: ev.Observe, Limits: []Limit{{Policy: algo.PerSecond(1).Burst(1)}}}).Handler(ok)
	for range 5 {
		if w := do(h, "198.51.100.7:1", func(r *http.Request) { r.URL.Path = "/healthz" }); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("health check: %d %v", w.Code, w.Header())
		}
	}
	if st.calls.Load() != 0 || ev.last(t).Outcome != Skipped {
		t.Errorf("%d store calls, last event %+v", st.calls.Load(), ev.last(t))
	}
	// Per route, a Skip that skips nothing limits everything again.
	m, _ := newMW(t, Config{Store: st, Clock: clk, Skip: health}).With(Config{Skip: func(*http.Request) bool { return false }})
	do(m.Handler(ok), "198.51.100.7:1", func(r *http.Request) { r.URL.Path = "/healthz" })
	if st.calls.Load() != 1 {
		t.Errorf("route Skip: %d store calls, want 1", st.calls.Load())
	}
}

// slowStore advances the clock during each Take, as a slow round trip does.
type slowStore struct {
	store.Store
	clk interface{ Add(time.Duration) time.Time }
}

func (s slowStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	s.clk.Add(3 * time.Millisecond)
	return s.Store.Take(ctx, req)
}

func TestObserver(t *testing.T) {
	clk := newClock()
	var ev events
	mux := http.NewServeMux()
	m := newMW(t, Config{Store: slowStore{newStore(t, clk), clk}, Clock: clk, Observer: ev.Observe,
		Limits: []Limit{{Name: "burst", Policy: algo.PerSecond(1).Burst(1)}}})
	mux.Handle("GET /api/{item}", m.Handler(ok))
	do(mux, "198.51.100.7:1")
	want := Event{Pattern: "GET /api/{item}", Outcome: Allowed, Limit: "burst", Class: "ip", Cost: 1, Latency: 3 * time.Millisecond}
	if got := ev.last(t); got != want {
		t.Errorf("event %+v, want %+v", got, want)
	}
	do(mux, "198.51.100.7:1")
	want.Outcome = Denied
	if got := ev.last(t); got != want {
		t.Errorf("event %+v, want %+v", got, want)
	}
	for o, s := range map[Outcome]string{Allowed: "allowed", FailedClosed: "failed_closed", Invalid: "invalid", 0: "outcome(0)", 99: "outcome(99)"} {
		if o.String() != s {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, o.String(), s)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	st := newStore(t, newClock())
	p := algo.PerSecond(1).Burst(1)
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"bad limit name", Config{Limits: []Limit{{Name: "a b", Policy: p}}}},
		{"unnamed among several", Config{Limits: []Limit{{Policy: p}, {Name: "b", Policy: p}}}},
		{"duplicate names", Config{Limits: []Limit{{Name: "a", Policy: p}, {Name: "a", Policy: p}}}},
		{"no policy", Config{Limits: []Limit{{Name: "a"}}}},
		{"invalid policy", Config{Limits: []Limit{{Name: "a", Policy: algo.PerSecond(0).Burst(1)}}}},
		{"LogEvery too short", Config{LogEvery: time.Nanosecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Store = st
			if _, err := New(c.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v, want ErrInvalidConfig", err)
			}
		})
	}
	m := newMW(t, Config{Store: st})
	for name, route := range map[string]Config{
		"another store": {Store: st}, "another prefix": {Prefix: "x:"}, "another clock": {Clock: newClock()},
		"another LogEvery": {LogEvery: time.Minute}, "bad headers": {Headers: 64}, "negative cost": {Cost: -1},
		"bad limit": {Limits: []Limit{{Name: "a:b", Policy: p}}},
	} {
		if _, err := m.With(route); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: error %v, want ErrInvalidConfig", name, err)
		}
	}
}
