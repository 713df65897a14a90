package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
)

// get sends a request from 192.0.2.1 (as user, when not "") through h.
func get(h http.Handler, path, user string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "192.0.2.1:51000"
	if user != "" { // what the application's auth middleware does
		r = r.WithContext(httplimit.WithUser(r.Context(), user))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The article's API: /api limited to a burst of 100 and 2 per second,
// keyed by the authenticated user, else by IP.
func Example() {
	clk := clock.NewMock() // the real clock in production: leave Clock nil
	st, _ := memstore.New(memstore.Config{Clock: clk})
	mw, err := httplimit.New(httplimit.Config{
		Store:  st,
		Clock:  clk,
		Key:    httplimit.User(httplimit.IP),
		Limits: []httplimit.Limit{{Name: "burst", Policy: algo.PerSecond(2).Burst(100)}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/feed", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"ok":true}`)
	})
	api := mw.Handler(mux)

	codes := map[int]int{}
	for range 101 {
		codes[get(api, "/api/feed", "test-user").Code]++
	}
	fmt.Println("200:", codes[200], "429:", codes[429])

	w := get(api, "/api/feed", "test-user")
	fmt.Println(w.Code, w.Body.String())
	for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Policy", "RateLimit"} {
		fmt.Printf("%s: %s\n", h, w.Header().Get(h))
	}
	fmt.Println("anonymous, by IP:", get(api, "/api/feed", "").Code)
	// Output:
	// 200: 100 429: 1
	// 429 {"error":"rate_limited","retry_after_ms":500}
	//
	// Retry-After: 1
	// X-RateLimit-Limit: 100
	// X-RateLimit-Remaining: 0
	// RateLimit-Policy: "burst";q=100;w=50
	// RateLimit: "burst";r=0;t=50
	// anonymous, by IP: 200
}

// Per-route middleware: an upload costs 10 tokens, and login fails closed
// when the store is down.
func ExampleMiddleware_With() {
	st, _ := memstore.New(memstore.Config{Clock: clock.NewMock()})
	mw, _ := httplimit.New(httplimit.Config{Store: st, Limits: []httplimit.Limit{{Policy: algo.PerMinute(60).Burst(30)}}})
	upload, err := mw.With(httplimit.Config{Cost: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	login, _ := mw.With(httplimit.Config{Fail: httplimit.FailClosed(5 * time.Second)})

	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("POST /upload", upload.Handler(ok))
	mux.Handle("POST /login", login.Handler(ok))
	mux.Handle("GET /feed", mw.Handler(ok))

	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/upload", nil)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println("upload:", w.Code, "remaining", w.Header().Get("X-RateLimit-Remaining"))
	}
	_, err = mw.With(httplimit.Config{Cost: 31})
	fmt.Println(err)
	// Output:
	// upload: 200 remaining 20
	// upload: 200 remaining 10
	// upload: 200 remaining 0
	// httplimit: invalid configuration: cost 31 exceeds capacity 30 of limit "default": algo: cost exceeds capacity
}

// Tiers: one limit, a policy per tier. The tier comes from the request
// context, where the application's auth middleware puts it.
func ExampleResolveByTier() {
	type tierKey struct{}
	tiers, err := httplimit.ResolveByTier(map[string]algo.Policy{
		"":              algo.PerMinute(50).Burst(50), // anonymous
		"authenticated": algo.PerMinute(200).Burst(200),
		"paid":          algo.PerMinute(2000).Burst(2000),
	}, func(ctx context.Context) string { t, _ := ctx.Value(tierKey{}).(string); return t })
	if err != nil {
		log.Fatal(err)
	}
	st, _ := memstore.New(memstore.Config{Clock: clock.NewMock()})
	mw, _ := httplimit.New(httplimit.Config{
		Store:  st,
		Key:    httplimit.User(httplimit.IP),
		Limits: []httplimit.Limit{{Name: "minute", Resolve: tiers}},
	})
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tier := range []string{"", "authenticated", "paid"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tier != "" {
			r = r.WithContext(context.WithValue(httplimit.WithUser(context.Background(), "u1"), tierKey{}, tier))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%-13s %s\n", tier+":", w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// :             "minute";q=50;w=60
	// authenticated: "minute";q=200;w=60
	// paid:         "minute";q=2000;w=60
}

// Behind a reverse proxy, trust its network: X-Forwarded-For is then read
// from the right, and entries a client wrote are ignored.
func ExampleClientIP() {
	ips, _ := httplimit.NewClientIP(httplimit.IPConfig{TrustedProxies: []string{"10.0.0.0/8"}})

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.5:40000"                           // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.23") // forged, then real
	k, _ := ips.Key(r)
	fmt.Println(k.Class, k.ID)

	r.RemoteAddr = "203.0.113.9:40000" // not a proxy: the header is ignored
	k, _ = ips.Key(r)
	fmt.Println(k.Class, k.ID)

	r.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:40000" // IPv6: grouped by /64
	k, _ = ips.Key(r)
	fmt.Println(k.Class, k.ID)
	// Output:
	// ip 198.51.100.23
	// ip 203.0.113.9
	// ip 2001:db8:1:2::/64
}

// Config.Observer sees every decision as an Event of low-cardinality
// fields, ready to become metrics labels; here it counts outcomes per
// limit and key class.
func ExampleEvent() {
	var mu sync.Mutex
	counts := map[string]int{}
	obs := func(_ context.Context, e httplimit.Event) {
		mu.Lock()
		counts[e.Outcome.String()+" "+e.Limit+" "+e.Class]++
		mu.Unlock()
	}
	st, _ := memstore.New(memstore.Config{Clock: clock.NewMock()})
	mw, _ := httplimit.New(httplimit.Config{Store: st, Observer: obs,
		Limits: []httplimit.Limit{{Name: "burst", Policy: algo.PerMinute(10).Burst(3)}}})
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 5 {
		get(h, "/", "")
	}
	fmt.Println(counts)
	// Output:
	// map[allowed burst ip:3 denied burst ip:2]
}
