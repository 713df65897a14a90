// Command leasebench measures token leases (hybrid.Leases over redisstore)
// beside the Redis-backed peers, in one run against one redis-server, and
// prints Go benchmark lines for benchstat: the targets of issue 29.
//
// Each round measures, for every implementation, interleaved:
//
//   - load=global: one key under bench.Global (50,000/s, burst 5,000)
//     shared by 3 app instances (3 clients, 3 limiters; for leases
//     Instances 3) of 16 goroutines each, closed loops;
//   - load=hot: one key under bench.Article (burst 100, 2/s: nearly every
//     call denied), the BENCHMARKS.md hot rows, at each -hot concurrency
//     from one instance (leases with Instances 1);
//   - load=distinct: -keys keys under bench.Article at each -distinct
//     concurrency, ratebucket with and without leases.
//
// Every line gives checks/s (decisions answered), admitted/s, the Redis
// commands sent per admitted request (a go-redis hook counting every
// command, pipelined ones included), and p50/p99 in µs. The server is
// emptied before every measurement and the limiters built afresh.
//
//	go run ./cmd/leasebench -rounds 6 -dur 500ms > leases.txt
//	go run golang.org/x/perf/cmd/benchstat -col /impl leases.txt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratebucket/ratebucket/bench"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "", "use this Redis server (host:port) instead of starting one; it is FLUSHALLed")
	rounds := flag.Int("rounds", 6, "rounds; every measurement is repeated once per round")
	dur := flag.Duration("dur", 500*time.Millisecond, "duration of one measurement")
	stores := flag.Int("stores", 3, "app instances sharing the global key")
	perStore := flag.Int("per-store", 16, "goroutines per app instance on the global key")
	hot := flag.String("hot", "16,64", "comma-separated goroutine counts on one hot key (empty: none)")
	distinct := flag.String("distinct", "1,16,64", "comma-separated goroutine counts on distinct keys (empty: none)")
	numKeys := flag.Int("keys", 100_000, "distinct keys")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{*addr, *rounds, *dur, *stores, *perStore, nil, nil, *numKeys}
	var err error
	if cfg.hot, err = counts("-hot", *hot); err == nil {
		cfg.distinct, err = counts("-distinct", *distinct)
	}
	if err == nil {
		err = run(ctx, cfg)
	}
	if err != nil {
		log.Fatal(err)
	}
}

type config struct {
	addr             string
	rounds           int
	dur              time.Duration
	stores, perStore int
	hot, distinct    []int
	keys             int
}

func counts(name, list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: bad count %q", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// instance is one app instance: its own client, counted, and limiter.
type instance struct {
	c     *redis.Client
	l     bench.Limiter
	close func() error
}

// fleet builds n instances of impl under p, each client counting its
// commands into calls.
func fleet(addr string, impl bench.RedisImpl, p bench.Policy, n, pool int, calls *atomic.Int64) ([]instance, error) {
	var out []instance
	for range n {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool + 4, ContextTimeoutEnabled: true})
		bench.CountCommands(c, calls)
		l, closeFn, err := impl.New(c, p)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", impl.Name, err), c.Close(), closeAll(out))
		}
		out = append(out, instance{c, l, closeFn})
	}
	return out, nil
}

func closeAll(is []instance) error {
	var errs []error
	for _, in := range is {
		errs = append(errs, in.close(), in.c.Close())
	}
	return errors.Join(errs...)
}

func limiters(is []instance) []bench.Limiter {
	ls := make([]bench.Limiter, len(is))
	for i, in := range is {
		ls[i] = in.l
	}
	return ls
}

// measurement is one row: which load, which implementation, how.
type measurement struct {
	name      string // the benchmark's name after "BenchmarkLeases/"
	impl      bench.RedisImpl
	policy    bench.Policy
	instances int // app instances
	conc      int // goroutines per instance
	hot       bool
}

