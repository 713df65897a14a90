package bench

import (
	"context"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/redis/go-redis/v9"
)

// storeLimiter is a ratebucket Store behind a fixed policy: the call a
// store.Limiter makes, without its prefix concatenation.
type storeLimiter struct {
	s store.Store
	p algo.Policy
}

func (l storeLimiter) Allow(key string) (bool, error) {
	r, err := l.s.Take(context.Background(), key, l.p, 1)
	return r.Allowed, err
}

// newMemstore is ratebucket's memstore with its zero Config: real clock,
// token bucket, default shards.
func newMemstore(p Policy) (Limiter, func() error, error) {
	ap, err := p.Algo()
	if err != nil {
		return nil, nil, err
	}
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		return nil, nil, err
	}
	return storeLimiter{s, ap}, s.Close, nil
}

// newRedisstore is ratebucket's redisstore with the server clock (TIME in
// the script) and the prefix "rl:".
func newRedisstore(c *redis.Client, p Policy) (Limiter, func() error, error) {
	ap, err := p.Algo()
	if err != nil {
		return nil, nil, err
	}
	s, err := redisstore.New(c, redisstore.Config{Prefix: "rl:"})
	if err != nil {
		return nil, nil, err
	}
	return storeLimiter{s, ap}, s.Close, nil
}
