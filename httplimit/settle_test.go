package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// tokens is a handler that reports the cost its request's "used" query
// parameter names in the X-Tokens header, after writing the body (as a
// streaming LLM proxy learns its cost at the end).
var tokens = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("answer\n"))
	if u := r.URL.Query().Get("used"); u != "" {
		w.Header().Set("X-Tokens", u)
	}
})

// get serves GET /?used=used (none when used < 0) through h and returns the
// response.
func get(h http.Handler, used int) *httptest.ResponseRecorder {
	url := "/"
	if used >= 0 {
		url += "?used=" + strconv.Itoa(used)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", url, nil))
	return w
}

// TestSettleByHeader: a request holds its estimate and is charged what its
// response reports: the difference back, the extra into debt that the next
// request waits out with the exact Retry-After; a response without the
// header keeps the estimate.
func TestSettleByHeader(t *testing.T) {
	clk := newClock()
	s := newStore(t, clk)
	var ev events
	p := algo.PerSecond(100).Burst(1000)
	m, err := New(Config{Store: s, Clock: clk, Limits: []Limit{{Policy: p}}, Cost: 100, Observer: ev.Observe,
		Settle: "X-Tokens"})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(tokens)
	peek := func() int64 {
		res, _ := s.Take(context.Background(), store.Request{Key: "h:default:ip{192.0.2.1}", Policy: p})
		return res.Remaining
	}
	if w := get(h, 30); w.Code != 200 || peek() != 970 {
		t.Fatalf("used 30 of an estimate of 100: status %d, %d left, want 200 and 970", w.Code, peek())
	}
	if w := get(h, -1); w.Code != 200 || peek() != 870 {
		t.Fatalf("no header: status %d, %d left, want 200 and 870 (the estimate stands)", w.Code, peek())
	}
	if w := get(h, 2000); w.Code != 200 || peek() != 0 {
		t.Fatalf("used 2000: status %d, %d left, want 200 and 0 (in debt)", w.Code, peek())
	}
	// 770 left less 1900 would be 1130 in debt: one full bucket, 1000, is
	// the most. The next estimate of 100 waits for 1100 tokens at 100/s.
	w := get(h, 1)
	if w.Code != 429 || w.Header().Get("Retry-After") != "11" {
		t.Fatalf("in debt: status %d, Retry-After %q, want 429 and 11", w.Code, w.Header().Get("Retry-After"))
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	last := ev.ev[len(ev.ev)-2]
	if last.Outcome != Settled || last.Cost != 2000 || last.Err != nil {
		t.Fatalf("the settle's event = %+v, want Settled at 2000", last)
	}
}

// TestSettleRunningEstimate: a route with no cost holds the 95th
// percentile of its last settled costs.
func TestSettleRunningEstimate(t *testing.T) {
	clk := newClock()
	var ev events
	m, err := New(Config{Store: newStore(t, clk), Clock: clk, Limits: []Limit{{Policy: algo.PerSecond(1e6).Burst(1e6)}},
		Observer: ev.Observe, SettleCost: func(status int, h http.Header) (int64, bool) {
			n, err := strconv.ParseInt(h.Get("X-Tokens"), 10, 64)
			return n, err == nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(tokens)
	for i := 1; i <= 200; i++ {
		get(h, i%100+1) // costs 1..100, evenly
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	first, last := ev.ev[0], ev.ev[len(ev.ev)-2]
	if first.Outcome != Allowed || first.Cost != 1 || last.Outcome != Allowed || last.Cost < 90 || last.Cost > 100 {
		t.Fatalf("estimates %d at first and %d after 200 requests of 1..100, want 1 and the p95 (90..100)", first.Cost, last.Cost)
	}
}

// TestSettleConfig: what Settle cannot go with is refused at New.
func TestSettleConfig(t *testing.T) {
	p := algo.PerSecond(1).Burst(10)
	bad := map[string]Config{
		"two limits": {Limits: []Limit{{Name: "a", Policy: p}, {Name: "b", Policy: p}}},
		"delay":      {Limits: []Limit{{Policy: p}}, Delay: time.Second},
		"charge if":  {Limits: []Limit{{Policy: p}}, ChargeIf: func(int) bool { return true }},
		"quota":      {Limits: []Limit{{Policy: algo.Quota(10, algo.Day, 0)}}},
	}
	for name, c := range bad {
		c.Settle = "X-Tokens"
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := New(Config{Settle: "X", SettleTTL: algo.MaxHoldTTL + 1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("TTL above MaxHoldTTL: %v, want ErrInvalidConfig", err)
	}
	if _, err := New(Config{Limits: []Limit{{Policy: p}}, SettleTTL: time.Minute}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("SettleTTL without Settle: %v, want ErrInvalidConfig", err)
	}
}
