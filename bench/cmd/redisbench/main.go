// Command redisbench compares the Redis-backed rate limiters in one run
// against one redis-server, and prints the results in Go benchmark format
// (one line per measurement and round) for benchstat and benchtables.
//
// It starts its own redis-server on a free 127.0.0.1 port (persistence
// off) unless -addr names one, and stops it on exit. Each round measures,
// for every implementation in bench.OnRedis, closed-loop throughput and
// p50/p99 latency at each concurrency on 100k distinct keys (policy burst
// 100, 2/s: nearly every call admitted) and on one hot key (nearly every
// call denied), with the server's CPU time per check (INFO cpu); then the
// ceiling: redis-benchmark replaying, on the same
// server, the exact EVALSHA each Lua-based library sends (captured with
// MONITOR), loaded with SCRIPT LOAD, on random keys. The server is emptied
// before every measurement. Finally, memory per key: MEMORY USAGE of one
// key and the used_memory delta over 100k keys of 20 bytes.
//
//	go run ./cmd/redisbench -rounds 6 -dur 1s > redis.txt
//	go run ./cmd/redisbench -rounds 1 -dur 100ms -ceiling-n 2000   # smoke
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratebucket/ratebucket/bench"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "", "use this Redis server (host:port) instead of starting one; it is FLUSHALLed")
	rounds := flag.Int("rounds", 6, "rounds; every measurement is repeated once per round")
	dur := flag.Duration("dur", time.Second, "duration of one throughput measurement")
	concs := flag.String("conc", "1,16,64", "comma-separated goroutine counts")
	numKeys := flag.Int("keys", 100_000, "distinct keys")
	implList := flag.String("impls", "", "comma-separated implementations (default: all)")
	ceiling := flag.String("ceiling", "50x1,64x1,50x16,64x16", "redis-benchmark runs as clients x pipeline; empty for none")
	ceilingScripts := flag.String("ceiling-scripts", "ratebucket,redis_rate,refscript", "implementations whose EVALSHA redis-benchmark replays")
	ceilingN := flag.Int("ceiling-n", 100_000, "requests per unpipelined redis-benchmark run (x4 when pipelined)")
	mem := flag.Bool("mem", true, "measure memory per key")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{*addr, *rounds, *dur, *concs, *numKeys, *implList, *ceiling, *ceilingScripts, *ceilingN, *mem}); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	addr                         string
	rounds                       int
	dur                          time.Duration
	concs                        string
	numKeys                      int
	impls, ceiling, ceilingImpls string
	ceilingN                     int
	mem                          bool
}

