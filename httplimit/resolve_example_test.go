package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
)

// okHandler answers every request it is given.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, `{"ok":true}`) })

// Each tenant's plan, read at runtime through a cache: a request is
// limited by its tenant's plan, and one whose plan cannot be read goes to
// the route's FailMode (here 503), never to a default plan.
func ExampleResolver() {
	clk := clock.NewMock()
	st, _ := memstore.New(memstore.Config{Clock: clk})
	plans := map[string]ratebucket.Resolved{ // the plan database
		"acme":   {Policy: algo.PerMinute(60).Burst(2), Name: "free"},
		"globex": {Policy: algo.PerMinute(600).Burst(50), Name: "pro"},
	}
	tenantPlan := func(_ context.Context, tenant string) (ratebucket.Resolved, error) {
		if p, ok := plans[tenant]; ok {
			return p, nil
		}
		return ratebucket.Resolved{}, errors.New("no such tenant")
	}
	cache, _ := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: time.Minute, Clock: clk}) // a plan change is seen within a minute
	mw, err := httplimit.New(httplimit.Config{
		Store:  st,
		Clock:  clk,
		Key:    httplimit.User(nil),
		Fail:   httplimit.FailClosed(time.Second),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: []httplimit.Limit{{Name: "api", Resolve: cache}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	api := mw.Handler(okHandler)
	for _, tenant := range []string{"acme", "acme", "acme", "globex", "initech"} {
		w := get(api, "/api/feed", tenant)
		fmt.Println(tenant, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// acme 200 "api";r=1;t=1
	// acme 200 "api";r=0;t=2
	// acme 429 "api";r=0;t=2
	// globex 200 "api";r=49;t=1
	// initech 503
}
