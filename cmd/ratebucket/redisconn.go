package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/observe"
)

// connectTimeout bounds the first PING: an unreachable Redis is reported
// after at most this long.
const connectTimeout = 3 * time.Second

// dialOnce is the clients' DialerRetries: a refused dial fails the store
// call at once (redisstore.ErrNotSent), so that a Redis that is down costs
// a request nothing, rather than go-redis's default 5 attempts 100 ms apart,
// which held every request for --timeout (0.4 s without one). The next
// call dials again.
const dialOnce = 1

// redisFlags are --redis URL and --cluster.
type redisFlags struct {
	url     string
	cluster bool
	// poolSize, when above go-redis's default (10 per CPU), sizes each
	// client's connection pool; subcommands set it from their
	// concurrency so that the latency they report is Redis's, not a wait
	// for a free connection.
	poolSize int
	// noPipeline turns redisstore's auto-pipelining off (bench
	// --pipeline=false).
	noPipeline bool
	// timeout bounds each store call (redisstore.Config.Timeout; demo
	// --timeout); 0 is redisstore's default.
	timeout time.Duration
	// observer, when set, receives redisstore's pipeline batch sizes
	// (demo's /metrics).
	observer observe.Observer
}

// addRedisFlags registers --redis and --cluster on fs. what says what the
// flag selects, for the help text.
func addRedisFlags(fs *flag.FlagSet, what string) *redisFlags {
	rf := &redisFlags{}
	fs.StringVar(&rf.url, "redis", "", what+": a `URL` such as redis://127.0.0.1:6379/0, or host:port")
	fs.BoolVar(&rf.cluster, "cluster", false, "the --redis URL names a Redis Cluster node (more nodes with ?addr=host:port)")
	return rf
}

// connect returns a client of the Redis named by the flags, after checking
// that it answers PING. The caller closes it. Errors are one line: a bad URL
// is a usage error, an unreachable server a runtime error.
func (rf *redisFlags) connect(ctx context.Context) (redis.UniversalClient, error) {
	url := rf.url
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	// check is a client without retries: go-redis backs off and retries a
	// refused dial, which would make an unreachable Redis take seconds to
	// report.
	var c, check redis.UniversalClient
	var addr string
	if rf.cluster {
		opts, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, usagef("--redis %q: %v", rf.url, err)
		}
		opts.DialTimeout, opts.ContextTimeoutEnabled, opts.DialerRetries = connectTimeout, true, dialOnce
		opts.PoolSize = max(opts.PoolSize, rf.poolSize)
		addr = strings.Join(opts.Addrs, ",")
		probe := *opts
		probe.MaxRetries, probe.MaxRedirects = -1, 0
		c, check = redis.NewClusterClient(opts), redis.NewClusterClient(&probe)
	} else {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, usagef("--redis %q: %v", rf.url, err)
		}
		opts.DialTimeout, opts.ContextTimeoutEnabled, opts.DialerRetries = connectTimeout, true, dialOnce
		opts.PoolSize = max(opts.PoolSize, rf.poolSize)
		addr = opts.Addr
		probe := *opts
		probe.MaxRetries = -1
		c, check = redis.NewClient(opts), redis.NewClient(&probe)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	err := check.Ping(pctx).Err()
	check.Close()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", addr, err)
	}
	return c, nil
}

// quietLogger discards go-redis's internal log lines (reconnect notices,
// handshake fallbacks), which would otherwise go to the process's stderr
// around our one-line errors. Failures still reach the user as errors.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }
