// Command redisprof profiles one Redis-backed implementation at one
// concurrency, in a closed loop like bench.RunLoad (distinct keys, or one
// hot key), and prints what redisbench does not: the client's CPU time per
// check (getrusage, so that a loaded machine does not inflate it), its
// allocations per check, the server's CPU per check, read events per check
// and INFO commandstats usec per call, and for ratebucket the distribution
// of calls per pipeline (from redisstore's Observer). With -cpuprofile it
// writes the client's CPU profile, sampled at 1 kHz (the runtime warns
// that the rate was set before StartCPUProfile; the profile is valid).
//
//	go run ./cmd/redisprof -impl ratebucket -conc 16 -dur 20s -cpuprofile /tmp/rb16.pprof
//	go tool pprof -top -cum /tmp/rb16.pprof
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/bench"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/redis/go-redis/v9"
)

type lim interface{ Allow(string) (bool, error) }

type rs struct {
	s *redisstore.Store
	p algo.Policy
}

func (r rs) Allow(k string) (bool, error) {
	res, err := r.s.Take(context.Background(), store.Request{Key: k, Policy: r.p, Cost: 1})
	return res.Allowed, err
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func info(ctx context.Context, c *redis.Client, sec string) map[string]string {
	s, err := c.Info(ctx, sec).Result()
	if err != nil {
		log.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = v
		}
	}
	return m
}

func f(m map[string]string, k string) float64 { x, _ := strconv.ParseFloat(m[k], 64); return x }

func cmdstat(m map[string]string, name string) (calls, usec float64) {
	v := m["cmdstat_"+name]
	for _, kv := range strings.Split(v, ",") {
		k, x, _ := strings.Cut(kv, "=")
		switch k {
		case "calls":
			calls, _ = strconv.ParseFloat(x, 64)
		case "usec":
			usec, _ = strconv.ParseFloat(x, 64)
		}
	}
	return
}

