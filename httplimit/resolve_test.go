package httplimit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// tenants is a plan database: the plan of each user, changed by tests.
type tenants struct {
	mu   sync.Mutex
	plan map[string]ratebucket.Resolved
	err  error
}

func (d *tenants) resolve(_ context.Context, id string) (ratebucket.Resolved, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return ratebucket.Resolved{}, d.err
	}
	p, ok := d.plan[id]
	if !ok {
		return ratebucket.Resolved{}, errUnknownTenant
	}
	return p, nil
}

func (d *tenants) set(id string, r ratebucket.Resolved) {
	d.mu.Lock()
	d.plan[id] = r
	d.mu.Unlock()
}

var (
	errUnknownTenant = errors.New("unknown tenant")
	freePlan         = ratebucket.Resolved{Policy: algo.PerMinute(60).Burst(2), Name: "free"}
	proPlan          = ratebucket.Resolved{Policy: algo.PerMinute(600).Burst(5), Name: "pro"}
)

func newTenants() *tenants {
	return &tenants{plan: map[string]ratebucket.Resolved{"alice": freePlan, "bob": proPlan}}
}

// levels returns the tokens left in each bucket of the request edit makes
// (enforced and shadow limits alike), read without charging.
func levels(t *testing.T, m *Middleware, edit ...func(*http.Request)) []int64 {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for _, e := range edit {
		e(r)
	}
	_, takes, err := m.plan(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, q := range takes {
		res, err := m.store.Take(context.Background(), store.Request{Key: q.Key, Policy: q.Policy, Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Remaining)
	}
	return out
}

// statuses sends n requests with edit and returns their status codes.
func statuses(h http.Handler, n int, edit ...func(*http.Request)) []int {
	var out []int
	for range n {
		out = append(out, do(h, "192.0.2.1:1234", edit...).Code)
	}
	return out
}

func TestResolvePolicyPerTenant(t *testing.T) {
	clk := newClock()
	db := newTenants()
	var ev events
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(nil), Observer: ev.Observe,
		Limits: []Limit{{Name: "api", Resolve: ratebucket.Resolver(db.resolve)}}})
	h := m.Handler(ok)
	if got := statuses(h, 3, asUser("alice", "")); !slices.Equal(got, []int{200, 200, 429}) {
		t.Errorf("free tenant: %v, want its burst of 2", got)
	}
	if e := ev.last(t); e.Tier != "free" || e.Limit != "api" {
		t.Errorf("event %+v, want tier free", e)
	}
	w := do(h, "192.0.2.1:1", asUser("bob", ""))
	if got := w.Header().Get("X-RateLimit-Limit"); got != "5" || w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("pro tenant: limit %q remaining %q, want 5 and 4", got, w.Header().Get("X-RateLimit-Remaining"))
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	*r = *r.WithContext(WithUser(r.Context(), "bob"))
	if keys, err := m.Keys(r); err != nil || len(keys) != 1 || keys[0] != "h:api:user{bob}" {
		t.Errorf("Keys = %v, %v: the plan is not part of the key", keys, err)
	}

	// A plan that prices its requests: its Cost replaces the route's.
	db.set("carol", ratebucket.Resolved{Policy: algo.PerMinute(60).Burst(20), Cost: 5, Name: "metered"})
	do(h, "192.0.2.1:1", asUser("carol", ""))
	if got := levels(t, m, asUser("carol", "")); got[0] != 15 {
		t.Errorf("metered tenant: %d left, want 15", got[0])
	}

	// Tiers as a resolver: the tier names the policy, not the key.
	tiers := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(nil),
		Limits: []Limit{{Name: "api", Resolve: byTier(t, map[string]algo.Policy{"paid": algo.PerMinute(60).Burst(3)})}}})
	if got := statuses(tiers.Handler(ok), 4, asUser("dave", "paid")); !slices.Equal(got, []int{200, 200, 200, 429}) {
		t.Errorf("paid tier: %v, want its burst of 3", got)
	}
}

