package httplimit

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// TestHeadersAtEdges walks a bucket of 3 refilled 1 per 2s through named
// instants and checks every header at each: full, remaining 0, the first
// refusal, a partial refill, and full again.
func TestHeadersAtEdges(t *testing.T) {
	clk := newClock() // a whole second + 250ms
	base := clk.Now()
	m := newMW(t, Config{
		Store:  newStore(t, clk),
		Clock:  clk,
		Limits: []Limit{{Name: "burst", Policy: algo.Per(1, 2*time.Second).Burst(3)}},
	})
	h := m.Handler(ok)
	// reset is X-RateLimit-Reset: Unix seconds at which the bucket is full,
	// rounded up; base is 250ms past a whole second.
	reset := func(d time.Duration) string {
		at := base.Add(d)
		s := at.Unix()
		if at.Nanosecond() > 0 {
			s++
		}
		return strconv.FormatInt(s, 10)
	}
	steps := []struct {
		name       string
		at         time.Duration // since base
		status     int
		remaining  string
		reset      string
		ratelimit  string
		retryAfter string
	}{
		{"first of a full bucket", 0, 200, "2", reset(2 * time.Second), `"burst";r=2;t=2`, ""},
		{"second", 0, 200, "1", reset(4 * time.Second), `"burst";r=1;t=4`, ""},
		{"last token: remaining 0", 0, 200, "0", reset(6 * time.Second), `"burst";r=0;t=6`, ""},
		{"empty: refused, retry in 2s", 0, 429, "0", reset(6 * time.Second), `"burst";r=0;t=6`, "2"},
		{"1.5s later: retry 0.5s rounds up to 1", 1500 * time.Millisecond, 429, "0", reset(6 * time.Second), `"burst";r=0;t=5`, "1"},
		{"1µs before the token: still refused, Retry-After 1 not 0", 2*time.Second - time.Microsecond, 429, "0", reset(6 * time.Second), `"burst";r=0;t=5`, "1"},
		{"the token has refilled, and is taken", 2 * time.Second, 200, "0", reset(8 * time.Second), `"burst";r=0;t=6`, ""},
		{"long idle: full again", time.Hour, 200, "2", reset(time.Hour + 2*time.Second), `"burst";r=2;t=2`, ""},
	}
	for i, s := range steps {
		clk.Set(base.Add(s.at))
		w := do(h, "192.0.2.1:1234")
		got := w.Header()
		check := func(field, got, want string) {
			t.Helper()
			if got != want {
				t.Errorf("step %d (%s): %s = %q, want %q", i, s.name, field, got, want)
			}
		}
		check("status", strconv.Itoa(w.Code), strconv.Itoa(s.status))
		check("X-RateLimit-Limit", got.Get("X-RateLimit-Limit"), "3")
		check("X-RateLimit-Remaining", got.Get("X-RateLimit-Remaining"), s.remaining)
		check("X-RateLimit-Reset", got.Get("X-RateLimit-Reset"), s.reset)
		check("RateLimit-Policy", got.Get("RateLimit-Policy"), `"burst";q=3;w=6`)
		check("RateLimit", got.Get("RateLimit"), s.ratelimit)
		check("Retry-After", got.Get("Retry-After"), s.retryAfter)
		if s.status == 429 {
			check("Content-Type", got.Get("Content-Type"), "application/json")
			b := body(t, w)
			if b["error"] != "rate_limited" {
				t.Errorf("step %d: body %v", i, b)
			}
		}
	}
}

func TestRetryAfterMillisInBody(t *testing.T) {
	clk := newClock()
	h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Limits: []Limit{{Policy: algo.Per(2, 3*time.Second).Burst(1)}}}).Handler(ok)
	do(h, "192.0.2.1:1")
	clk.Add(time.Microsecond)
	w := do(h, "192.0.2.1:1")
	// 1 token per 1.5s, 1µs elapsed: 1,499,999µs to wait → 1500ms, 2s.
	if got := body(t, w)["retry_after_ms"]; got != float64(1500) {
		t.Errorf("retry_after_ms = %v, want 1500", got)
	}
	if got := w.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
}

