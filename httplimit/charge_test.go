package httplimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// refundStore is a memstore that counts the refunds it is asked for; with
// down set its takes fail (the store is unreachable), and with err set
// its refunds do.
type refundStore struct {
	*memstore.Store
	down          atomic.Bool
	single, multi atomic.Int64
	mu            sync.Mutex
	err           error
}

func newRefundStore(t *testing.T) *refundStore {
	return &refundStore{Store: newStore(t, newClock())}
}

func (s *refundStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if s.down.Load() {
		return algo.Result{}, errDown
	}
	return s.Store.Take(ctx, req)
}

func (s *refundStore) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	if s.down.Load() {
		return store.MultiResult{}, errDown
	}
	return s.Store.TakeMulti(ctx, reqs)
}

func (s *refundStore) failRefunds(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *refundStore) refundErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *refundStore) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	s.single.Add(1)
	if err := s.refundErr(); err != nil {
		return algo.Result{}, err
	}
	return s.Store.Refund(ctx, req)
}

func (s *refundStore) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	s.multi.Add(1)
	if err := s.refundErr(); err != nil {
		return nil, err
	}
	return s.Store.RefundMulti(ctx, reqs)
}

// refunds returns the Refund and RefundMulti calls made so far.
func (s *refundStore) refunds() (single, multi int64) { return s.single.Load(), s.multi.Load() }

// statusHandler answers with the status in the query's "status" (none:
// it writes nothing at all).
var statusHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if s := r.URL.Query().Get("status"); s != "" {
		code, _ := strconv.Atoi(s)
		w.WriteHeader(code)
	}
})

// status sends a request from the usual client asking h for a status
// ("" for none).
func status(h http.Handler, code string) *httptest.ResponseRecorder {
	return do(h, "192.0.2.1:1234", func(r *http.Request) { r.URL.RawQuery = "status=" + code })
}

// remaining peeks at each of the usual client's buckets under m.
func remaining(t *testing.T, m *Middleware) []int64 {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
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

// notServerError spares clients the server's failures.
func notServerError(status int) bool { return status < 500 }

// TestChargeIfByStatus: with ChargeIf sparing 5xx, each response's status
// decides whether its request stays charged: a handler that writes
// nothing counts as 200, a write without WriteHeader too, an informational
// 103 is followed by the final status, and a flush sends 200 whatever is
// written after it.
func TestChargeIfByStatus(t *testing.T) {
	tests := []struct {
		name    string
		h       http.HandlerFunc
		charged bool
	}{
		{"200", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }, true},
		{"404", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, true},
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, false},
		{"503 twice", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503); w.WriteHeader(200) }, false},
		{"nothing written", func(w http.ResponseWriter, r *http.Request) {}, true},
		{"body only", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, true},
		{"ReadFrom", func(w http.ResponseWriter, r *http.Request) {
			w.(io.ReaderFrom).ReadFrom(strings.NewReader("ok"))
		}, true},
		{"103 then 502", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(103); w.WriteHeader(502) }, false},
		{"flushed then 500", func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			w.WriteHeader(500)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newRefundStore(t)
			m := newMW(t, Config{Store: s, Limits: []Limit{{Policy: algo.PerHour(1).Burst(3)}}, ChargeIf: notServerError})
			do(m.Handler(tc.h), "192.0.2.1:1234")
			want, calls := int64(3), int64(1)
			if tc.charged {
				want, calls = 2, 0
			}
			if got := remaining(t, m); got[0] != want {
				t.Errorf("%d tokens left, want %d", got[0], want)
			}
			if single, multi := s.refunds(); single != calls || multi != 0 {
				t.Errorf("%d Refund and %d RefundMulti calls, want %d and 0", single, multi, calls)
			}
		})
	}
}

// TestChargeIfFailedLogins: counting only 401 and 403, a client logs in
// successfully as often as it likes, and is refused after three failures;
// on memstore and on Redis.
func TestChargeIfFailedLogins(t *testing.T) {
	for _, tc := range leaseStores {
		t.Run(tc.name, func(t *testing.T) {
			m := newMW(t, Config{Store: tc.store(t), Limits: []Limit{{Policy: algo.PerHour(3).Burst(3)}},
				ChargeIf: func(status int) bool { return status == 401 || status == 403 }})
			h := m.Handler(statusHandler)
			for i := range 10 {
				if w := status(h, "200"); w.Code != 200 {
					t.Fatalf("login %d: %d", i, w.Code)
				}
			}
			for i, want := range []int{401, 403, 401, 429} {
				if w := status(h, strconv.Itoa(want)); w.Code != want {
					t.Fatalf("failure %d: %d, want %d", i, w.Code, want)
				}
			}
			if w := status(h, "200"); w.Code != 429 {
				t.Fatalf("a good password after three failures: %d, want 429", w.Code)
			}
		})
	}
}

