package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// newClock returns a manual clock at a whole second plus 250ms, so reset
// times exercise rounding.
func newClock() *storetest.Clock {
	c := storetest.NewClock()
	c.Add(250 * time.Millisecond)
	return c
}

// newStore returns a memstore on clk.
func newStore(t testing.TB, clk store.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// errStore fails every call with err. It is a store whose backend is down,
// not a mock of any backend.
type errStore struct {
	store.Store // nil: only Take is for use
	err         error
	calls       atomic.Int64
}

func (s *errStore) Take(context.Context, store.Request) (algo.Result, error) {
	s.calls.Add(1)
	return algo.Result{}, s.err
}

func (s *errStore) TakeMulti(context.Context, []store.Request) (store.MultiResult, error) {
	s.calls.Add(1)
	return store.MultiResult{}, s.err
}

// countingStore counts the calls to a store.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, req)
}

// crossSlot is a store whose TakeMulti always reports keys in different
// Cluster slots, as redisstore on a Cluster does: it exercises the
// in-order fallback.
type crossSlot struct{ store.Store }

func (crossSlot) TakeMulti(context.Context, []store.Request) (store.MultiResult, error) {
	return store.MultiResult{}, store.ErrNotTogether
}

// ok is the handler behind the middleware in tests.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}` + "\n"))
})

// newMW builds a middleware, and with a route Config its route's, or
// fails the test.
func newMW(t *testing.T, cfg Config, route ...Config) *Middleware {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, r := range route {
		if m, err = m.With(r); err != nil {
			t.Fatalf("With: %v", err)
		}
	}
	return m
}

// do sends one request from remote through h and returns the response.
func do(h http.Handler, remote string, edit ...func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/api/feed", nil)
	r.RemoteAddr = remote
	for _, e := range edit {
		e(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// asUser puts an authenticated user (and tier) in the request's context,
// as the application's auth middleware would.
func asUser(id, tier string) func(*http.Request) {
	return func(r *http.Request) {
		ctx := WithUser(r.Context(), id)
		if tier != "" {
			ctx = context.WithValue(ctx, tierCtx{}, tier)
		}
		*r = *r.WithContext(ctx)
	}
}

// tierCtx is the context key of the tests' tiers, as an application's
// auth middleware keeps its own.
type tierCtx struct{}

// tierOf returns the tier asUser put in a request's context ctx, "" for
// none.
func tierOf(ctx context.Context) string {
	t, _ := ctx.Value(tierCtx{}).(string)
	return t
}

// byTier is ResolveByTier over tierOf, for tests whose tiers are valid.
func byTier(t testing.TB, tiers map[string]algo.Policy) Resolver {
	t.Helper()
	res, err := ResolveByTier(tiers, tierOf)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// body decodes a JSON response body.
func body(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return v
}

// events collects Observer events.
type events struct {
	mu sync.Mutex
	ev []Event
}

func (e *events) Observe(_ context.Context, ev Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) last(t *testing.T) Event {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ev) == 0 {
		t.Fatal("no event observed")
	}
	return e.ev[len(e.ev)-1]
}

var errDown = errors.New("connection refused")