func main() {
	impl := flag.String("impl", "ratebucket", "an implementation of bench.OnRedis")
	conc := flag.Int("conc", 16, "goroutines")
	dur := flag.Duration("dur", 5*time.Second, "duration")
	hot := flag.Bool("hot", false, "one hot key")
	prof := flag.String("cpuprofile", "", "client CPU profile")
	memprof := flag.String("memprofile", "", "client allocation profile of the measured loop (go tool pprof -sample_index=alloc_space)")
	addr := flag.String("addr", "", "redis address (default: start one)")
	delay := flag.Duration("maxdelay", 0, "PipelineConfig.MaxDelay (0 default)")
	writers := flag.Int("writers", 0, "PipelineConfig.Writers (0 default)")
	flag.Parse()
	ctx := context.Background()
	if *addr == "" {
		dir, err := os.MkdirTemp("", "redisprof")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		srv, err := bench.StartRedis(dir)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		*addr = srv.Addr
	}
	c := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: *conc + 4, ContextTimeoutEnabled: true})
	defer c.Close()
	c.FlushAll(ctx)
	var sizes sync.Map // size -> *atomic.Int64
	var l lim
	pol := bench.Article
	switch *impl {
	case "ratebucket", "ratebucket-direct":
		ap, _ := pol.Algo()
		obs := observe.Funcs{PipelineBatch: func(b observe.PipelineBatch) {
			v, _ := sizes.LoadOrStore(b.Size, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}}
		s, err := redisstore.New(c, redisstore.Config{Prefix: "rl:", Observer: obs,
			Pipeline: redisstore.PipelineConfig{Disabled: *impl == "ratebucket-direct", MaxDelay: *delay, Writers: *writers}})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		l = rs{s, ap}
	default:
		for _, ri := range bench.OnRedis {
			if ri.Name == *impl {
				x, cl, err := ri.New(c, pol)
				if err != nil {
					log.Fatal(err)
				}
				defer cl()
				l = x
			}
		}
	}
	if l == nil {
		log.Fatalf("unknown -impl %q", *impl)
	}
	prefix := "rl:"
	for _, ri := range bench.OnRedis {
		if ri.Name == *impl {
			prefix = ri.Prefix
		}
	}
	keys := bench.Keys(100_000, prefix)
	// warm: load scripts, open connections
	var wg sync.WaitGroup
	for g := range *conc {
		wg.Go(func() { l.Allow(keys[g]) })
	}
	wg.Wait()
	sizes.Range(func(k, v any) bool { sizes.Delete(k); return true })
	c.ConfigResetStat(ctx)
	cpu0 := info(ctx, c, "cpu")
	st0 := info(ctx, c, "stats")
	if *prof != "" {
		pf, _ := os.Create(*prof)
		runtime.SetCPUProfileRate(1000)
		pprof.StartCPUProfile(pf)
	}
	if *memprof != "" {
		runtime.MemProfileRate = 512
		runtime.GC()
	}
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cc0 := cpuNow()
	t0 := time.Now()
	deadline := t0.Add(*dur)
	var calls, errs atomic.Int64
	for g := range *conc {
		wg.Go(func() {
			i := g * len(keys) / *conc
			var n int64
			for time.Now().Before(deadline) {
				k := keys[0]
				if !*hot {
					k = keys[i]
					if i++; i == len(keys) {
						i = 0
					}
				}
				if _, err := l.Allow(k); err != nil {
					errs.Add(1)
					continue
				}
				n++
			}
			calls.Add(n)
		})
	}
	wg.Wait()
	el := time.Since(t0)
	cc := cpuNow() - cc0
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	if *prof != "" {
		pprof.StopCPUProfile()
	}
	if *memprof != "" {
		mf, err := os.Create(*memprof)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(mf, 0); err != nil {
			log.Fatal(err)
		}
		mf.Close()
	}
	cpu1 := info(ctx, c, "cpu")
	st1 := info(ctx, c, "stats")
	cs := info(ctx, c, "commandstats")
	n := float64(calls.Load())
	srvCPU := (f(cpu1, "used_cpu_user") + f(cpu1, "used_cpu_sys") - f(cpu0, "used_cpu_user") - f(cpu0, "used_cpu_sys")) * 1e6
	reads := f(st1, "total_reads_processed") - f(st0, "total_reads_processed")
	writes := f(st1, "total_writes_processed") - f(st0, "total_writes_processed")
	fmt.Printf("impl=%s conc=%d hot=%v: %.0f checks in %v = %.1fk/s, errors %d\n", *impl, *conc, *hot, n, el.Round(time.Millisecond), n/el.Seconds()/1e3, errs.Load())
	fmt.Printf("  client CPU %.1f µs/check (%.2f cores); allocs %.1f/check, %.0f B/check; GCs %d\n", cc.Seconds()*1e6/n, cc.Seconds()/el.Seconds(),
		float64(ms1.Mallocs-ms0.Mallocs)/n, float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, ms1.NumGC-ms0.NumGC)
	fmt.Printf("  server CPU %.1f µs/check (%.2f cores); server reads %.3f/check, writes %.3f/check (checks per read event %.2f)\n", srvCPU/n, srvCPU/1e6/el.Seconds(), reads/n, writes/n, n/reads)
	for _, name := range []string{"evalsha", "eval", "get", "set", "incrby", "evalsha_ro", "fcall"} {
		if k, u := cmdstat(cs, name); k > 0 {
			fmt.Printf("  cmdstat %s: %.0f calls, %.2f usec/call\n", name, k, u/k)
		}
	}
	type kv struct{ size, n int64 }
	var h []kv
	var tot, totc int64
	sizes.Range(func(k, v any) bool {
		x := v.(*atomic.Int64).Load()
		h = append(h, kv{int64(k.(int)), x})
		tot += x
		totc += x * int64(k.(int))
		return true
	})
	if tot > 0 {
		sort.Slice(h, func(i, j int) bool { return h[i].size < h[j].size })
		fmt.Printf("  pipelines %d, calls per pipeline mean %.2f; by size (pipelines, share of calls):", tot, float64(totc)/float64(tot))
		for _, e := range h {
			fmt.Printf(" %d:%d(%.0f%%)", e.size, e.n, 100*float64(e.size*e.n)/float64(totc))
		}
		fmt.Println()
	}
}
