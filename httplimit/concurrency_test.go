package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// gate is a handler whose requests to /slow announce themselves on entered
// and then wait for a value on leave; other paths answer at once.
type gate struct {
	entered chan struct{}
	leave   chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), leave: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/slow" {
		g.entered <- struct{}{}
		<-g.leave
	}
	w.WriteHeader(http.StatusOK)
}

// path sends a request for p from the usual client through h.
func path(h http.Handler, p string) *httptest.ResponseRecorder {
	return do(h, "192.0.2.1:1234", func(r *http.Request) { r.URL.Path = p })
}

// hold starts n requests to /slow through h and returns once each is in
// the handler; their responses arrive on the channel returned as each is
// let go (a value on g.leave).
func hold(t *testing.T, h http.Handler, g *gate, n int) <-chan *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, n)
	for range n {
		go func() { done <- path(h, "/slow") }()
		<-g.entered
	}
	return done
}

// leaseKey returns the lease key of the usual client under m's limit.
func leaseKey(t *testing.T, m *Middleware) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	k, err := m.conc.keyOf(r)
	if err != nil {
		t.Fatal(err)
	}
	return m.conc.bucketKey(k.Class, bucketID(k.ID))
}

// held returns how many leases the client holds under m's limit: a probe
// acquires a lease and releases it at once.
func held(t *testing.T, m *Middleware) int64 {
	t.Helper()
	ctx := context.Background()
	l := m.store
	p := m.inflight.Policy()
	res, err := l.AcquireLease(ctx, leaseKey(t, m), p, "probe")
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed {
		if _, err := l.ReleaseLease(ctx, leaseKey(t, m), "probe"); err != nil {
			t.Fatal(err)
		}
		return p.Limit - res.Remaining - 1
	}
	return p.Limit
}

// leaseStores build the stores the lease tests run on: memstore, and
// redisstore on a real Redis server (its server clock).
var leaseStores = []struct {
	name  string
	store func(t *testing.T) store.Store
}{
	{"memstore", func(t *testing.T) store.Store { return newStore(t, newClock()) }},
	{"redis", func(t *testing.T) store.Store {
		s, err := redisstore.New(redistest.Start(t).Client(), redisstore.Config{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// TestConcurrencyHoldsN: with N = 3, three slow requests of a client hold
// their slots while their handlers run; a fourth is refused with 429,
// Retry-After and the JSON body, and no rate-limit header (no bucket was
// asked); once one slow request returns, the next is served. On memstore
// and on Redis (server clock), the requests synchronised by channels.
func TestConcurrencyHoldsN(t *testing.T) {
	const n = 3
	policy := algo.LeasePolicy{Limit: n, TTL: time.Minute}
	for _, tc := range leaseStores {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			m := newMW(t, Config{Store: tc.store(t), Concurrency: Concurrency{Policy: policy}})
			h := m.Handler(g)
			done := hold(t, h, g, n)
			if got := held(t, m); got != n {
				t.Fatalf("%d slow requests in their handlers hold %d leases", n, got)
			}
			w := path(h, "/fast")
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "60" {
				t.Fatalf("request %d: %d, Retry-After %q; want 429, 60", n+1, w.Code, w.Header().Get("Retry-After"))
			}
			if b := body(t, w); b["error"] != "rate_limited" || b["retry_after_ms"].(float64) > 60000 || b["retry_after_ms"].(float64) < 59000 {
				t.Fatalf("429 body %v", b)
			}
			for _, name := range []string{"X-Ratelimit-Limit", "Ratelimit", "Ratelimit-Policy"} {
				if v := w.Header().Get(name); v != "" {
					t.Fatalf("a concurrency refusal sent %s: %q", name, v)
				}
			}
			g.leave <- struct{}{}
			if w := <-done; w.Code != http.StatusOK {
				t.Fatalf("slow request: %d", w.Code)
			}
			if w := path(h, "/fast"); w.Code != http.StatusOK {
				t.Fatalf("after one slow request returned: %d, want 200", w.Code)
			}
			close(g.leave)
			for range n - 1 {
				if w := <-done; w.Code != http.StatusOK {
					t.Fatalf("slow request: %d", w.Code)
				}
			}
			if got := held(t, m); got != 0 {
				t.Fatalf("every request returned, %d leases still held", got)
			}
		})
	}
}

// TestConcurrencyReleasesOnPanic: a handler that panics gives its lease
// back as the panic unwinds through the middleware, on memstore and Redis.
func TestConcurrencyReleasesOnPanic(t *testing.T) {
	for _, tc := range leaseStores {
		t.Run(tc.name, func(t *testing.T) {
			m := newMW(t, Config{Store: tc.store(t), Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 1, TTL: time.Hour}}})
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/panic" {
					panic(http.ErrAbortHandler)
				}
			}))
			func() {
				defer func() {
					if v := recover(); v != http.ErrAbortHandler {
						t.Fatalf("recovered %v, want the handler's panic", v)
					}
				}()
				path(h, "/panic")
			}()
			if got := held(t, m); got != 0 {
				t.Fatalf("after the panic %d leases are held, want 0", got)
			}
			if w := path(h, "/ok"); w.Code != http.StatusOK {
				t.Fatalf("after the panic: %d, want 200", w.Code)
			}
		})
	}
}

