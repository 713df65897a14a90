package httplimit_test

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
)

// A burst limit and a daily calendar quota on one route: RateLimit-Policy
// lists both, and X-RateLimit-* and Retry-After describe the one closest
// to denying, here the quota, which resets at midnight UTC.
func ExampleLimit_quota() {
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC))
	st, _ := memstore.New(memstore.Config{Clock: clk})
	mw, err := httplimit.New(httplimit.Config{
		Store: st,
		Clock: clk,
		Key:   httplimit.User(nil),
		Limits: []httplimit.Limit{
			{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
			{Name: "daily", Policy: algo.Quota(3, algo.Day, 0)},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	api := mw.Handler(okHandler)
	w := get(api, "/api/feed", "alice")
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	for range 3 {
		w = get(api, "/api/feed", "alice")
		fmt.Printf("%d %s | X-RateLimit-Remaining: %s, Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"),
			w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// RateLimit-Policy: "burst";q=100;w=50, "daily";q=3;w=86400
	// 200 "burst";r=98;t=1, "daily";r=1;t=21600 | X-RateLimit-Remaining: 1, Retry-After: ""
	// 200 "burst";r=97;t=2, "daily";r=0;t=21600 | X-RateLimit-Remaining: 0, Retry-After: ""
	// 429 "burst";r=97;t=2, "daily";r=0;t=21600 | X-RateLimit-Remaining: 0, Retry-After: "21600"
}
