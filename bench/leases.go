package bench

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/redis/go-redis/v9"
)

// Global is the global limit of the token-lease targets: 50,000 a second
// with a burst of 5,000, shared by a fleet of app instances.
var Global = Policy{Name: "global", Burst: 5_000, Tokens: 50_000, Period: 1e9}

// Leased is ratebucket's redisstore (as configured by default) behind
// hybrid's stack for hot keys, as docs/leases.md recommends it:
// hybrid.Leases (instances instances sharing its buckets, the default
// lifetime) over hybrid.DenyCache. A hot key whose demand is worth a
// batch spends its tokens from local batches; a hot key that cannot be
// leased (its rate·L below MinBatch, say 2/s) and is mostly denied is
// denied locally by the cache until Redis would admit it.
func Leased(instances int) RedisImpl {
	return RedisImpl{"ratebucket-leases", "rl:", func(c *redis.Client, p Policy) (Limiter, func() error, error) {
		ap, err := p.Algo()
		if err != nil {
			return nil, nil, err
		}
		s, err := redisstore.New(c, redisstore.Config{Prefix: "rl:"})
		if err != nil {
			return nil, nil, err
		}
		dc, err := hybrid.NewDenyCache(s, hybrid.DenyCacheConfig{})
		if err != nil {
			return nil, nil, errors.Join(err, s.Close())
		}
		ls, err := hybrid.NewLeases(dc, hybrid.LeasesConfig{Instances: instances})
		if err != nil {
			return nil, nil, errors.Join(err, s.Close())
		}
		return storeLimiter{ls, ap}, func() error { return errors.Join(ls.Close(), s.Close()) }, nil
	}}
}

// CountCommands adds to n every command c sends, one per command of a
// pipeline: the calls an implementation makes to Redis, whatever its
// scripts run inside.
func CountCommands(c *redis.Client, n *atomic.Int64) {
	c.AddHook(commandCounter{n})
}

type commandCounter struct{ n *atomic.Int64 }

func (commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