// TestConcurrencyReleasesAfterCancel: a request whose context is canceled
// while its handler runs (the client hung up) still gives its lease back.
func TestConcurrencyReleasesAfterCancel(t *testing.T) {
	m := newMW(t, Config{Store: newStore(t, newClock()), Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 1, TTL: time.Hour}}})
	ctx, cancel := context.WithCancel(context.Background())
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { cancel() }))
	do(h, "192.0.2.1:1234", func(r *http.Request) { *r = *r.WithContext(ctx) })
	if got := held(t, m); got != 0 {
		t.Fatalf("after a canceled request %d leases are held, want 0", got)
	}
}

// TestConcurrencyChargesNothingWhenDenied: with a concurrency limit of 1
// and a bucket of 2 on one route, a request refused for concurrency
// charges no token, and a request the bucket refuses holds no lease.
func TestConcurrencyChargesNothingWhenDenied(t *testing.T) {
	g := newGate()
	var ev events
	bucket := algo.PerHour(1).Burst(2)
	m := newMW(t, Config{Store: newStore(t, newClock()), Observer: ev.Observe,
		Limits:      []Limit{{Name: "burst", Policy: bucket}},
		Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 1, TTL: time.Hour}}})
	h := m.Handler(g)
	tokens := func() int64 {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		keys, err := m.Keys(r)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.store.Take(context.Background(), store.Request{Key: keys[0], Policy: bucket, Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		return res.Remaining
	}
	done := hold(t, h, g, 1) // takes a token and the slot
	if w := path(h, "/fast"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request in flight: %d, want 429", w.Code)
	}
	if e := ev.last(t); e.Outcome != Denied || e.Limit != defaultConcurrencyName || e.Class != "ip" {
		t.Fatalf("event %+v, want denied by %q for class ip", e, defaultConcurrencyName)
	}
	if got := tokens(); got != 1 {
		t.Fatalf("after a concurrency refusal the bucket holds %d tokens, want 1: it was charged", got)
	}
	g.leave <- struct{}{}
	<-done
	if w := path(h, "/fast"); w.Code != http.StatusOK {
		t.Fatalf("third request: %d, want 200", w.Code)
	}
	w := path(h, "/fast") // the bucket is empty
	if w.Code != http.StatusTooManyRequests || w.Header().Get("X-Ratelimit-Remaining") != "0" {
		t.Fatalf("request on an empty bucket: %d, X-RateLimit-Remaining %q; want 429, 0", w.Code, w.Header().Get("X-Ratelimit-Remaining"))
	}
	if e := ev.last(t); e.Limit != "burst" {
		t.Fatalf("event %+v, want denied by burst", e)
	}
	if got := held(t, m); got != 0 {
		t.Fatalf("a request the bucket refused left %d leases held", got)
	}
}

// TestConcurrencyRetryAfter: Retry-After is the time until the earliest
// lease expires, rounded up to whole seconds and never 0, and a lease
// whose holder never returns frees its slot at its TTL.
func TestConcurrencyRetryAfter(t *testing.T) {
	clk := newClock()
	g := newGate()
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Denied: ProblemDenied,
		Concurrency: Concurrency{Name: "reports", Policy: algo.LeasePolicy{Limit: 1, TTL: 90 * time.Second}}})
	h := m.Handler(g)
	done := hold(t, h, g, 1)
	start := clk.Now() // the lease's: the clock stands still
	for _, tc := range []struct {
		at         time.Duration // since the lease
		retryAfter string
		ms         float64
	}{
		{0, "90", 90000},
		{89*time.Second + 500*time.Millisecond, "1", 500},
		{90*time.Second - time.Microsecond, "1", 1},
	} {
		clk.Set(start.Add(tc.at))
		w := path(h, "/fast")
		b := body(t, w)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != tc.retryAfter || b["retry_after_ms"] != tc.ms {
			t.Fatalf("at +%v: %d, Retry-After %q, body %v; want 429, %s, %v ms", tc.at, w.Code, w.Header().Get("Retry-After"), b, tc.retryAfter, tc.ms)
		}
		if v := b["violated-policies"].([]any); len(v) != 1 || v[0] != "reports" {
			t.Fatalf("violated-policies %v, want [reports]", v)
		}
	}
	clk.Set(start.Add(90 * time.Second))
	if w := path(h, "/fast"); w.Code != http.StatusOK {
		t.Fatalf("at the lease's expiry: %d, want 200: its slot is free", w.Code)
	}
	close(g.leave)
	<-done
}

