package httplimit_test

import (
	"context"
	"fmt"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
)

// A new limit rolled out in shadow beside the enforced one: it is charged
// and reported (Event.ShadowDenied, and shadow_denied to the store's
// Observer), but never refuses; with ShadowHeaders clients see it coming
// in the draft fields.
func ExampleLimit_shadow() {
	clk := clock.NewMock()
	st, _ := memstore.New(memstore.Config{Clock: clk})
	mw, err := httplimit.New(httplimit.Config{
		Store:   st,
		Clock:   clk,
		Headers: httplimit.ShadowHeaders,
		Limits: []httplimit.Limit{
			{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
			{Name: "hourly", Policy: algo.PerHour(2).Burst(2), Shadow: true},
		},
		Observer: func(_ context.Context, e httplimit.Event) {
			fmt.Printf("%s shadow-denied=%q ", e.Outcome, e.ShadowDenied)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	api := mw.Handler(okHandler)
	for range 3 {
		w := get(api, "/api/feed", "alice")
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// allowed shadow-denied="" 200 "burst";r=99;t=1, "hourly";r=1;t=1800
	// allowed shadow-denied="" 200 "burst";r=98;t=1, "hourly";r=0;t=3600
	// allowed shadow-denied="hourly" 200 "burst";r=97;t=2, "hourly";r=0;t=3600
}
