package store_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// The Examples in this file hold the package doc's fragments and those of
// the docs pages verbatim, so that they compile. They are not run (one
// needs a Redis server, the others wait on the real clock); the Examples
// beside them with output show the same calls at work.

// Around a take: a refund, a take of at most n, and a reservation.
func ExampleLimiter_aroundTake() {
	ctx, userID, jobID := context.Background(), "user:42", "job:7"
	s, _ := memstore.New(memstore.Config{})
	lim, _ := store.NewLimiter(s, algo.PerSecond(2).Burst(100), store.LimiterConfig{})

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

	lim, err := store.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 10, TTL: time.Minute}, store.ConcurrencyConfig{})
	lease, err := lim.Acquire(ctx, userID) // lease.Allowed, or lease.RetryAfter
	defer lim.Release(context.WithoutCancel(ctx), lease)

	fmt.Println(lease.Allowed, err)
}

// A Limiter whose policy is the key's plan, cached for 30 seconds.
func ExampleResolverCache_limiter() {
	s, _ := memstore.New(memstore.Config{})
	tenantPlan := func(ctx context.Context, tenant string) (store.Resolved, error) {
		return store.Resolved{Policy: algo.PerMinute(600).Burst(50), Name: "pro"}, nil // from the plan database
	}

	plans, err := store.NewResolverCache(tenantPlan, store.CacheConfig{TTL: 30 * time.Second})
	lim, err := store.NewLimiter(s, algo.Policy{}, store.LimiterConfig{Resolver: plans.Resolve})

	fmt.Println(lim.Allow(context.Background(), "acme"))
	fmt.Println(err)
}

// A redisstore observed: its decisions reach obs.
func ExampleObserve_redis() {
	rs, _ := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), redisstore.Config{})
	var obs store.Observer = store.ObserverFuncs{}

	s := store.Observe(rs, "redis", obs) // obs: any Observer

	fmt.Println(s.Take(context.Background(), store.Request{Key: "alice", Policy: algo.PerSecond(2).Burst(100), Cost: 1}))
}