// TestChargeIfMultiLimit: a request under two limits gets both back in
// one RefundMulti, atomically (on memstore and on Redis); on a store that
// cannot take the keys together (store.ErrNotTogether) they come back one
// at a time.
func TestChargeIfMultiLimit(t *testing.T) {
	limits := []Limit{{Name: "burst", Policy: algo.PerHour(3).Burst(3)}, {Name: "day", Policy: algo.PerDay(10).Burst(10)}}
	never := func(int) bool { return false }
	t.Run("together", func(t *testing.T) {
		s := newRefundStore(t)
		m := newMW(t, Config{Store: s, Limits: limits, ChargeIf: never})
		for range 5 {
			if w := status(m.Handler(statusHandler), "500"); w.Code != 500 {
				t.Fatalf("code %d, want the handler's 500", w.Code)
			}
		}
		if got := remaining(t, m); got[0] != 3 || got[1] != 10 {
			t.Fatalf("remaining %v, want both buckets full", got)
		}
		if single, multi := s.refunds(); single != 0 || multi != 5 {
			t.Fatalf("%d Refund and %d RefundMulti calls, want 0 and 5", single, multi)
		}
	})
	t.Run("redis", func(t *testing.T) {
		m := newMW(t, Config{Store: leaseStores[1].store(t), Limits: limits, ChargeIf: never})
		for range 5 {
			status(m.Handler(statusHandler), "500")
		}
		if got := remaining(t, m); got[0] != 3 || got[1] != 10 {
			t.Fatalf("remaining %v, want both buckets full", got)
		}
	})
	t.Run("not together", func(t *testing.T) {
		s := &apartStore{newRefundStore(t)}
		m := newMW(t, Config{Store: s, Limits: limits, ChargeIf: never})
		for range 5 {
			status(m.Handler(statusHandler), "500")
		}
		if got := remaining(t, m); got[0] != 3 || got[1] != 10 {
			t.Fatalf("remaining %v, want both buckets full", got)
		}
		if single, multi := s.refunds(); single != 10 || multi != 5 {
			t.Fatalf("%d Refund and %d RefundMulti calls, want 10 and 5", single, multi)
		}
	})
}

// apartStore keeps no two keys together, as redisstore on a Cluster with
// keys in different slots: its multi-key calls fail with ErrNotTogether.
type apartStore struct{ *refundStore }

func (s *apartStore) TakeMulti(context.Context, []store.Request) (store.MultiResult, error) {
	return store.MultiResult{}, store.ErrNotTogether
}

func (s *apartStore) RefundMulti(context.Context, []store.Request) ([]algo.Result, error) {
	s.multi.Add(1)
	return nil, store.ErrNotTogether
}

