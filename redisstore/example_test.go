package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// A limiter shared by every instance of an application: 20 at once, then
// 10 per second per user, on the Redis server's clock. (Examples here need a
// Redis server, so they are compiled but not run.)
func Example() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // let the store's deadlines reach the socket
	})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{}) // keys "rb:..."
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(10).Burst(20), ratebucket.Config{Prefix: "api:"})
	if err != nil {
		log.Fatal(err)
	}
	res, err := lim.Allow(context.Background(), "user:42")
	switch {
	case err != nil:
		log.Printf("rate limiter unavailable: %v", err) // fail open or closed: your choice
	case !res.Allowed:
		fmt.Printf("429, retry in %v\n", res.RetryAfter)
	}
}

// Two limits at once, atomically: a burst limit and a daily quota. Keys
// made by store.GroupKey with one group ("user:42") live in one Redis
// Cluster slot, which a multi-limit take needs; without it TakeMulti fails
// with store.ErrNotTogether on a cluster.
func ExampleStore_TakeMulti() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"localhost:7000"}, ContextTimeoutEnabled: true})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := s.TakeMulti(context.Background(), []store.Request{
		{Key: store.GroupKey("user:42", "burst"), Policy: algo.PerSecond(10).Burst(20), Cost: 1},
		{Key: store.GroupKey("user:42", "daily"), Policy: algo.PerDay(1000).Burst(1000), Cost: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	if !res.Allowed {
		fmt.Printf("limit %d denied; retry in %v\n", res.Denied, res.RetryAfter)
	}
}

// Inspect shows a bucket without charging it; Reset empties a key, which
// is also the way out of store.ErrCorruptState.
func ExampleStore_Inspect() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p := algo.PerMinute(60).Burst(10)
	b, err := s.Inspect(context.Background(), "user:42", p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d of %d tokens, full in %v, TTL %v\n", b.Key, b.Tokens, b.Limit, b.FullIn, b.TTL)
	if err := s.Reset(context.Background(), "user:42"); err != nil {
		log.Fatal(err)
	}
}