// TestResolveFailureIsTheFailMode pins that a resolver's failure is never
// a default policy: the route's FailMode answers, and no bucket is asked.
func TestResolveFailureIsTheFailMode(t *testing.T) {
	clk := newClock()
	db := newTenants()
	db.set("badname", ratebucket.Resolved{Policy: freePlan.Policy, Name: "has space"})
	db.set("zero", ratebucket.Resolved{Name: "zero"})
	db.set("negative", ratebucket.Resolved{Policy: freePlan.Policy, Cost: -1})
	cs := &countingStore{Store: newStore(t, clk)}
	var ev events
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := newMW(t, Config{Store: cs, Clock: clk, Key: User(nil), Observer: ev.Observe, Logger: quiet,
		Limits: []Limit{{Name: "api", Resolve: ratebucket.Resolver(db.resolve)}}})
	closed := newMW(t, Config{Store: cs, Clock: clk, Key: User(nil), Observer: ev.Observe, Fail: FailClosed(2 * time.Second), Logger: quiet,
		Limits: []Limit{{Name: "api", Resolve: ratebucket.Resolver(db.resolve)}}})
	for _, tc := range []struct {
		user string
		want error
	}{{"nobody", errUnknownTenant}, {"badname", ratebucket.ErrResolve}, {"zero", algo.ErrInvalidPolicy}, {"negative", algo.ErrInvalidCost}} {
		w := do(open.Handler(ok), "192.0.2.1:1", asUser(tc.user, ""))
		e := ev.last(t)
		if w.Code != 200 || e.Outcome != FailedOpen || !errors.Is(e.Err, ratebucket.ErrResolve) || !errors.Is(e.Err, tc.want) {
			t.Errorf("%s, FailOpen: %d, %+v; want served, FailedOpen with ErrResolve and %v", tc.user, w.Code, e, tc.want)
		}
		if w.Header().Get("X-RateLimit-Limit") != "" {
			t.Errorf("%s, FailOpen: rate-limit headers without a policy", tc.user)
		}
		w = do(closed.Handler(ok), "192.0.2.1:1", asUser(tc.user, ""))
		if e := ev.last(t); w.Code != 503 || w.Header().Get("Retry-After") != "2" || e.Outcome != FailedClosed {
			t.Errorf("%s, FailClosed: %d Retry-After %q, %+v; want 503 after 2s", tc.user, w.Code, w.Header().Get("Retry-After"), e)
		}
	}
	if n := cs.calls.Load(); n != 0 {
		t.Errorf("%d store calls for unresolved policies, want none", n)
	}
	// Through an observed store, each unresolved request is a failed
	// decision for the store's observer too, under the route's labels.
	var failed []observe.Decision
	obs := observe.Funcs{Decision: func(_ context.Context, d observe.Decision) { failed = append(failed, d) }}
	observed := newMW(t, Config{Store: observe.Wrap(cs, "memory", obs), Clock: clk, Key: User(nil), Logger: quiet,
		Limits: []Limit{{Name: "api", Resolve: ratebucket.Resolver(db.resolve)}}})
	mux := http.NewServeMux()
	mux.Handle("GET /api/feed", observed.Handler(ok))
	if w := do(mux, "192.0.2.1:1", asUser("nobody", "")); w.Code != 200 {
		t.Fatalf("observed, FailOpen: %d, want served", w.Code)
	}
	if len(failed) != 1 || failed[0].Outcome != observe.OutcomeError || !errors.Is(failed[0].Err, errUnknownTenant) ||
		failed[0].Route != "GET /api/feed" || failed[0].Policy != "api" {
		t.Errorf("store observer saw %+v; want one failed decision of route GET /api/feed, policy api", failed)
	}
	unknownTier := newMW(t, Config{Store: cs, Clock: clk, Key: User(nil), Fail: FailClosed(time.Second), Logger: quiet,
		Limits: []Limit{{Name: "api", Resolve: byTier(t, map[string]algo.Policy{"paid": freePlan.Policy})}}})
	if w := do(unknownTier.Handler(ok), "192.0.2.1:1", asUser("erin", "trial")); w.Code != 503 {
		t.Errorf("unknown tier under FailClosed: %d, want 503", w.Code)
	}
}

