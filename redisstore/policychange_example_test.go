package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
)

// A tenant's limit raised at runtime: the next call under the new policy
// converts the bucket, here keeping the fraction of a full bucket it held
// (the default, algo.KeepTokens, keeps its tokens). Every Store sharing
// the buckets should be configured with the same rule. (It needs a Redis
// server, so it is compiled, not run.)
func ExampleConfig_onPolicyChange() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{OnPolicyChange: algo.Proportional})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Take(ctx, store.Request{Key: "tenant:7", Policy: algo.PerSecond(1).Burst(10), Cost: 4}); err != nil {
		log.Fatal(err)
	}
	p := algo.PerSecond(10).Burst(100)
	res, err := s.Take(ctx, store.Request{Key: "tenant:7", Policy: p, Cost: 0}) // 60% of 10 -> 60 of 100
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Remaining, "of", p.Capacity())
}
