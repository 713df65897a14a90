package httplimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
)

// A client firing requests back to back at a route of 10 a second in
// bursts of 1 is slowed to that pace instead of refused: each request is
// held until its token exists (here, at most a second).
func ExampleConfig_delay() {
	mw, err := httplimit.New(httplimit.Config{
		Limits: []httplimit.Limit{{Policy: algo.PerSecond(10).Burst(1)}},
		Delay:  time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	start := time.Now()
	for range 5 {
		fmt.Print(get(h, "/api/feed", "").Code, ";")
	}
	fmt.Println()
	fmt.Println("at the policy's pace:", time.Since(start) >= 400*time.Millisecond)
	// Output:
	// 200;200;200;200;200;
	// at the policy's pace: true
}
