package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
)

// At most 3 reports of a tenant run at once across every instance; a
// holder that crashes frees its slot after 10 minutes. (Needs a Redis
// server: compiled, not run.)
func ExampleStore_AcquireLease() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{}) // leases at "lease:rb:..."
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 3, TTL: 10 * time.Minute}, ratebucket.ConcurrencyConfig{Prefix: "report:"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := lim.Acquire(ctx, "tenant:7")
	switch {
	case err != nil:
		log.Printf("limiter unavailable: %v", err)
		return
	case !lease.Allowed:
		fmt.Printf("3 reports running; one ends within %v\n", lease.RetryAfter)
		return
	}
	defer lim.Release(context.WithoutCancel(ctx), lease)
	// ... build the report, calling lim.Renew every few minutes if it runs long ...
}
