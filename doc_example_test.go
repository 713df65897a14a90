package ratebucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// The Examples in this file hold the package doc's fragments and those of
// the docs pages verbatim, so that they compile. They are not run (one
// needs a Redis server, the others wait on the real clock); the Examples
// beside them with output show the same calls at work.

// Around a take: a refund, a take of at most n, and a reservation.
func ExampleLimiter_aroundTake() {
	ctx, userID, jobID := context.Background(), "user:42", "job:7"
	s, _ := memstore.New(memstore.Config{})
	lim, _ := ratebucket.NewLimiter(s, algo.PerSecond(2).Burst(100), ratebucket.Config{})

	res, err := lim.Refund(ctx, userID, 1)         // the upload failed: its token back
	n, res, err := lim.TakeAtMost(ctx, jobID, 500) // a batch takes what there is, up to 500
	r, err := lim.Reserve(ctx, userID, 1, 2*time.Second)
	res, err = r.Wait(ctx) // held r.Delay; if ctx ends first, cancelled and its tokens back

	fmt.Println(n, res.Allowed, err)
}

// At most ten requests of one user in flight.
func ExampleConcurrencyLimiter_Acquire() {
	ctx, userID := context.Background(), "user:42"
	s, _ := memstore.New(memstore.Config{})

	lim, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 10, TTL: time.Minute}, ratebucket.ConcurrencyConfig{})
	lease, err := lim.Acquire(ctx, userID) // lease.Allowed, or lease.RetryAfter
	defer lim.Release(context.WithoutCancel(ctx), lease)

	fmt.Println(lease.Allowed, err)
}

// A Limiter whose policy is the key's plan, cached for 30 seconds.
func ExampleResolverCache_limiter() {
	s, _ := memstore.New(memstore.Config{})
	tenantPlan := func(ctx context.Context, tenant string) (ratebucket.Resolved, error) {
		return ratebucket.Resolved{Policy: algo.PerMinute(600).Burst(50), Name: "pro"}, nil // from the plan database
	}

	plans, err := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: 30 * time.Second})
	lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Resolver: plans.Resolve})

	fmt.Println(lim.Allow(context.Background(), "acme"))
	fmt.Println(err)
}
