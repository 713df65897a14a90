package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
)

// A call that never reached Redis charged nothing: errors.Is tells it
// from one whose request was written before it timed out, which may have
// charged. Here nothing listens on the port, so the dial is refused, and
// with one dial attempt the call fails at once.
func ExampleErrNotSent() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:1", // nothing listens here
		ContextTimeoutEnabled: true,
		DialerRetries:         1, // a refused dial fails the call at once
	})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{Timeout: 150 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	_, err = s.Take(context.Background(), store.Request{Key: "user:42", Policy: algo.PerSecond(10).Burst(20), Cost: 1})
	switch {
	case errors.Is(err, redisstore.ErrNotSent):
		fmt.Println("not sent, nothing charged: safe to answer locally")
	case err != nil:
		fmt.Println("failed, and may have charged:", err)
	}
	// Output: not sent, nothing charged: safe to answer locally
}