func run(ctx context.Context, cfg config) error {
	addr, stop, err := bench.ServeRedis(cfg.addr, "redisbench")
	if err != nil {
		return err
	}
	defer stop()
	cfg.addr = addr
	var concs []int
	for _, s := range strings.Split(cfg.concs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-conc: bad count %q", s)
		}
		concs = append(concs, n)
	}
	impls := bench.OnRedis
	if cfg.impls != "" {
		want := strings.Split(cfg.impls, ",")
		impls = slices.DeleteFunc(slices.Clone(impls), func(i bench.RedisImpl) bool { return !slices.Contains(want, i.Name) })
	}
	// One client for everyone, with a connection per goroutine, as
	// redis-benchmark -c has.
	c := redis.NewClient(&redis.Options{Addr: cfg.addr, PoolSize: slices.Max(concs) + 4, ContextTimeoutEnabled: true})
	defer c.Close()
	version, err := bench.RedisVersion(ctx, c)
	if err != nil {
		return err
	}
	fmt.Printf("redis-version: %s\n", version)

	var cells []cell
	for _, impl := range impls {
		l, closeFn, err := impl.New(c, bench.Article)
		if err != nil {
			return fmt.Errorf("%s: %w", impl.Name, err)
		}
		defer closeFn()
		keys := bench.Keys(cfg.numKeys, impl.Prefix)
		// Warm up: the pool's connections and the script cache.
		if ld, err := bench.RunLoad(l, keys, false, slices.Max(concs), 200*time.Millisecond); err != nil || ld.Errors > 0 {
			err = cmp.Or(err, ld.FirstErr)
			return fmt.Errorf("%s: warm-up: %w", impl.Name, err)
		}
		if err := bench.FlushSync(ctx, c); err != nil { // implementations share key names
			return err
		}
		cells = append(cells, cell{impl, l, keys})
	}
	ceilings, err := captureCeilings(ctx, c, cells, cfg)
	if err != nil {
		return err
	}

	for round := 0; round < cfg.rounds; round++ {
		for _, hot := range []bool{false, true} {
			keys := "distinct"
			if hot {
				keys = "hot"
			}
			for _, conc := range concs {
				for _, cl := range cells {
					if err := bench.FlushSync(ctx, c); err != nil {
						return err
					}
					cpu0, err := bench.ServerCPU(ctx, c)
					if err != nil {
						return err
					}
					reads0, err := bench.ServerReads(ctx, c)
					if err != nil {
						return err
					}
					ld, err := bench.RunLoad(cl.l, cl.keys, hot, conc, cfg.dur)
					if err != nil {
						return fmt.Errorf("%s keys=%s conc=%d: %w", cl.impl.Name, keys, conc, err)
					}
					cpu1, err := bench.ServerCPU(ctx, c)
					if err != nil {
						return err
					}
					reads1, err := bench.ServerReads(ctx, c)
					if err != nil {
						return err
					}
					// The INFO calls are reads too: two before reads1 is taken.
					reads := max(reads1-reads0-2, 1)
					if ld.FirstErr != nil {
						log.Printf("%s keys=%s conc=%d: %d errors, first: %v", cl.impl.Name, keys, conc, ld.Errors, ld.FirstErr)
					}
					fmt.Printf("BenchmarkRedis/keys=%s/conc=%d/impl=%s\t%d\t%.0f checks/s\t%.1f p50-us\t%.1f p99-us\t%.3f admit/op\t%.4f err/op\t%.2f srvcpu-us/op\t%.2f checks/read\n",
						keys, conc, cl.impl.Name, ld.Calls, ld.PerSecond(), us(ld.P50), us(ld.P99), float64(ld.Admitted)/float64(ld.Calls),
						float64(ld.Errors)/float64(ld.Calls+ld.Errors), (cpu1-cpu0)*1e6/float64(ld.Calls), float64(ld.Calls+ld.Errors)/float64(reads))
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
		}
		for _, ce := range ceilings {
			if err := bench.FlushSync(ctx, c); err != nil {
				return err
			}
			n := cfg.ceilingN
			if ce.pipeline > 1 {
				n *= 4
			}
			cpu0, err := bench.ServerCPU(ctx, c)
			if err != nil {
				return err
			}
			res, err := bench.RedisBenchmark(cfg.addr, ce.clients, ce.pipeline, n, cfg.numKeys, ce.cmd)
			if err != nil {
				return fmt.Errorf("ceiling %s: %w", ce.name, err)
			}
			cpu1, err := bench.ServerCPU(ctx, c)
			if err != nil {
				return err
			}
			fmt.Printf("BenchmarkRedisCeiling/script=%s/c=%d/P=%d\t%d\t%.0f checks/s\t%.1f p50-us\t%.1f p99-us\t%.2f srvcpu-us/op\n",
				ce.name, ce.clients, ce.pipeline, n, res.PerSecond, us(res.P50), us(res.P99), (cpu1-cpu0)*1e6/float64(n))
		}
	}

	if cfg.mem {
		for _, impl := range impls {
			l, closeFn, err := impl.New(c, bench.Mem)
			if err != nil {
				return err
			}
			m, err := bench.MeasureMemory(ctx, c, l, bench.Keys(cfg.numKeys, impl.Prefix))
			closeFn()
			if err != nil {
				return fmt.Errorf("%s: memory: %w", impl.Name, err)
			}
			fmt.Printf("BenchmarkRedisMemory/impl=%s\t%d\t%d usage-B/key\t%.1f delta-B/key\t%d keylen-B\t%d keys\n",
				impl.Name, m.Keys, m.Usage, m.DeltaPerKey, m.KeyLen, m.Keys)
		}
	}
	return bench.FlushSync(ctx, c)
}

// ceilingRun is one redis-benchmark configuration of one script.
type ceilingRun struct {
	name              string
	clients, pipeline int
	cmd               []string
}

// cell is one implementation ready to measure, with its key set.
type cell struct {
	impl bench.RedisImpl
	l    bench.Limiter
	keys []string
}

// captureCeilings captures the EVALSHA each chosen implementation sends and
// turns its key into a random one of the same shape for redis-benchmark:
// prefix, "user:" and the 12 digits redis-benchmark writes for __rand_int__.
// A second key (ratebucket's policy registry) stays as it was.
func captureCeilings(ctx context.Context, c *redis.Client, cells []cell, cfg config) ([]ceilingRun, error) {
	if cfg.ceiling == "" {
		return nil, nil
	}
	var runs []ceilingRun
	for _, cl := range cells {
		if !slices.Contains(strings.Split(cfg.ceilingImpls, ","), cl.impl.Name) {
			continue
		}
		if err := bench.FlushSync(ctx, c); err != nil {
			return nil, err
		}
		cmd, err := bench.CaptureEval(ctx, c, func() error {
			_, err := cl.l.Allow(cl.keys[0])
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: capture: %w", cl.impl.Name, err)
		}
		// One key, or two: ratebucket's second is the policy
		// registry, one per prefix, which the replay keeps as captured.
		if len(cmd) < 4 || (cmd[2] != "1" && (cmd[2] != "2" || len(cmd) < 5)) {
			return nil, fmt.Errorf("%s: captured %q: want one key, or a key and its registry", cl.impl.Name, cmd)
		}
		log.Printf("%s sends %q", cl.impl.Name, cmd)
		cmd[3] = cl.impl.Prefix + "user:__rand_int__"
		for _, spec := range strings.Split(cfg.ceiling, ",") {
			cs, ps, ok := strings.Cut(spec, "x")
			clients, err1 := strconv.Atoi(cs)
			pipeline, err2 := strconv.Atoi(ps)
			if !ok || err1 != nil || err2 != nil || clients < 1 || pipeline < 1 {
				return nil, fmt.Errorf("-ceiling: bad run %q: want CLIENTSxPIPELINE", spec)
			}
			runs = append(runs, ceilingRun{cl.impl.Name, clients, pipeline, cmd})
		}
	}
	return runs, nil
}

// us converts a Duration to fractional microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
