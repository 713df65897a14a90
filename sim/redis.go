package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/redisstore"
)

// addRedis builds one redisstore.Store per instance of l over its one
// Redis, each with its own client clock (the virtual clock plus the
// instance's skew): N app processes sharing one Redis, each sending its own
// time to the script. That is the honest model of clock skew; the server
// clock (Redis TIME) cannot be simulated, since it is real time, but a
// shared store with no skew behaves as the server clock does.
//
// Keys live under a prefix unique to the run, "rb:sim:<random>:", so runs
// never see each other's buckets. They get no expiry (TTLMargin −1):
// virtual time runs far ahead of Redis's real clock, and a bucket must
// live exactly as long as in memstore. They are deleted when the run ends.
func (f *fleet) addRedis(l layout, c *Clock) error {
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("sim: redis prefix: %w", err)
	}
	prefix := "rb:sim:" + hex.EncodeToString(nonce[:]) + ":"
	f.closers = append(f.closers, func() error { return deletePrefix(l.redis, prefix) })
	for i, skew := range l.skews {
		clk := c.Skewed(dur(skew))
		rs, err := redisstore.New(l.redis, redisstore.Config{Prefix: prefix, Clock: clk, TTLMargin: -1})
		if err != nil {
			return fmt.Errorf("sim: redisstore: %w", err)
		}
		f.closers = append(f.closers, rs.Close)
		s, n := Count(rs)
		f.counters = append(f.counters, n)
		if err := f.add(l, i, clk, s); err != nil {
			return err
		}
	}
	return nil
}

// deletePrefix removes every key under prefix, on each master of a
// cluster.
func deletePrefix(rdb redis.UniversalClient, prefix string) error {
	ctx := context.Background()
	del := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			if err := c.Unlink(ctx, it.Val()).Err(); err != nil {
				return err
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	} else {
		err = del(ctx, rdb)
	}
	if err != nil {
		return fmt.Errorf("sim: delete keys %s*: %w", prefix, err)
	}
	return nil
}