func TestRounding(t *testing.T) {
	for _, c := range []struct {
		d      time.Duration
		retry  int64
		millis int64
	}{
		{0, 1, 1},
		{time.Nanosecond, 1, 1},
		{time.Millisecond, 1, 1},
		{time.Second, 1, 1000},
		{time.Second + time.Microsecond, 2, 1001},
		{59*time.Second + 999*time.Millisecond, 60, 59999},
	} {
		if got := retryAfterSeconds(c.d); got != c.retry {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", c.d, got, c.retry)
		}
		if got := retryAfterMillis(c.d); got != c.millis {
			t.Errorf("retryAfterMillis(%v) = %d, want %d", c.d, got, c.millis)
		}
	}
}

func TestHeaderSets(t *testing.T) {
	for _, c := range []struct {
		name        string
		set         Headers
		xrate, info bool
	}{
		{"default: both", DefaultHeaders, true, true},
		{"X-RateLimit only", XRateLimitHeaders, true, false},
		{"draft only", DraftHeaders, false, true},
		{"both explicitly", XRateLimitHeaders | DraftHeaders, true, true},
		{"none", NoHeaders, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Headers: c.set,
				Limits: []Limit{{Policy: algo.PerSecond(1).Burst(1)}}}).Handler(ok)
			do(h, "192.0.2.1:1")
			w := do(h, "192.0.2.1:1") // refused: Retry-After whatever the set
			if got := w.Header().Get("X-RateLimit-Limit") != ""; got != c.xrate {
				t.Errorf("X-RateLimit-Limit present = %v, want %v", got, c.xrate)
			}
			if got := w.Header().Get("RateLimit") != "" && w.Header().Get("RateLimit-Policy") != ""; got != c.info {
				t.Errorf("RateLimit fields present = %v, want %v", got, c.info)
			}
			if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
				t.Errorf("status %d, Retry-After %q; want 429 and 1", w.Code, w.Header().Get("Retry-After"))
			}
		})
	}
	if _, err := New(Config{Store: newStore(t, newClock()), Headers: 1 << 4}); err == nil {
		t.Error("unknown Headers bits accepted")
	}
}

func TestProblemDenied(t *testing.T) {
	clk := newClock()
	h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Denied: ProblemDenied,
		Limits: []Limit{{Name: "burst", Policy: algo.PerSecond(1).Burst(1)}}}).Handler(ok)
	do(h, "192.0.2.1:1")
	w := do(h, "192.0.2.1:1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	b := body(t, w)
	if b["type"] != quotaExceededType || b["status"] != float64(429) || b["title"] == "" || b["retry_after_ms"] != float64(1000) {
		t.Errorf("body %v", b)
	}
	if v, _ := b["violated-policies"].([]any); len(v) != 1 || v[0] != "burst" {
		t.Errorf("violated-policies = %v, want [burst]", b["violated-policies"])
	}
}

func TestCustomDeniedHandler(t *testing.T) {
	clk := newClock()
	var got Decision
	teapot := func(w http.ResponseWriter, r *http.Request, d Decision) {
		got = d
		w.WriteHeader(http.StatusTeapot)
	}
	h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Limits: []Limit{{Policy: algo.PerSecond(1).Burst(1)}}},
		Config{Denied: teapot}).Handler(ok)
	do(h, "192.0.2.1:1")
	w := do(h, "192.0.2.1:1")
	if w.Code != http.StatusTeapot || w.Header().Get("Retry-After") != "1" {
		t.Errorf("status %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if got.Allowed || got.RetryAfter != time.Second || len(got.Limits) != 1 || got.Limits[0].Class != "ip" {
		t.Errorf("decision %+v", got)
	}
}

func TestViolated(t *testing.T) {
	d := Decision{Limits: []LimitResult{
		{Name: "burst", Result: algo.Result{Allowed: false}},
		{Name: "hourly", Result: algo.Result{Allowed: true}},
		{Name: "daily", Result: algo.Result{Allowed: false}},
	}}
	if got := d.Violated(); len(got) != 2 || got[0] != "burst" || got[1] != "daily" {
		t.Errorf("Violated() = %q, want [burst daily]", got)
	}
	if got := (Decision{Allowed: true, Limits: d.Limits[1:2]}).Violated(); got != nil {
		t.Errorf("admitted: Violated() = %q", got)
	}
}
