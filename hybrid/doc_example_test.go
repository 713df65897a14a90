package hybrid_test

import (
	"context"
	"fmt"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
)

// The package doc's composition: a deny cache in front of Redis, and a
// local fallback with a quarter of each limit while Redis is down. It needs
// a Redis server, so it is compiled but not run; ExampleNewDenyCache and
// ExampleNewFallback show each wrapper at work.
func Example_composed() {
	redisStore, _ := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), redisstore.Config{})

	cache, _ := hybrid.NewDenyCache(redisStore, hybrid.DenyCacheConfig{})
	local, _ := memstore.New(memstore.Config{})
	limiter, _ := hybrid.NewFallback(cache, local, hybrid.FallbackConfig{Instances: 4})
	// use limiter wherever a store.Store goes: ratebucket.NewLimiter, httplimit

	fmt.Println(limiter.Take(context.Background(), store.Request{Key: "alice", Policy: algo.PerSecond(2).Burst(100), Cost: 1}))
}