func run(ctx context.Context, cfg config) error {
	addr, stop, err := bench.ServeRedis(cfg.addr, "leasebench")
	if err != nil {
		return err
	}
	defer stop()
	cfg.addr = addr
	admin := redis.NewClient(&redis.Options{Addr: cfg.addr})
	defer admin.Close()
	version, err := bench.RedisVersion(ctx, admin)
	if err != nil {
		return err
	}
	fmt.Printf("redis-version: %s\n", version)

	var ms []measurement
	peers := append([]bench.RedisImpl{bench.Leased(cfg.stores)}, bench.OnRedis...)
	for _, impl := range peers {
		ms = append(ms, measurement{"load=global", impl, bench.Global, cfg.stores, cfg.perStore, true})
	}
	for _, conc := range cfg.hot {
		for _, impl := range append([]bench.RedisImpl{bench.Leased(1)}, bench.OnRedis...) {
			ms = append(ms, measurement{fmt.Sprintf("load=hot/conc=%d", conc), impl, bench.Article, 1, conc, true})
		}
	}
	for _, conc := range cfg.distinct {
		for _, impl := range []bench.RedisImpl{bench.Leased(1), bench.OnRedis[0]} {
			ms = append(ms, measurement{fmt.Sprintf("load=distinct/conc=%d", conc), impl, bench.Article, 1, conc, false})
		}
	}
	for range cfg.rounds {
		for _, m := range ms {
			if err := measure(ctx, cfg, admin, m); err != nil {
				return fmt.Errorf("%s/impl=%s: %w", m.name, m.impl.Name, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return bench.FlushSync(ctx, admin)
}

// measure builds m's fleet, warms it (connections, script cache), empties
// the server, builds it again and measures it.
func measure(ctx context.Context, cfg config, admin *redis.Client, m measurement) error {
	var calls atomic.Int64
	keys := bench.Keys(1, m.impl.Prefix)
	if !m.hot {
		keys = bench.Keys(cfg.keys, m.impl.Prefix)
	}
	load := func(is []instance, d time.Duration) (bench.Load, error) {
		if m.hot {
			return bench.RunFleet(limiters(is), keys[0], m.conc, d)
		}
		return bench.RunLoad(is[0].l, keys, false, m.conc, d)
	}
	if err := bench.FlushSync(ctx, admin); err != nil { // implementations share key names
		return err
	}
	is, err := fleet(cfg.addr, m.impl, m.policy, m.instances, m.conc, &calls)
	if err != nil {
		return err
	}
	_, err = load(is, 50*time.Millisecond)
	if err := errors.Join(err, closeAll(is), bench.FlushSync(ctx, admin)); err != nil {
		return err
	}
	if is, err = fleet(cfg.addr, m.impl, m.policy, m.instances, m.conc, &calls); err != nil {
		return err
	}
	calls.Store(0)
	ld, err := load(is, cfg.dur)
	sent := calls.Load() // before Close gives the batches back
	if err := errors.Join(err, closeAll(is)); err != nil {
		return err
	}
	if ld.FirstErr != nil {
		log.Printf("%s/impl=%s: %d errors, first: %v", m.name, m.impl.Name, ld.Errors, ld.FirstErr)
	}
	secs := ld.Elapsed.Seconds()
	perAdmit := float64(sent) / float64(max(ld.Admitted, 1))
	fmt.Printf("BenchmarkLeases/%s/impl=%s\t%d\t%.0f checks/s\t%.0f admitted/s\t%.4f calls/admit\t%.3f calls/check\t%.1f p50-us\t%.1f p99-us\t%.4f err/op\n",
		m.name, m.impl.Name, ld.Calls, float64(ld.Calls)/secs, float64(ld.Admitted)/secs, perAdmit,
		float64(sent)/float64(max(ld.Calls, 1)), us(ld.P50), us(ld.P99), float64(ld.Errors)/float64(ld.Calls+ld.Errors))
	return nil
}

// us converts a Duration to fractional microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
