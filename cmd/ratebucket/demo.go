package main

import (
	"context"
	"flag"

	"github.com/ratebucket/ratebucket/algo"
)

var demoCommand = &command{
	name:    "demo",
	summary: "run the article's API behind the middleware and load-test it",
	usage: `demo [--redis URL] [--instances N] [-n 1000] [-c 200]
                       [--capacity 100] [--rate 2] [--serve]
                       [--timeout 1s] [--fail open|closed]

Starts N instances of the article's API on 127.0.0.1, each serving
GET /api/feed -> {"ok":true} behind httplimit, keyed by user, else by client
IP, all drawing from one store: one memstore in this process by default, or
your Redis with --redis (each instance then has its own Redis client, as
separate processes would). Then it runs its own load generator, like
  ab -n 1000 -c 200 -H "x-user-id: test-user" http://127.0.0.1:PORT/api/feed
round-robin over the instances, and reports the 200s and 429s, how many
were admitted after the first burst by refill against the law
admitted <= capacity + rate*elapsed, the latency of the limiter's own check
and of whole requests, and on Redis the commands it ran, memory per key,
and the 'ratebucket inspect' command that reads the load's bucket: the
run's keys are under a --prefix of its own (rb:demo:RUN:), which that
command carries. With --serve on Redis it prints that command first.
On Redis each client's pool holds c/N connections, opened before the run,
and the script is loaded first, as in an app that has been up a while.

The user comes from the --user-header header (x-user-id). That header is
trusted ONLY because this is a local demo: it stands in for your
authentication middleware, which is what must call httplimit.WithUser in a
real app. Any client can forge a header. --user-header "" keys by IP alone.

--per-instance gives each instance its own memstore instead: the broken
setup in which N instances admit N times the limit.

When the store fails (Redis down, or slower than --timeout, which bounds
each call: redisstore's Config.Timeout), GET /api/feed is served unlimited
(fail-open, the default; --fail closed answers 503 instead), and
POST /api/login, which every instance also serves from the same bucket,
answers 503 with Retry-After: 1 (fail-closed, as a login route should). To
see both, serve on Redis, stop Redis, and curl the two routes.

Examples:
  ratebucket demo
  ratebucket demo -n 1000 -c 200 --capacity 100 --rate 2
  ratebucket demo --redis redis://127.0.0.1:6379 --instances 3
  ratebucket demo -n 600 --qps 100 --capacity 20 --rate 10   (watch the refill)
  ratebucket demo --per-instance --instances 3
  ratebucket demo --serve --port 8080   then: curl -i localhost:8080/api/feed
                                        and:  curl localhost:8080/metrics
  ratebucket demo --serve -n 0 --port 8080 --redis 127.0.0.1:6379 \
      --timeout 150ms
    then stop Redis:  curl -i localhost:8080/api/feed            (200)
                      curl -i -X POST localhost:8080/api/login   (503)`,
	flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		var cfg demoConfig
		rf := addRedisFlags(fs, "share the buckets through this Redis instead of one in-process memstore")
		pf := addPolicyFlags(fs, 100, "2/s")
		fs.IntVar(&cfg.instances, "instances", 3, "number of API instances sharing the store")
		fs.IntVar(&cfg.n, "n", 1000, "number of requests to send (0 with --serve: none)")
		fs.IntVar(&cfg.c, "c", 200, "number of requests in flight at once")
		fs.Float64Var(&cfg.qps, "qps", 0, "pace the load to this many requests per second in total (0: as fast as possible)")
		fs.StringVar(&cfg.user, "user", "test-user", "user id the load generator sends in --user-header (empty: anonymous, keyed by IP)")
		fs.StringVar(&cfg.userHeader, "user-header", "x-user-id", "request `header` the demo trusts as the user id (demo only; empty: never)")
		fs.BoolVar(&cfg.perInstance, "per-instance", false, "give each instance its own memstore (shows N instances admitting N× the limit)")
		fs.BoolVar(&cfg.serve, "serve", false, "keep the instances up until interrupted, for your own ab, wrk or curl; each serves GET /metrics (Prometheus text)")
		fs.IntVar(&cfg.port, "port", 0, "port of the first instance, the next ones follow (0: any free ports)")
		fs.DurationVar(&rf.timeout, "timeout", 0, "bound on each Redis call, after which it counts as a store failure (0: redisstore's default, 1s)")
		fs.StringVar(&cfg.fail, "fail", "open", "what GET /api/feed does while the store fails: open (serve) or closed (503); POST /api/login is always closed")
		fs.BoolVar(&cfg.json, "json", false, "print the report as JSON")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			var err error
			if cfg.policy, err = pf.policy(); err != nil {
				return err
			}
			cfg.redis, cfg.rate = rf, pf.rate.text
			if err := cfg.check(); err != nil {
				return err
			}
			return runDemo(ctx, e, &cfg)
		}
	},
}

// demoConfig is one demo invocation.
type demoConfig struct {
	redis                 *redisFlags
	policy                algo.Policy
	rate                  string // --rate as given, for the inspect line
	instances, n, c, port int
	qps                   float64
	user, userHeader      string
	fail                  string // GET /api/feed's FailMode: "open" or "closed"
	perInstance, serve    bool
	json                  bool
}

// check validates the flags that parse alone cannot.
func (cfg *demoConfig) check() error {
	switch {
	case cfg.instances < 1 || cfg.instances > 64:
		return usagef("--instances %d: want 1 to 64", cfg.instances)
	case cfg.n < 0 || cfg.n == 0 && !cfg.serve:
		return usagef("-n %d: want at least 1 request (or 0 with --serve)", cfg.n)
	case cfg.c < 1 || cfg.c > 10_000:
		return usagef("-c %d: want 1 to 10000 requests in flight", cfg.c)
	case cfg.qps < 0:
		return usagef("--qps %v: must not be negative", cfg.qps)
	case cfg.port < 0 || cfg.port+cfg.instances-1 > 65535:
		return usagef("--port %d: the instances need ports %d to %d", cfg.port, cfg.port, cfg.port+cfg.instances-1)
	case cfg.perInstance && cfg.redis.url != "":
		return usagef("--per-instance gives each instance a memstore; it does not combine with --redis")
	case cfg.redis.timeout < 0:
		return usagef("--timeout %v: must not be negative", cfg.redis.timeout)
	case cfg.redis.timeout > 0 && cfg.redis.url == "":
		return usagef("--timeout bounds Redis calls; it needs --redis")
	case cfg.fail != "open" && cfg.fail != "closed":
		return usagef("--fail %q: want open or closed", cfg.fail)
	case cfg.user != "" && cfg.userHeader == "":
		cfg.user = "" // no trusted header: the load is keyed by IP
	}
	return nil
}