// failLeaser keeps buckets in s and fails every lease call with err.
type failLeaser struct {
	store.Store
	err error
}

func (f failLeaser) AcquireLease(context.Context, string, algo.LeasePolicy, string) (algo.LeaseResult, error) {
	return algo.LeaseResult{}, f.err
}
func (f failLeaser) ReleaseLease(context.Context, string, string) (bool, error) { return false, f.err }
func (f failLeaser) RenewLease(context.Context, string, algo.LeasePolicy, string) (bool, error) {
	return false, f.err
}

// TestConcurrencyConfig: New and With refuse a Concurrency limit with a
// bad name or policy,
// and a Prefix with which a lease key could be too long.
func TestConcurrencyConfig(t *testing.T) {
	ok := Concurrency{Policy: algo.LeasePolicy{Limit: 2, TTL: time.Minute}}
	tests := []struct {
		name string
		cfg  Config
		want []error
		msg  string
	}{
		{"bad name", Config{Concurrency: Concurrency{Name: "in flight", Policy: ok.Policy}}, []error{ErrInvalidConfig}, "in flight"},
		{"ttl 0", Config{Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 2}}}, []error{ErrInvalidConfig, algo.ErrInvalidLeasePolicy}, ""},
		{"long prefix", Config{Prefix: strings.Repeat("p", 140), // the buckets' keys fit, not the leases'
			Concurrency: Concurrency{Name: strings.Repeat("n", 32), Policy: ok.Policy}}, []error{ErrInvalidConfig, store.ErrKeyTooLong}, "Concurrency"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Fatalf("New = %v, want an error matching %v", err, want)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("New = %v, want it to mention %q", err, tc.msg)
			}
		})
	}
}

// TestConcurrencyFailMode: a lease call that fails is a store failure: the
// route's FailMode serves the request (FailOpen) or refuses it with 503
// (FailClosed), never 429.
func TestConcurrencyFailMode(t *testing.T) {
	st := failLeaser{Store: newStore(t, newClock()), err: errDown}
	var ev events
	cfg := Config{Store: st, Observer: ev.Observe, Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 1, TTL: time.Minute}}}
	if w := path(newMW(t, cfg).Handler(ok), "/"); w.Code != http.StatusOK || ev.last(t).Outcome != FailedOpen || !errors.Is(ev.last(t).Err, errDown) {
		t.Fatalf("FailOpen: %d, event %+v; want 200, failed_open with the store's error", w.Code, ev.last(t))
	}
	cfg.Fail = FailClosed(2 * time.Second)
	if w := path(newMW(t, cfg).Handler(ok), "/"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("FailClosed: %d, Retry-After %q; want 503, 2", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestConcurrencyNoKey: a request the Concurrency limit's KeyFunc cannot
// key gets 400 and charges no bucket.
func TestConcurrencyNoKey(t *testing.T) {
	m := newMW(t, Config{Store: newStore(t, newClock()), Concurrency: Concurrency{Policy: algo.LeasePolicy{Limit: 1, TTL: time.Minute}, Key: User(nil)}})
	if w := path(m.Handler(ok), "/"); w.Code != http.StatusBadRequest {
		t.Fatalf("anonymous request: %d, want 400", w.Code)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	keys, _ := m.Keys(r)
	if res, err := m.store.Take(context.Background(), store.Request{Key: keys[0], Policy: defaultPolicy, Cost: 0}); err != nil || res.Remaining != defaultPolicy.Capacity() {
		t.Fatalf("bucket after the 400: %+v, %v; want full", res, err)
	}
}
