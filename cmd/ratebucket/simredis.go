package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// simRedisStores returns the sim.Config.Stores of `sim --redis`: for each
// call (a run's instances), one redisstore.Store per instance over rdb,
// each with its own client clock (the virtual clock plus the instance's
// skew): N app processes sharing one Redis, each sending its own time to
// the script. That is the honest model of clock skew; the server clock
// (Redis TIME) cannot be simulated, since it is real time, but a shared
// store with no skew behaves as the server clock does.
//
// Keys live under a prefix unique to the call, "rb:sim:<random>:", so
// runs never see each other's buckets. They get no expiry (TTLMargin −1):
// virtual time runs far ahead of Redis's real clock, and a bucket must
// live exactly as long as in memstore. They are deleted when the run ends.
// redisstore runs only the token bucket.
func simRedisStores(rdb redis.UniversalClient) func(algo.Algorithm, []store.Clock) ([]store.Store, func() error, error) {
	return func(alg algo.Algorithm, clocks []store.Clock) (stores []store.Store, closeAll func() error, err error) {
		if _, ok := alg.(algo.TokenBucket); !ok {
			return nil, nil, fmt.Errorf("redisstore runs only the token bucket, not %s: %w", alg.Name(), store.ErrUnsupported)
		}
		prefix := "rb:sim:" + runID() + ":"
		closers := []func() error{func() error { return deletePrefix(rdb, prefix) }}
		closeAll = func() error {
			var errs []error
			for i := len(closers) - 1; i >= 0; i-- {
				errs = append(errs, closers[i]())
			}
			return errors.Join(errs...)
		}
		for _, clk := range clocks {
			rs, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix, Clock: clk, TTLMargin: -1})
			if err != nil {
				return nil, nil, errors.Join(fmt.Errorf("redisstore: %w", err), closeAll())
			}
			closers = append(closers, rs.Close)
			stores = append(stores, rs)
		}
		return stores, closeAll, nil
	}
}

// deletePrefix removes every key under prefix, on each master of a
// cluster.
func deletePrefix(rdb redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			if err := c.Unlink(ctx, it.Val()).Err(); err != nil {
				return err
			}
		}
		return it.Err()
	}
	if err := forEachNode(context.Background(), rdb, del); err != nil {
		return fmt.Errorf("delete keys %s*: %w", prefix, err)
	}
	return nil
}
