package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/redis/go-redis/v9"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// RefScript is the reference hash script (refscript.lua): a hash of
// tokens and ts, float refill with the caller's clock in milliseconds,
// EXPIRE of the fill time plus an hour.
//
//go:embed refscript.lua
var RefScript string

// refScript is RefScript run with EVALSHA, EVAL on NOSCRIPT.
var refScript = redis.NewScript(RefScript)

// RedisImpl is one Redis-backed implementation under test. Calls carry no
// deadline of their own: the client's read timeout (go-redis's default, 3
// s) bounds each one, the same for every implementation.
type RedisImpl struct {
	Name string
	// Prefix is what the implementation puts before a user's key in
	// Redis; [Keys] uses it to make every stored key [KeyLen] bytes.
	Prefix string
	// New builds a limiter enforcing p over c.
	New func(c *redis.Client, p Policy) (Limiter, func() error, error)
}

// OnRedis lists the Redis-backed implementations, ratebucket first.
var OnRedis = []RedisImpl{
	{"ratebucket", "rl:", newRedisstore}, // ratebucket.go
	{"ratebucket-direct", "rl:", newRedisstoreDirect},
	{"redis_rate", "rate:", newRedisRate},
	{"refscript", "rl:", newRefScript},
	{"throttled", "rl:", newThrottledRedis},
	{"ulule", "rl:", newUluleRedis},
}

// redisRate is go-redis's redis_rate (GCRA in Lua, server clock).
type redisRate struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
}

func newRedisRate(c *redis.Client, p Policy) (Limiter, func() error, error) {
	limit := redis_rate.Limit{Rate: int(p.Tokens), Period: p.Period, Burst: int(p.Burst)}
	return redisRate{redis_rate.NewLimiter(c), limit}, noClose, nil
}

func (r redisRate) Allow(key string) (bool, error) {
	res, err := r.l.Allow(context.Background(), key, r.limit)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

// refLimiter runs the reference hash script with the client's clock in
// milliseconds, as the article's middleware does.
type refLimiter struct {
	c        *redis.Client
	capacity int64
	perSec   float64
}

func newRefScript(c *redis.Client, p Policy) (Limiter, func() error, error) {
	return refLimiter{c, p.Burst, float64(p.Tokens) / p.Period.Seconds()}, noClose, nil
}

func (r refLimiter) Allow(key string) (bool, error) {
	v, err := refScript.Run(context.Background(), r.c, []string{"rl:" + key}, r.capacity, r.perSec, time.Now().UnixMilli(), 1).Int64Slice()
	if err != nil {
		return false, err
	}
	if len(v) != 3 {
		return false, fmt.Errorf("bench: reference script returned %v", v)
	}
	return v[0] == 1, nil
}

// newThrottledRedis is throttled's GCRA limiter over its go-redis v9 store
// (GET, then SET NX or a compare-and-swap script: two round trips).
func newThrottledRedis(c *redis.Client, p Policy) (Limiter, func() error, error) {
	st, err := throttledredis.NewCtx(c, "rl:")
	return newGCRA(st, err, p)
}

// ululeRedis is ulule/limiter's Redis store: a fixed window counter
// (INCRBY and EXPIRE in a script) of Burst per FillTime.
type ululeRedis struct{ l *ulule.Limiter }

func newUluleRedis(c *redis.Client, p Policy) (Limiter, func() error, error) {
	st, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "rl"})
	if err != nil {
		return nil, nil, err
	}
	return ululeRedis{ulule.New(st, ulule.Rate{Period: p.FillTime(), Limit: p.Burst})}, noClose, nil
}

func (u ululeRedis) Allow(key string) (bool, error) {
	lc, err := u.l.Get(context.Background(), key)
	return !lc.Reached, err
}

// newRedisstore is ratebucket's redisstore as configured by default:
// the server clock (TIME in the script), auto-pipelining on, with the
// prefix "rl:".
func newRedisstore(c *redis.Client, p Policy) (Limiter, func() error, error) {
	return redisstoreWith(c, p, redisstore.PipelineConfig{})
}

// newRedisstoreDirect is redisstore with auto-pipelining off: one round
// trip per check, as every peer makes.
func newRedisstoreDirect(c *redis.Client, p Policy) (Limiter, func() error, error) {
	return redisstoreWith(c, p, redisstore.PipelineConfig{Disabled: true})
}

func redisstoreWith(c *redis.Client, p Policy, pipe redisstore.PipelineConfig) (Limiter, func() error, error) {
	ap, err := p.Algo()
	if err != nil {
		return nil, nil, err
	}
	s, err := redisstore.New(c, redisstore.Config{Prefix: "rl:", Pipeline: pipe})
	if err != nil {
		return nil, nil, err
	}
	return storeLimiter{s, ap}, s.Close, nil
}

// ErrRedisStart reports a redis-server that could not be started.
var ErrRedisStart = errors.New("bench: redis-server did not start (apt-get install redis-server redis-tools)")

// RedisServer is a redis-server started by [StartRedis] on a free
// 127.0.0.1 port, with persistence off. Stop it with Stop.
type RedisServer = redistest.Launched

// StartRedis starts redis-server in dir and waits until it answers PING
// (internal/redistest's Launch, the tests' own starter). The server dies
// with this process, so a benchmark that is killed leaves nothing behind.
func StartRedis(dir string) (*RedisServer, error) {
	s, err := redistest.Launch(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisStart, err)
	}
	return s, nil
}

// ServeRedis returns addr when it is set; otherwise it starts a
// redis-server (see [StartRedis]) in a new temporary directory named after
// name and returns its address. stop stops the server it started and
// removes the directory; it does nothing for a given addr.
func ServeRedis(addr, name string) (_ string, stop func(), _ error) {
	if addr != "" {
		return addr, func() {}, nil
	}
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		return "", nil, err
	}
	srv, err := StartRedis(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return srv.Addr, func() { srv.Stop(); os.RemoveAll(dir) }, nil
}

// RedisVersion returns the server's redis_version from INFO.
func RedisVersion(ctx context.Context, c redis.UniversalClient) (string, error) {
	return infoField(ctx, c, "server", "redis_version")
}

// UsedMemory returns the server's used_memory in bytes.
func UsedMemory(ctx context.Context, c redis.UniversalClient) (int64, error) {
	v, err := infoField(ctx, c, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// ServerCPU returns the CPU time the server process has used (INFO cpu:
// used_cpu_user + used_cpu_sys), in seconds. Its growth over a measurement
// divided by the checks made is the server's cost per check, round-trip
// handling included.
func ServerCPU(ctx context.Context, c redis.UniversalClient) (float64, error) {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := infoField(ctx, c, "cpu", f)
		if err != nil {
			return 0, err
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: INFO cpu %s: %w", f, err)
		}
		total += x
	}
	return total, nil
}

// ServerReads returns how many read events the server has processed (INFO
// stats: total_reads_processed): one per batch of commands it read from a
// connection. Checks made over a measurement divided by its growth is how
// many checks travelled together, calls per pipeline for a client that
// pipelines (1 for one round trip per check, 0.5 for two).
func ServerReads(ctx context.Context, c redis.UniversalClient) (int64, error) {
	v, err := infoField(ctx, c, "stats", "total_reads_processed")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// infoField returns one field of INFO section.
func infoField(ctx context.Context, c redis.UniversalClient, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("bench: INFO %s has no %s", section, field)
}
