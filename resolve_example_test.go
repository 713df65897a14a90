package ratebucket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// A Resolver reads each tenant's plan at runtime; a ResolverCache keeps
// the answers for its TTL, so the plan database is asked once per tenant
// per TTL, and a plan change is seen within TTL. An unknown tenant is an
// error wrapping ErrResolve, never a default plan.
func ExampleResolverCache() {
	clk := storetest.NewClock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	plan := map[string]string{"acme": "free", "globex": "pro"} // the tenants' database
	policies := map[string]algo.Policy{"free": algo.PerMinute(60).Burst(2), "pro": algo.PerMinute(600).Burst(5)}
	queries := 0
	tenantPlan := func(_ context.Context, tenant string) (ratebucket.Resolved, error) {
		queries++
		name, ok := plan[tenant]
		if !ok {
			return ratebucket.Resolved{}, errors.New("unknown tenant")
		}
		return ratebucket.Resolved{Policy: policies[name], Name: name}, nil
	}
	plans, err := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: 30 * time.Second, Clock: clk})
	if err != nil {
		panic(err)
	}
	lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Prefix: "api:", Resolver: plans.Resolve})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		res, _ := lim.Allow(ctx, tenant)
		fmt.Printf("%s: allowed=%v remaining=%d of %d\n", tenant, res.Allowed, res.Remaining, policies[plan[tenant]].Capacity())
	}
	_, err = lim.Allow(ctx, "initech")
	fmt.Println("initech:", errors.Is(err, ratebucket.ErrResolve), err)
	fmt.Println("plan queries:", queries)
	// Output:
	// acme: allowed=true remaining=1 of 2
	// acme: allowed=true remaining=0 of 2
	// acme: allowed=false remaining=0 of 2
	// globex: allowed=true remaining=4 of 5
	// initech: true ratebucket: cannot resolve the policy: key "initech": unknown tenant
	// plan queries: 3
}

// A shadow limiter rolls out a new limit safely: it charges its own bucket
// as if it were enforced and reports its refusals to the observers as
// shadow_denied, but the caller is never refused; a positive RetryAfter
// on an allowed Result says the limit would have refused.
func ExampleLimiter_shadow() {
	ms, err := memstore.New(memstore.Config{Clock: storetest.NewClock()})
	if err != nil {
		panic(err)
	}
	defer ms.Close()
	printer := observe.Funcs{Decision: func(_ context.Context, d observe.Decision) {
		fmt.Printf("  observer: %s policy=%s\n", d.Outcome, d.Policy)
	}}
	s := observe.Wrap(ms, "memory", printer)
	lim, err := ratebucket.NewLimiter(s, algo.PerMinute(1).Burst(2), ratebucket.Config{Prefix: "exports:", Shadow: true})
	if err != nil {
		panic(err)
	}
	ctx := observe.WithLabels(context.Background(), observe.Labels{Policy: "exports"})
	for range 3 {
		res, _ := lim.Allow(ctx, "alice")
		fmt.Printf("allowed=%v would-refuse=%v remaining=%d\n", res.Allowed, res.RetryAfter > 0, res.Remaining)
	}
	// Output:
	//   observer: allowed policy=exports
	// allowed=true would-refuse=false remaining=1
	//   observer: allowed policy=exports
	// allowed=true would-refuse=false remaining=0
	//   observer: shadow_denied policy=exports
	// allowed=true would-refuse=true remaining=0
}
