package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// events records the component events of the observer contract.
type events struct {
	observe.Funcs
	mu      sync.Mutex
	changes []observe.BreakerChange
	hits    []observe.DenyCacheHit
}

func (e *events) ObserveBreaker(c observe.BreakerChange) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.changes = append(e.changes, c)
}

func (e *events) ObserveDenyCacheHit(_ context.Context, h observe.DenyCacheHit) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits = append(e.hits, h)
}

// TestObserveBreaker walks the breaker through open, half-open and closed
// and checks that each transition reaches the Observer, named, in order,
// the opening with its cause.
func TestObserveBreaker(t *testing.T) {
	ev := &events{}
	r := newRig(t, hybrid.FallbackConfig{CoolDown: time.Second, Observer: ev, Name: "redis"})
	r.primary.set(true, false)
	for range hybrid.DefaultFailureThreshold {
		r.take(t, "k")
	}
	r.clk.Add(time.Second)
	r.primary.set(false, false)
	r.take(t, "k") // the probe: half-open, then closed
	want := []struct{ from, to observe.BreakerState }{
		{observe.BreakerClosed, observe.BreakerOpen}, {observe.BreakerOpen, observe.BreakerHalfOpen}, {observe.BreakerHalfOpen, observe.BreakerClosed},
	}
	if len(ev.changes) != len(want) {
		t.Fatalf("%d changes observed %+v, want %d", len(ev.changes), ev.changes, len(want))
	}
	for i, w := range want {
		c := ev.changes[i]
		if c.Store != "redis" || c.From != w.from || c.To != w.to || (c.Err != nil) != (i == 0) {
			t.Errorf("change %d: %+v, want redis %v>%v (an error only when opening)", i, c, w.from, w.to)
		}
	}
	if h := r.history(); h != "closed>open open>half-open half-open>closed" {
		t.Errorf("OnStateChange saw %q", h)
	}
	if got := ev.changes[0].From.String() + ">" + ev.changes[0].To.String(); got != "closed>open" {
		t.Errorf("state names %q, want observe.BreakerState's", got)
	}
}

// TestObserveDenyCacheHits checks that every local denial, and only those,
// is a hit named with the call's labels: a single take, a multi-limit take
// (the denying limit's name) and a Fallback's answer while its primary,
// the cache, cannot reach its own.
func TestObserveDenyCacheHits(t *testing.T) {
	clk := storetest.NewClock()
	ev := &events{}
	primary := &flaky{Store: newMem(t, clk)}
	c := newCache(t, primary, hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1, Observer: ev})
	p := algo.PerMinute(1).Burst(1)
	login := observe.WithLabels(ctx, observe.Labels{Route: "POST /login", Policy: "login"})
	if res, err := c.Take(login, store.Request{Key: "alice", Policy: p, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("first take: %+v %v", res, err)
	}
	if len(ev.hits) != 0 {
		t.Fatalf("hits %+v before any local denial", ev.hits)
	}
	// The answer left no token: the cache denies the next take itself.
	if res, err := c.Take(login, store.Request{Key: "alice", Policy: p, Cost: 1}); err != nil || res.Allowed || primary.count() != 1 {
		t.Fatalf("second take: %+v %v after %d primary calls, want a local denial", res, err, primary.count())
	}
	multi := observe.WithLabels(ctx, observe.Labels{Route: "GET /feed", Policies: []string{"burst", "login"}})
	burst := algo.PerMinute(2).Burst(1) // refills sooner: "login" denies longest
	c.Take(ctx, store.Request{Key: "alice-burst", Policy: burst, Cost: 1})
	if mr, err := c.TakeMulti(multi, []store.Request{{Key: "alice-burst", Policy: burst, Cost: 1}, {Key: "alice", Policy: p, Cost: 1}}); err != nil ||
		mr.Allowed || mr.Denied != 1 || primary.count() != 2 {
		t.Fatalf("multi: %+v %v after %d primary calls, want a local denial by the second", mr, err, primary.count())
	}

	f, err := hybrid.NewFallback(c, newMem(t, clk), hybrid.FallbackConfig{Clock: clk, Timeout: unhurried})
	if err != nil {
		t.Fatal(err)
	}
	primary.set(true, false)
	if res, err := f.Take(login, store.Request{Key: "alice", Policy: p, Cost: 1}); err != nil || res.Allowed {
		t.Fatalf("down: %+v %v, want the cache's denial", res, err)
	}
	want := []observe.DenyCacheHit{
		{Store: "denycache", Policy: "login", Route: "POST /login"},
		{Store: "denycache", Policy: "login", Route: "GET /feed"},
		{Store: "denycache", Policy: "login", Route: "POST /login"},
	}
	if len(ev.hits) != len(want) {
		t.Fatalf("hits %+v, want %+v", ev.hits, want)
	}
	for i := range want {
		if ev.hits[i] != want[i] {
			t.Errorf("hit %d: %+v, want %+v", i, ev.hits[i], want[i])
		}
	}
	if d := c.Stats().Denied; d != int64(len(want)) {
		t.Errorf("Stats().Denied = %d, %d hits observed", d, len(want))
	}
}
