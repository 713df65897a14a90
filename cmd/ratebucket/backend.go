package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/redis/go-redis/v9"
)

// backend is the store a subcommand runs on: one in-process memstore, or
// redisstore on the Redis named by --redis.
type backend struct {
	// desc names it for reports: "memstore (in-process)" or
	// "redisstore on 127.0.0.1:6379".
	desc  string
	store store.Store
	// rdb and rs are set on Redis only.
	rdb    redis.UniversalClient
	rs     *redisstore.Store
	prefix string
	sent   *cmdCounter // commands this client sent
}

// openBackend opens memstore, or redisstore when rf names a Redis. On Redis
// the store's keys live under prefix (redisstore's default "rb:" when
// empty).
func openBackend(ctx context.Context, rf *redisFlags, prefix string) (*backend, error) {
	if rf.url == "" {
		ms, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, err
		}
		return &backend{desc: "memstore (in-process)", store: ms}, nil
	}
	return openRedisBackend(ctx, rf, prefix)
}

// openRedisBackend opens redisstore on the Redis named by rf.
func openRedisBackend(ctx context.Context, rf *redisFlags, prefix string) (*backend, error) {
	rdb, err := rf.connect(ctx)
	if err != nil {
		return nil, err
	}
	sent := &cmdCounter{}
	rdb.AddHook(sent)
	rs, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix, Timeout: rf.timeout, Pipeline: redisstore.PipelineConfig{Disabled: rf.noPipeline},
		Observer: rf.observer})
	if err != nil {
		rdb.Close()
		if errors.Is(err, redisstore.ErrHashTagPrefix) {
			return nil, usagef("--prefix: %w", err)
		}
		return nil, err
	}
	return &backend{desc: "redisstore on " + redisAddr(rdb), store: rs, rdb: rdb, rs: rs, prefix: prefix, sent: sent}, nil
}

// close releases the store and the Redis client.
func (b *backend) close() error {
	var errs []error
	if c, ok := b.store.(interface{ Close() error }); ok {
		errs = append(errs, c.Close())
	}
	if b.rdb != nil {
		errs = append(errs, b.rdb.Close())
	}
	return errors.Join(errs...)
}

// onRedis reports whether the backend is redisstore.
func (b *backend) onRedis() bool { return b.rdb != nil }

// redisAddr names the server(s) a client talks to.
func redisAddr(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	return "redis"
}

// runID returns a short random hex string, so that a run's keys do not
// meet an earlier run's.
func runID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// commandStats returns the number of calls per command from INFO
// commandstats, summed over every master of a cluster.
func commandStats(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	out := map[string]int64{}
	parse := func(info string) {
		// lines look like: cmdstat_evalsha:calls=1000,usec=5120,...
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			if n, err := strconv.ParseInt(calls, 10, 64); err == nil {
				out[strings.TrimPrefix(name, "cmdstat_")] += n
			}
		}
	}
	var mu sync.Mutex
	err := forEachNode(ctx, c, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		parse(info)
		return nil
	})
	return out, err
}

// forEachNode calls fn with c itself, or with each master of a cluster
// (concurrently).
func forEachNode(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.Client:
		return fn(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	}
	return fmt.Errorf("unsupported Redis client %T", c)
}

// cmdCounter is a go-redis hook that counts the commands a client sends,
// by name, and the round trips they took: one per command, or one per
// pipeline (redisstore auto-pipelines concurrent Takes). These are what the
// application pays for; the server's INFO commandstats also counts the calls
// a Lua script makes inside Redis.
type cmdCounter struct {
	mu    sync.Mutex
	n     map[string]int64
	trips int64
}

func (c *cmdCounter) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	for _, cmd := range cmds {
		c.n[cmd.Name()]++
	}
	c.trips++
}

// snapshot returns a copy of the counts and the round trips so far.
func (c *cmdCounter) snapshot() (map[string]int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n), c.trips
}

// DialHook implements redis.Hook.
func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

// statsDelta returns after − before per command, dropping commands whose
// count did not change and the INFO calls made to measure.
func statsDelta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if n := v - before[k]; n > 0 && k != "info" {
			d[k] = n
		}
	}
	return d
}

// fmtCommands formats a command count map as "evalsha 1000, eval 1" with
// the largest first.
func fmtCommands(m map[string]int64) string {
	names := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
