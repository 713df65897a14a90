package store_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// The Examples in this file hold the package doc's fragments and those of
// the docs pages verbatim, so that they compile. They are not run (one
// needs a Redis server, the others wait on the real clock); the Examples
// beside them with output show the same calls at work.

// A redisstore observed: its decisions reach obs.
func ExampleObserve_redis() {
	rs, _ := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), redisstore.Config{})
	var obs store.Observer = store.ObserverFuncs{}

	s := store.Observe(rs, "redis", obs) // obs: any Observer

	fmt.Println(s.Take(context.Background(), store.Request{Key: "alice", Policy: algo.PerSecond(2).Burst(100), Cost: 1}))
}