// TestChargeIfNoRefund: only a charge the middleware made on its store is
// given back. A refused request, one skipped, one served while the store
// fails, one decided by the FailMode's own store, and one whose handler
// panics make no refund call, though ChargeIf counts none of them.
func TestChargeIfNoRefund(t *testing.T) {
	never := func(int) bool { return false }
	policy := algo.PerHour(1).Burst(1)
	fallback := FailMode(func(f Failure) Verdict {
		return Verdict{Result: &store.MultiResult{Allowed: true, Results: []algo.Result{{Allowed: true}}, Denied: -1}}
	})
	tests := []struct {
		name  string
		cfg   Config
		setup func(t *testing.T, s *refundStore, h http.Handler)
		code  int
	}{
		{"denied", Config{}, func(t *testing.T, s *refundStore, h http.Handler) {
			s.Store.Take(context.Background(), store.Request{Key: "h:default:ip{192.0.2.1}", Policy: policy, Cost: 1})
		}, 429},
		{"skipped", Config{Skip: func(*http.Request) bool { return true }}, nil, 500},
		{"failed open", Config{}, func(t *testing.T, s *refundStore, h http.Handler) { s.down.Store(true) }, 500},
		{"fallback verdict", Config{Fail: fallback}, func(t *testing.T, s *refundStore, h http.Handler) { s.down.Store(true) }, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newRefundStore(t)
			cfg := tc.cfg
			cfg.Store, cfg.Limits, cfg.ChargeIf = s, []Limit{{Policy: policy}}, never
			h := newMW(t, cfg).Handler(statusHandler)
			if tc.setup != nil {
				tc.setup(t, s, h)
			}
			if w := status(h, "500"); w.Code != tc.code {
				t.Fatalf("code %d, want %d", w.Code, tc.code)
			}
			if single, multi := s.refunds(); single+multi != 0 {
				t.Fatalf("%d refund calls, want none", single+multi)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		s := newRefundStore(t)
		m := newMW(t, Config{Store: s, Limits: []Limit{{Policy: policy}}, ChargeIf: never})
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
		func() {
			defer func() {
				if v := recover(); v != http.ErrAbortHandler {
					t.Fatalf("recovered %v, want the handler's own panic", v)
				}
			}()
			do(h, "192.0.2.1:1234")
		}()
		if single, multi := s.refunds(); single+multi != 0 || remaining(t, m)[0] != 0 {
			t.Fatalf("%d refund calls, %v left: want the charge to stand", single+multi, remaining(t, m))
		}
	})
}

// TestChargeIfRefundFails: a refund that fails leaves the handler's
// response as it was, is reported to the Observer after the request's
// Allowed event, and is logged once per LogEvery.
func TestChargeIfRefundFails(t *testing.T) {
	s := newRefundStore(t)
	s.failRefunds(errDown)
	var ev events
	var logs bytes.Buffer
	m := newMW(t, Config{Store: s, Limits: []Limit{{Policy: algo.PerHour(5).Burst(5)}}, ChargeIf: notServerError,
		Observer: ev.Observe, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: newClock()})
	h := m.Handler(statusHandler)
	for range 2 {
		if w := status(h, "502"); w.Code != 502 {
			t.Fatalf("code %d, want the handler's 502", w.Code)
		}
	}
	if len(ev.ev) != 4 || ev.ev[0].Outcome != Allowed || ev.ev[1].Outcome != Refunded || !errors.Is(ev.ev[1].Err, errDown) {
		t.Fatalf("events %+v, want Allowed then Refunded with the store's error, twice", ev.ev)
	}
	if ev.ev[1].Limit != "default" || ev.ev[1].Class != "ip" || ev.ev[1].Cost != 1 {
		t.Fatalf("refund event %+v: want the request's limit, class and cost", ev.ev[1])
	}
	if n := strings.Count(logs.String(), "refund failed"); n != 1 {
		t.Fatalf("%d log records in one LogEvery, want 1:\n%s", n, logs.String())
	}
	if got := remaining(t, m)[0]; got != 3 {
		t.Fatalf("%d tokens left, want 3: failed refunds leave the charges", got)
	}
	s.failRefunds(nil)
	status(h, "502")
	if got := ev.last(t); got.Outcome != Refunded || got.Err != nil {
		t.Fatalf("last event %+v, want a refund without error", got)
	}
}

// TestChargeIfResponseController: through a real server, the handler of
// a route charged by outcome still reaches the connection with
// http.ResponseController (a write deadline, flushing) and can hijack it;
// a hijacked connection keeps its charge.
func TestChargeIfResponseController(t *testing.T) {
	s := newRefundStore(t)
	m := newMW(t, Config{Store: s, Limits: []Limit{{Policy: algo.PerHour(5).Burst(5)}}, ChargeIf: func(int) bool { return false }})
	errs := make(chan error, 2) // each handler's, after its response
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hijack" {
			c, rw, err := w.(http.Hijacker).Hijack()
			if err == nil {
				rw.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
				err = errors.Join(rw.Flush(), c.Close())
			}
			errs <- err
			return
		}
		rc := http.NewResponseController(w)
		errs <- errors.Join(rc.SetWriteDeadline(time.Now().Add(time.Minute)), rc.Flush())
		io.WriteString(w, "streamed")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	for _, p := range []string{"/stream", "/hijack"} {
		resp, err := client.Get(srv.URL + p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err := <-errs; err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	// The stream was refunded, the hijacked connection stays charged.
	if single, _ := s.refunds(); single != 1 {
		t.Fatalf("%d refunds, want 1", single)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:1"
	keys, err := m.Keys(r)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Store.Take(context.Background(), store.Request{Key: keys[0], Policy: algo.PerHour(5).Burst(5), Cost: 0}); err != nil || res.Remaining != 4 {
		t.Fatalf("%+v, %v: want 4 left, the hijack's charge", res, err)
	}
}
