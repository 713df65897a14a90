package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// logRecords decodes the JSON log lines in buf.
func logRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

func TestFailModes(t *testing.T) {
	clk := newClock()
	var logs bytes.Buffer
	var ev events
	down := &errStore{err: fmt.Errorf("redisstore: %w", errDown)}
	feed := newMW(t, Config{Store: down, Clock: clk, Observer: ev.Observe, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	login, err := feed.With(Config{Fail: FailClosed(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++; ok(w, r) })

	t.Run("fail-open serves, without rate-limit headers", func(t *testing.T) {
		for range 50 {
			w := do(feed.Handler(next), "198.51.100.7:1")
			if w.Code != 200 || w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Remaining") != "" {
				t.Fatalf("%d %v", w.Code, w.Header())
			}
		}
		if served != 50 {
			t.Errorf("served %d of 50", served)
		}
		if e := ev.last(t); e.Outcome != FailedOpen || !errors.Is(e.Err, errDown) {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("fail-closed answers 503 with Retry-After, never 429", func(t *testing.T) {
		served = 0
		w := do(login.Handler(next), "198.51.100.7:1")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "2" || served != 0 {
			t.Errorf("%d, Retry-After %q, served %d", w.Code, w.Header().Get("Retry-After"), served)
		}
		if b := body(t, w); b["error"] != "rate_limiter_unavailable" || b["retry_after_ms"] != float64(1500) {
			t.Errorf("body %v", b)
		}
		if e := ev.last(t); e.Outcome != FailedClosed || !errors.Is(e.Err, errDown) {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("the log is rate-limited", func(t *testing.T) {
		recs := logRecords(t, &logs)
		if len(recs) != 1 || recs[0]["level"] != "ERROR" || !strings.Contains(recs[0]["error"].(string), "connection refused") {
			t.Fatalf("51 failures in one instant logged %d records: %v", len(recs), recs)
		}
		clk.Add(10 * time.Second)
		do(feed.Handler(next), "198.51.100.7:1")
		recs = logRecords(t, &logs)
		if len(recs) != 2 || recs[1]["suppressed"] != float64(50) {
			t.Errorf("after LogEvery: %d records, last %v; want 2 with suppressed=50", len(recs), recs[len(recs)-1])
		}
	})
	t.Run("a client that left is not logged", func(t *testing.T) {
		before := logs.Len()
		clk.Add(time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		do(feed.Handler(next), "198.51.100.7:1", func(r *http.Request) { *r = *r.WithContext(ctx) })
		if logs.Len() != before {
			t.Errorf("logged %q", logs.String()[before:])
		}
	})
}

// badInputStore fails as a store does on bad input: not an outage, so no
// fail mode applies and it is never served open.
type badInputStore struct{ store.Store } // nil: only Take is for use

func (badInputStore) Take(context.Context, store.Request) (algo.Result, error) {
	return algo.Result{}, fmt.Errorf("somestore: %w", algo.ErrInvalidPolicy)
}

func TestStoreInputErrorsAreNotOutages(t *testing.T) {
	var ev events
	h := newMW(t, Config{Store: badInputStore{}, Observer: ev.Observe, Logger: slog.New(slog.DiscardHandler)}).Handler(ok)
	if w := do(h, "198.51.100.7:1"); w.Code != 500 || ev.last(t).Outcome != Invalid {
		t.Errorf("%d, event %+v; want 500 and Invalid", w.Code, ev.last(t))
	}
}

// TestFallbackVerdict: a FailMode that decides with another store, as the
// hybrid local fallback does, gets its answer applied like the store's.
func TestFallbackVerdict(t *testing.T) {
	clk := newClock()
	local := newStore(t, clk)
	var ev events
	var seen []store.Request
	fallback := FailMode(func(f Failure) Verdict {
		seen = f.Takes
		mr, err := local.TakeMulti(f.Request.Context(), f.Takes)
		if err != nil {
			return Verdict{RetryAfter: time.Second}
		}
		return Verdict{Result: &mr}
	})
	h := newMW(t, Config{Store: &errStore{err: errDown}, Clock: clk, Observer: ev.Observe, Fail: fallback,
		Logger: slog.New(slog.DiscardHandler), Limits: twoLimits()}).Handler(ok)
	if got := admitted(h, 7, "198.51.100.7:1"); got != 5 {
		t.Errorf("fallback admitted %d of 7, want the burst of 5", got)
	}
	w := do(h, "198.51.100.7:1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || !strings.HasPrefix(w.Header().Get("RateLimit"), `"burst";r=0`) {
		t.Errorf("%d %v", w.Code, w.Header())
	}
	if e := ev.last(t); e.Outcome != Denied || !e.Fallback || !errors.Is(e.Err, errDown) {
		t.Errorf("event %+v", e)
	}
	if len(seen) != 2 || seen[0].Key != "h:burst:ip{198.51.100.7}" || seen[1].Policy != twoLimits()[1].Policy || seen[0].Cost != 1 {
		t.Errorf("Failure.Takes = %+v", seen)
	}

	// A Verdict whose Result does not match the takes is not applied.
	broken := FailMode(func(Failure) Verdict { return Verdict{Result: &store.MultiResult{}, Serve: true} })
	h = newMW(t, Config{Store: &errStore{err: errDown}, Fail: broken, Logger: slog.New(slog.DiscardHandler)}).Handler(ok)
	if w := do(h, "198.51.100.7:1"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("broken verdict: %d %v; want served open", w.Code, w.Header())
	}
}
