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
	"github.com/ratebucket/ratebucket/store"
)

// Refunds, partial grants and reservations on Redis, each one script call:
// an upload that failed gives its tokens back, a batch takes what the
// bucket holds, and a burst is smoothed by waiting an exact delay instead
// of answering 429. (Needs a Redis server: compiled, not run.)
func ExampleStore_Reserve() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(5).Burst(10), ratebucket.Config{Prefix: "uploads:"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Charge an upload, and give its tokens back if it failed.
	if res, err := lim.Take(ctx, "user:42", 3); err == nil && res.Allowed {
		if uploadFailed := true; uploadFailed {
			_, _ = lim.Refund(ctx, "user:42", 3)
		}
	}

	// A batch job takes what there is, up to 50 items' worth.
	switch n, res, err := lim.TakeAtMost(ctx, "batch:nightly", 50); {
	case err != nil:
		log.Print(err)
	case n == 0:
		fmt.Printf("nothing now; a token in %v\n", res.RetryAfter)
	default:
		fmt.Printf("process %d items now\n", n)
	}

	// Wait at most 2 s for a slot instead of refusing: sleep the exact
	// Delay, or give the tokens back if the request will not proceed.
	r, err := lim.Reserve(ctx, "user:42", 1, 2*time.Second)
	if err == nil && r.Allowed {
		select {
		case <-time.After(r.Delay):
			fmt.Println("proceed")
		case <-ctx.Done():
			_, _, _ = r.Cancel(context.WithoutCancel(ctx))
		}
	}

	// Two buckets of one group refunded atomically (one Cluster slot).
	_, err = s.RefundMulti(ctx, []store.Request{
		{Key: store.GroupKey("user:42", "burst"), Policy: algo.PerSecond(10).Burst(20), Cost: 1},
		{Key: store.GroupKey("user:42", "daily"), Policy: algo.PerDay(1000).Burst(1000), Cost: 1},
	})
	if err != nil {
		log.Print(err)
	}
}
