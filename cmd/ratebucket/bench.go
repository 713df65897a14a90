package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

var benchCommand = &command{
	name:    "bench",
	summary: "measure a store's throughput and latency (memstore, or your Redis)",
	usage: `bench [--redis URL] [--duration D] [--concurrency 1,16,64]
                        [--keys N]

Calls Store.Take as fast as it can from 1, 16 and 64 goroutines (by
default) for --duration each, and prints calls per second and the p50, p99
and p999 latency of one call. Use it to size a Redis: the numbers include
the network round trip from this machine.

Keys are spread over --keys distinct buckets (fresh ones for each row);
--keys 1 is one hot key. Denied calls cost about what admitted ones do, so
the policy matters little.
On Redis the keys live under a fresh prefix and are deleted afterwards.

Examples:
  ratebucket bench
  ratebucket bench --redis redis://127.0.0.1:6379 --duration 5s
  ratebucket bench --redis 10.0.0.5:6379 --concurrency 1,8,32,128 --keys 1
  ratebucket bench --redis 127.0.0.1:6379 --pipeline=false`,
	flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		rf := addRedisFlags(fs, "benchmark redisstore on this Redis instead of memstore")
		pf := addPolicyFlags(fs, 100, "2/s")
		duration := fs.Duration("duration", 2*time.Second, "how long to run each concurrency level")
		conc := concurrencyFlag{1, 16, 64}
		fs.Var(&conc, "concurrency", "comma-separated goroutine `counts`")
		keys := fs.Int("keys", 10_000, "number of distinct keys (1 = one hot key)")
		pipeline := fs.Bool("pipeline", true, "on Redis, let redisstore pipeline concurrent calls (--pipeline=false: one round trip each)")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			p, err := pf.policy()
			if err != nil {
				return err
			}
			if *duration <= 0 || *duration > time.Hour {
				return usagef("--duration %v: want a duration from 1ms to 1h, such as 2s", *duration)
			}
			if err := positiveInt("keys", *keys, 1); err != nil {
				return err
			}
			rf.noPipeline = !*pipeline
			return runBench(ctx, e, rf, benchConfig{policy: p, duration: *duration, concurrency: conc, keys: *keys})
		}
	},
}

// benchConfig is one bench invocation.
type benchConfig struct {
	policy      algo.Policy
	duration    time.Duration
	concurrency []int
	keys        int
}

// benchRow is the result of one concurrency level.
type benchRow struct {
	goroutines int
	calls      uint64
	admitted   uint64
	elapsed    time.Duration
	lat        histogram
	err        error
}

func runBench(ctx context.Context, e *env, rf *redisFlags, cfg benchConfig) error {
	be, err := openBackend(ctx, rf, "rb:bench:"+runID()+":")
	if err != nil {
		return err
	}
	defer be.close()
	// Each level gets keys of its own, so every row starts from full
	// buckets and its admitted share means the same thing.
	var used []string
	levelKeys := func(level int) []string {
		keys := make([]string, cfg.keys)
		for i := range keys {
			keys[i] = "L" + strconv.Itoa(level) + ":k" + strconv.Itoa(i)
		}
		used = append(used, keys...)
		return keys
	}
	desc := be.desc
	if be.onRedis() && rf.noPipeline {
		desc += " (no pipelining)"
	}
	fmt.Fprintf(e.stdout, "bench: %s, policy %v, %d key(s), %v per row\n\n", desc, cfg.policy, cfg.keys, cfg.duration)
	// Fixed widths rather than a tabwriter, so each row shows as soon as
	// its level has run.
	const row = "%10s %9s %9s %9s %9s %9s\n"
	fmt.Fprintf(e.stdout, row, "goroutines", "calls/s", "p50", "p99", "p999", "admitted")
	var firstErr error
	for level, g := range cfg.concurrency {
		if ctx.Err() != nil {
			break
		}
		r := benchLevel(ctx, be.store, cfg, levelKeys(level), g)
		if r.err != nil {
			firstErr = r.err
			break
		}
		fmt.Fprintf(e.stdout, row, strconv.Itoa(g), fmtRate(float64(r.calls)/r.elapsed.Seconds()),
			fmtDur(r.lat.quantile(0.50)), fmtDur(r.lat.quantile(0.99)), fmtDur(r.lat.quantile(0.999)),
			fmtPct(r.admitted, r.calls))
	}
	if be.onRedis() {
		if err := deleteKeys(context.WithoutCancel(ctx), be, used); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("deleting the benchmark keys: %w", err)
		}
	}
	if firstErr == nil {
		firstErr = ctx.Err() // interrupted: the table is partial
	}
	return firstErr
}

// benchLevel runs g goroutines for cfg.duration, each cycling through the
// keys from its own offset, and merges what they measured.
func benchLevel(ctx context.Context, s store.Store, cfg benchConfig, keys []string, g int) benchRow {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows := make([]benchRow, g)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for w := range rows {
		wg.Go(func() {
			r := &rows[w]
			for i := w * len(keys) / g; ; i++ {
				t0 := time.Now()
				if !t0.Before(deadline) || ctx.Err() != nil {
					return
				}
				res, err := s.Take(ctx, store.Request{Key: keys[i%len(keys)], Policy: cfg.policy, Cost: 1})
				if err != nil {
					r.err = err
					cancel()
					return
				}
				r.lat.record(time.Since(t0))
				r.calls++
				if res.Allowed {
					r.admitted++
				}
			}
		})
	}
	wg.Wait()
	total := benchRow{goroutines: g, elapsed: time.Since(start)}
	for i := range rows {
		total.calls += rows[i].calls
		total.admitted += rows[i].admitted
		total.lat.merge(&rows[i].lat)
		if total.err == nil {
			total.err = rows[i].err
		}
	}
	return total
}

// deleteKeys resets the benchmark's keys in batches, then the policy
// registries it made (redisstore.Store.ResetPolicies).
func deleteKeys(ctx context.Context, be *backend, keys []string) error {
	all := keys
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := be.rs.Reset(ctx, keys[:n]...); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return be.rs.ResetPolicies(ctx, all...)
}

// fmtRate formats a rate per second with a k or M suffix.
func fmtRate(x float64) string {
	switch {
	case x >= 1e6:
		return sig3(x/1e6) + "M"
	case x >= 1e3:
		return sig3(x/1e3) + "k"
	default:
		return sig3(x)
	}
}

// fmtPct formats a/b as a percentage with one decimal.
func fmtPct(a, b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}