// TestResolveCachedPlanChange: behind a ResolverCache, a plan change
// reaches the route within the cache's TTL, on the injected clock.
func TestResolveCachedPlanChange(t *testing.T) {
	clk := newClock()
	db := newTenants()
	cache, err := ratebucket.NewResolverCache(db.resolve, ratebucket.CacheConfig{TTL: 10 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(nil),
		Limits: []Limit{{Name: "api", Resolve: cache}}})
	limit := func() string {
		return do(m.Handler(ok), "192.0.2.1:1", asUser("alice", "")).Header().Get("X-RateLimit-Limit")
	}
	if got := limit(); got != "2" {
		t.Fatalf("free: limit %q", got)
	}
	db.set("alice", proPlan)
	clk.Add(10*time.Second - time.Microsecond)
	if got := limit(); got != "2" {
		t.Errorf("within the TTL: limit %q, want the cached free plan's 2", got)
	}
	clk.Add(time.Microsecond)
	if got := limit(); got != "5" {
		t.Errorf("after the TTL: limit %q, want the pro plan's 5", got)
	}
}

func TestResolveConfig(t *testing.T) {
	s := newStore(t, newClock())
	res := ratebucket.Resolver(newTenants().resolve)
	for name, cfg := range map[string]Config{
		"Resolve and Policy": {Store: s, Limits: []Limit{{Resolve: res, Policy: defaultPolicy}}},
		"Resolve and Delay":  {Store: s, Limits: []Limit{{Resolve: res}}, Delay: time.Second},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestResolvePlanChangeKeepsTheBucket: a client whose plan changes keeps
// its bucket, converted by the store (memstore's default rule keeps the
// tokens it holds, algo.KeepTokens): an upgrade of a drained free bucket
// is an empty pro bucket, refilled at the pro rate, not a fresh one.
func TestResolvePlanChangeKeepsTheBucket(t *testing.T) {
	clk := newClock()
	db := newTenants()
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(nil),
		Limits: []Limit{{Name: "api", Resolve: ratebucket.Resolver(db.resolve)}}})
	h := m.Handler(ok)
	statuses(h, 2, asUser("alice", "")) // drains free's 2
	db.set("alice", proPlan)            // 10 a second, burst 5
	w := do(h, "192.0.2.1:1", asUser("alice", ""))
	if w.Code != 429 || w.Header().Get("X-RateLimit-Limit") != "5" || w.Header().Get("X-RateLimit-Reset") == "" {
		t.Errorf("just upgraded: %d, limit %q; want 429 under the pro policy", w.Code, w.Header().Get("X-RateLimit-Limit"))
	}
	if v := body(t, w); v["retry_after_ms"] != float64(100) {
		t.Errorf("retry_after_ms %v, want 100: the pro rate's next token", v["retry_after_ms"])
	}
	clk.Add(500 * time.Millisecond)
	if got := statuses(h, 6, asUser("alice", "")); !slices.Equal(got, []int{200, 200, 200, 200, 200, 429}) {
		t.Errorf("half a second later: %v, want pro's 5 refilled", got)
	}
}

// TestResolvedCapacityBelowCost: a cost the resolved policy could never
// admit is a 500 (Invalid), not a FailMode answer nor a 429.
func TestResolvedCapacityBelowCost(t *testing.T) {
	clk := newClock()
	var ev events
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(nil), Observer: ev.Observe, Cost: 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: []Limit{{Name: "api", Resolve: ratebucket.Resolver(newTenants().resolve)}}})
	w := do(m.Handler(ok), "192.0.2.1:1", asUser("alice", "")) // free: burst 2
	if e := ev.last(t); w.Code != 500 || e.Outcome != Invalid || !errors.Is(e.Err, algo.ErrCostExceedsCapacity) {
		t.Errorf("%d, %+v; want 500 Invalid with ErrCostExceedsCapacity", w.Code, e)
	}
}
