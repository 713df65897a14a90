package httplimit_test

import (
	"context"
	"net/http"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
)

// The Examples in this file hold the package doc's fragments and those of
// the docs pages verbatim, so that they compile; they serve a real port or
// wait for requests, so they are compiled but not run. The Examples beside
// them with output show the same features at work.

// The zero Config: each client IP gets a burst of 100 and 2 requests per
// second, in an in-process store, on every route of mux.
func ExampleNew_zeroConfig() {
	mux := http.NewServeMux()
	mux.Handle("GET /api/feed", okHandler)

	mw, err := httplimit.New(httplimit.Config{})
	http.ListenAndServe(":8080", mw.Handler(mux))

	_ = err
}

// A tenant's plan decides its policy, read through a cache whose TTL is how
// stale a plan change may be.
func ExampleResolver_cache() {
	tenantPlan := func(ctx context.Context, tenant string) (ratebucket.Resolved, error) {
		return ratebucket.Resolved{Policy: algo.PerMinute(600).Burst(50), Name: "pro"}, nil // from the plan database
	}

	plans, _ := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: time.Minute})
	mw, _ := httplimit.New(httplimit.Config{Key: httplimit.User(nil),
		Limits: []httplimit.Limit{{Name: "api", Resolve: plans}}})

	http.ListenAndServe(":8080", mw.Handler(okHandler))
}

// At most two reports of one client in flight.
func ExampleConcurrency_route() {
	mw, _ := httplimit.New(httplimit.Config{})
	mux := http.NewServeMux()
	buildReport := okHandler

	reports, _ := mw.With(httplimit.Config{Concurrency: httplimit.Concurrency{
		Policy: algo.LeasePolicy{Limit: 2, TTL: 5 * time.Minute},
	}})
	mux.Handle("POST /api/report", reports.Handler(buildReport))

	http.ListenAndServe(":8080", mux)
}

// Charging by outcome: only failed logins count, and uploads the server
// failed are refunded. A route whose bursts are held instead of refused.
func ExampleConfig_chargeIfRoutes() {
	mw, _ := httplimit.New(httplimit.Config{})

	login, _ := mw.With(httplimit.Config{ChargeIf: func(status int) bool { return status == 401 || status == 403 }})
	upload, _ := mw.With(httplimit.Config{Cost: 10, ChargeIf: func(status int) bool { return status < 500 }})

	feed, _ := mw.With(httplimit.Config{Delay: 2 * time.Second})

	mux := http.NewServeMux()
	mux.Handle("POST /login", login.Handler(okHandler))
	mux.Handle("POST /upload", upload.Handler(okHandler))
	mux.Handle("GET /feed", feed.Handler(okHandler))
	http.ListenAndServe(":8080", mux)
}

// A new hourly limit rolled out in shadow beside the enforced burst limit.
func ExampleLimit_shadowRollout() {
	mw, _ := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{
		{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
		{Name: "hourly", Policy: algo.PerHour(1000).Burst(1000), Shadow: true},
	}})

	http.ListenAndServe(":8080", mw.Handler(okHandler))
}

// A daily quota beside a burst limit, on one route.
func ExampleLimit_daily() {
	mw, _ := httplimit.New(httplimit.Config{})

	api, err := mw.With(httplimit.Config{Limits: []httplimit.Limit{
		{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
		{Name: "daily", Policy: algo.Quota(1000, algo.Day, 0)},
	}}) // RateLimit-Policy: "burst";q=100;w=50, "daily";q=1000;w=86400

	if err == nil {
		http.ListenAndServe(":8080", api.Handler(okHandler))
	}
}
