package httplimit

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
)

// TestQuotaBesideBurst: a route with a burst limit and a daily calendar
// quota lists both policies in the draft fields, and the X-RateLimit
// fields and Retry-After describe the one closest to denying.
func TestQuotaBesideBurst(t *testing.T) {
	clk := newClock() // 2026-01-01 00:00:00.25 UTC
	var ev events
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Observer: ev.Observe, Limits: []Limit{
		{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
		{Name: "daily", Policy: algo.Quota(5, algo.Day, 0)},
		{Name: "monthly", Policy: algo.Quota(1000, algo.Month, 0)},
	}})
	h := m.Handler(ok)
	w := do(h, "192.0.2.1:1")
	midnight := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct{ field, want string }{
		{"RateLimit-Policy", `"burst";q=100;w=50, "daily";q=5;w=86400, "monthly";q=1000;w=2678400`},
		{"RateLimit", `"burst";r=99;t=1, "daily";r=4;t=86400, "monthly";r=999;t=2678400`},
		{"X-RateLimit-Limit", "5"},
		{"X-RateLimit-Remaining", "4"},
		{"X-RateLimit-Reset", itoa(midnight.Unix())},
	} {
		if got := w.Header().Get(c.field); got != c.want {
			t.Errorf("%s: %q, want %q", c.field, got, c.want)
		}
	}
	if e := ev.last(t); e.Limit != "daily" {
		t.Errorf("event names limit %q, want daily, the closest to denying", e.Limit)
	}
	for range 4 {
		do(h, "192.0.2.1:1")
	}
	clk.Add(12 * time.Hour) // the burst is full again; the day's quota is not
	w = do(h, "192.0.2.1:1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "43200" {
		t.Errorf("6th request: %d, Retry-After %q; want 429 until midnight, 43200", w.Code, w.Header().Get("Retry-After"))
	}
	if got := w.Header().Get("RateLimit"); got != `"burst";r=100;t=0, "daily";r=0;t=43200, "monthly";r=995;t=2635200` {
		t.Errorf("RateLimit %q", got)
	}
	if v := body(t, w); v["retry_after_ms"] != float64(43_200_000-250) {
		t.Errorf("body %v", v)
	}
	clk.Set(midnight)
	if w := do(h, "192.0.2.1:1"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("at midnight: %d with %q left, want a new day's quota", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
}

// TestCloserToDenying pins Decision.Decider on admitted requests: fewest
// requests of their cost left, then longest until full.
func TestCloserToDenying(t *testing.T) {
	clk := newClock()
	priced := ratebucket.Resolver(func(context.Context, string) (ratebucket.Resolved, error) {
		return ratebucket.Resolved{Policy: algo.PerSecond(1).Burst(10), Cost: 3}, nil
	})
	for _, c := range []struct {
		name   string
		limits []Limit
		want   string
	}{
		// 4 left each: the quota does not refill before tomorrow.
		{"tie", []Limit{{Name: "burst", Policy: algo.PerSecond(1).Burst(5)}, {Name: "daily", Policy: algo.Quota(5, algo.Day, 0)}}, "daily"},
		// 7 tokens left at 3 a request is 2 requests; 4 at 1 is 4.
		{"by cost", []Limit{{Name: "few", Policy: algo.PerSecond(1).Burst(5)}, {Name: "priced", Resolve: priced}}, "priced"},
		{"fewer", []Limit{{Name: "big", Policy: algo.PerSecond(1).Burst(50)}, {Name: "small", Policy: algo.PerSecond(1).Burst(5)}}, "small"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ev events
			m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Observer: ev.Observe, Limits: c.limits})
			do(m.Handler(ok), "192.0.2.1:1")
			if e := ev.last(t); e.Limit != c.want {
				t.Errorf("decider %q, want %q", e.Limit, c.want)
			}
		})
	}
}
