package hybrid_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestHTTPLimitModesPerRoute shows the three modes chosen per route by
// composition while the shared store is down: /api/feed's middleware uses a
// hybrid.Fallback, so it keeps limiting from the local store (5 served,
// then 429); /login uses the shared store with httplimit's FailClosed
// (503); /public uses it with httplimit's default FailOpen (served,
// unlimited). When the store comes back, /api/feed is limited by it again.
func TestHTTPLimitModesPerRoute(t *testing.T) {
	clk := storetest.NewClock()
	shared := &flaky{Store: newMem(t, clk)}
	p := algo.PerMinute(1).Burst(5)
	quiet := slog.New(slog.DiscardHandler)
	fb, err := hybrid.NewFallback(shared, newMem(t, clk), hybrid.FallbackConfig{Clock: clk, Timeout: unhurried, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	route := func(prefix string, s store.Store, fail httplimit.FailMode) http.Handler {
		mw, err := httplimit.New(httplimit.Config{Store: s, Prefix: prefix, Fail: fail, Clock: clk, Logger: quiet,
			Limits: []httplimit.Limit{{Policy: p}}})
		if err != nil {
			t.Fatal(err)
		}
		return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) }))
	}
	mux := http.NewServeMux()
	mux.Handle("/api/feed", route("feed:", fb, nil))
	mux.Handle("/login", route("login:", shared, httplimit.FailClosed(time.Second)))
	mux.Handle("/public", route("public:", shared, httplimit.FailOpen))
	get := func(path string) int {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	counts := func(path string, n int) map[int]int {
		c := map[int]int{}
		for range n {
			c[get(path)]++
		}
		return c
	}

	shared.set(true, false)
	tests := []struct {
		path string
		want map[int]int
	}{
		{"/api/feed", map[int]int{200: 5, 429: 5}},
		{"/login", map[int]int{503: 10}},
		{"/public", map[int]int{200: 10}},
	}
	for _, tc := range tests {
		if got := counts(tc.path, 10); !equal(got, tc.want) {
			t.Errorf("store down: %s answered %v, want %v", tc.path, got, tc.want)
		}
	}
	if fb.State() != observe.BreakerOpen {
		t.Errorf("feed's breaker %v, want open", fb.State())
	}

	shared.set(false, false)
	clk.Add(hybrid.DefaultCoolDown)
	// The shared bucket of /api/feed was never charged: 5 more, from it.
	if got, want := counts("/api/feed", 10), map[int]int{200: 5, 429: 5}; !equal(got, want) || fb.State() != observe.BreakerClosed {
		t.Errorf("store back: /api/feed answered %v, want %v; breaker %v", got, want, fb.State())
	}
	if got := get("/login"); got != 200 {
		t.Errorf("store back: /login answered %d", got)
	}
}

func equal(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHTTPLimitRefundsThroughDenyCache: a login route of one failure an
// hour, charging only 401s, over a DenyCache over a Fallback. Each
// successful login's take empties the bucket and its refund fills it
// again, so the next login is served. A failure stays charged, and the
// next attempt is denied by the store: the route's takes are marked
// refundable, so the cache neither learns from them nor answers them
// (another instance's refund could make its entry stale), and keeps no
// entry.
func TestHTTPLimitRefundsThroughDenyCache(t *testing.T) {
	clk := storetest.NewClock()
	primary := newMem(t, clk)
	cache := newCache(t, primary, hybrid.DenyCacheConfig{Clock: clk})
	fb, err := hybrid.NewFallback(cache, newMem(t, clk), hybrid.FallbackConfig{Clock: clk, Timeout: unhurried, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Store: fb, Clock: clk, Limits: []httplimit.Limit{{Policy: algo.PerHour(1).Burst(1)}},
		ChargeIf: func(status int) bool { return status == http.StatusUnauthorized }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	login := func(password string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login?password="+password, nil))
		return w.Code
	}
	for i := range 5 {
		if code := login("right"); code != http.StatusOK {
			t.Fatalf("login %d: %d, want 200", i, code)
		}
	}
	if code := login("wrong"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d, want 401", code)
	}
	if code := login("right"); code != http.StatusTooManyRequests || cache.Stats().Denied != 0 || cache.Stats().Entries != 0 {
		t.Fatalf("after a failure: %d, cache %+v; want 429 from the store, and no entry", code, cache.Stats())
	}
}

// TestHTTPLimitChargeIfFleet: two instances of a login route that counts
// only failures (ChargeIf 401/403), each with its own DenyCache over one
// shared store. A success on instance B, admitted before instance A saw
// the bucket empty, gives its token back when its handler returns: A's
// next request is admitted at once, not denied from a stale entry,
// because the route's takes are marked Request.Refundable and the cache
// keeps no entry for them.
func TestHTTPLimitChargeIfFleet(t *testing.T) {
	clk := storetest.NewClock()
	shared := newMem(t, clk)
	p := algo.PerHour(1).Burst(2)
	hold := make(chan struct{})
	instance := func() (*hybrid.DenyCache, http.Handler) {
		c := newCache(t, shared, hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
		mw, err := httplimit.New(httplimit.Config{Store: c, Clock: clk, Logger: slog.New(slog.DiscardHandler),
			Limits:   []httplimit.Limit{{Name: "login", Policy: p}},
			Key:      func(*http.Request) (httplimit.Key, error) { return httplimit.Key{Class: "user", ID: "alice"}, nil },
			ChargeIf: func(status int) bool { return status == http.StatusUnauthorized || status == http.StatusForbidden },
		})
		if err != nil {
			t.Fatal(err)
		}
		return c, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Query().Get("pw") {
			case "slow":
				<-hold // a success that takes its time
			case "right":
			default:
				w.WriteHeader(http.StatusUnauthorized)
			}
		}))
	}
	cacheA, a := instance()
	_, b := instance()
	login := func(h http.Handler, pw string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/login?pw="+pw, nil))
		return w.Code
	}
	done := make(chan int)
	go func() { done <- login(b, "slow") }() // admitted on B: one token left
	for shared.Len() == 0 {
		time.Sleep(time.Millisecond) // until B's take is in the store
	}
	for i, want := range []int{http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		if got := login(a, "wrong"); got != want {
			t.Fatalf("attempt %d on A: %d, want %d", i, got, want)
		}
	}
	close(hold)
	if got := <-done; got != http.StatusOK {
		t.Fatalf("success on B: %d", got)
	}
	// B's success gave its token back, within the hour A's last answer
	// said the bucket would stay empty.
	if got := login(a, "right"); got != http.StatusOK {
		t.Fatalf("A after B's refund: %d, want 200: the refund made on B is seen on A", got)
	}
	if st := cacheA.Stats(); st.Entries != 0 || st.Denied != 0 {
		t.Fatalf("A's cache %+v: want no entry and no local denial on a ChargeIf route", st)
	}
}
