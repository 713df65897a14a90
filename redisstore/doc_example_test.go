package redisstore_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// A Limiter on Redis, as docs/redis.md shows it: the client bounds each
// call by its context, and the store's keys are "rb:" then the Limiter's
// prefix and the key.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	rs, err := redisstore.New(rdb, redisstore.Config{}) // keys "rb:<key>", one EVALSHA per Take
	lim, err := ratebucket.NewLimiter(rs, algo.PerSecond(2).Burst(100), ratebucket.Config{Prefix: "api:"})

	if err == nil {
		fmt.Println(lim.Allow(context.Background(), "user:42"))
	}
}

// A burst limit and a monthly quota taken together: both are charged, or
// neither.
func ExampleStore_TakeMulti_quota() {
	rs, _ := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), redisstore.Config{})
	ctx, userID := context.Background(), "42"

	res, err := rs.TakeMulti(ctx, []store.Request{
		{Key: store.GroupKey(userID, "burst"), Policy: algo.PerSecond(2).Burst(100), Cost: 1},
		{Key: store.GroupKey(userID, "month"), Policy: algo.Quota(10_000, algo.Month, 0), Cost: 1},
	})
	// !res.Allowed: neither was charged; a quota that denies waits exactly until the 1st, 00:00 UTC

	fmt.Println(res.Allowed, err)
}
