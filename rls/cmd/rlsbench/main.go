// Command rlsbench measures rate-limit servers side by side in one run:
// ratebucket-rls and, when it is given, envoyproxy/ratelimit, each a
// separate process on the same redis-server with the same configuration
// and descriptors, driven by 1, 16 and 64 concurrent gRPC clients (each
// its own connection) calling ShouldRateLimit; and, for scale,
// ratebucket's in-process library call (redisstore.Take) on the same
// Redis. It prints requests per second and latency percentiles per cell,
// the median of -rounds rounds, the implementations interleaved within a
// round so that load from other processes on the machine falls on all of
// them alike. rls/bench.sh builds both servers and runs it.
//
//	rlsbench -ours ./ratebucket-rls -peer ./envoy-ratelimit -duration 3s -rounds 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/store"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// config is the one limit both servers enforce: 1000 a second per
// client, over -keys clients, so that almost every request is admitted
// and the cost measured is a decision with its Redis write.
const config = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000\n"

var policy = algo.PerSecond(1000).Burst(1000)

func main() {
	var (
		ours     = flag.String("ours", "", "ratebucket-rls binary (required)")
		peer     = flag.String("peer", "", "envoyproxy/ratelimit binary (optional)")
		peerEnv  = flag.String("peer-env", ";REDIS_PIPELINE_WINDOW=150us", "the peer's variants, separated by ';': extra environment for each (empty: its defaults)")
		clients  = flag.String("clients", "1,16,64", "concurrent gRPC clients per cell")
		duration = flag.Duration("duration", 3*time.Second, "measuring time per cell")
		rounds   = flag.Int("rounds", 3, "rounds; each cell reports the median")
		keys     = flag.Int("keys", 10000, "distinct descriptor values")
	)
	flag.Parse()
	if err := run(*ours, *peer, *peerEnv, *clients, *duration, *rounds, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

// impl is one thing measured: call makes one decision for key.
type impl struct {
	name  string
	setup func(clients int) (call func(ctx context.Context, worker int, key string) error, done func(), err error)
}

func run(ours, peer, peerEnv, clientList string, d time.Duration, rounds, keys int) error {
	if ours == "" {
		return errors.New("-ours is required")
	}
	var cs []int
	for _, s := range strings.Split(clientList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-clients %q", clientList)
		}
		cs = append(cs, n)
	}
	dir, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "redis"), 0o755); err != nil {
		return err
	}
	rds, err := redistest.Launch(filepath.Join(dir, "redis"))
	if err != nil {
		return err
	}
	defer rds.Stop()
	cfgDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(config), 0o644); err != nil {
		return err
	}

	var impls []impl
	oursAddr, stop, err := start(ours, []string{"-config", cfgDir, "-grpc", "", "-http", "", "-redis", rds.Addr, "-redis-prefix", "rbb:"}, nil)
	if err != nil {
		return fmt.Errorf("ratebucket-rls: %w", err)
	}
	defer stop()
	impls = append(impls, impl{"ratebucket-rls", grpcImpl(oursAddr)})
	for _, variant := range strings.Split(peerEnv, ";") {
		if peer == "" {
			break
		}
		env := []string{"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rds.Addr,
			"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1"}
		name := "envoyproxy/ratelimit"
		if variant = strings.TrimSpace(variant); variant != "" {
			env = append(env, strings.Fields(variant)...)
			name += " " + variant
		}
		peerAddr, stop, err := start(peer, nil, env)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer stop()
		impls = append(impls, impl{name, grpcImpl(peerAddr)})
	}
	impls = append(impls, impl{"in-process redisstore.Take", func(int) (func(context.Context, int, string) error, func(), error) {
		c := redis.NewClient(&redis.Options{Addr: rds.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
		rs, err := redisstore.New(c, redisstore.Config{Prefix: "rbl:"})
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, _ int, key string) error {
			_, err := rs.Take(ctx, store.Request{Key: key, Policy: policy, Cost: 1})
			return err
		}, func() { rs.Close(); c.Close() }, nil
	}})

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("rlsbench: %d cores, GOMAXPROCS default, load average at start %s", numCPU(), load)
	fmt.Printf("%d keys, %v per cell, median of %d rounds; one redis-server (%s)\n\n", keys, d, rounds, rds.Addr)
	results := map[string][]cell{}
	for r := range rounds {
		for _, c := range cs {
			for _, im := range impls {
				res, err := measure(im, c, d, keys, r)
				if err != nil {
					return fmt.Errorf("%s, %d clients: %w", im.name, c, err)
				}
				k := im.name + "\x00" + strconv.Itoa(c)
				results[k] = append(results[k], res)
				fmt.Fprintf(os.Stderr, "round %d %-50s %3d clients: %8.0f req/s p50 %v p99 %v\n", r+1, im.name, c, res.rps, res.p50, res.p99)
			}
		}
	}
	fmt.Println("| implementation | clients | req/s | p50 | p99 | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, c := range cs {
		for _, im := range impls {
			m := median(results[im.name+"\x00"+strconv.Itoa(c)])
			fmt.Printf("| %s | %d | %.0f | %v | %v | %d |\n", im.name, c, m.rps, m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), m.errors)
		}
	}
	return nil
}

// cell is one measurement.
type cell struct {
	rps      float64
	p50, p99 time.Duration
	errors   int
}

func median(cs []cell) cell {
	slices.SortFunc(cs, func(a, b cell) int { return int(a.rps - b.rps) })
	return cs[len(cs)/2]
}

// measure runs clients workers against im for d (after a warm-up of
// d/6) and returns the throughput and latency percentiles.
func measure(im impl, clients int, d time.Duration, keys, round int) (cell, error) {
	call, done, err := im.setup(clients)
	if err != nil {
		return cell{}, err
	}
	defer done()
	// Calls carry no deadline: the workers stop between calls once the
	// time is up, so no call is cut short and counted as an error.
	warm := d / 6
	start := time.Now()
	var over atomic.Bool
	timer := time.AfterFunc(warm+d, func() { over.Store(true) })
	defer timer.Stop()
	ctx := context.Background()
	lat := make([][]time.Duration, clients)
	errs := make([]int, clients)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			x := uint64(w+1)*0x9E3779B97F4A7C15 + uint64(round)
			for !over.Load() {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				key := "client-" + strconv.FormatUint(x%uint64(keys), 10)
				t0 := time.Now()
				err := call(ctx, w, key)
				if t0.Sub(start) < warm || over.Load() {
					continue
				}
				if err != nil {
					if errs[w] == 0 && w == 0 {
						fmt.Fprintf(os.Stderr, "%s: first error of worker 0: %v\n", im.name, err)
					}
					errs[w]++
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	out := cell{}
	for w := range clients {
		all = append(all, lat[w]...)
		out.errors += errs[w]
	}
	if len(all) == 0 {
		return cell{}, errors.New("no successful call")
	}
	slices.Sort(all)
	out.rps = float64(len(all)) / d.Seconds()
	out.p50 = all[len(all)/2]
	out.p99 = all[len(all)*99/100]
	return out, nil
}

// grpcImpl calls ShouldRateLimit at addr, one connection per client.
func grpcImpl(addr string) func(int) (func(context.Context, int, string) error, func(), error) {
	return func(clients int) (func(context.Context, int, string) error, func(), error) {
		conns := make([]*grpc.ClientConn, clients)
		rl := make([]pb.RateLimitServiceClient, clients)
		for i := range conns {
			c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, nil, err
			}
			conns[i], rl[i] = c, pb.NewRateLimitServiceClient(c)
		}
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		return func(ctx context.Context, w int, key string) error {
			resp, err := rl[w].ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{
				{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "client", Value: key}}}}})
			if err == nil && resp.Statuses[0].CurrentLimit == nil {
				err = errors.New("the server matched no limit")
			}
			return err
		}, closeAll, nil
	}
}

// start runs a server binary on a free loopback gRPC port and waits until
// it answers ShouldRateLimit. args get "-grpc" and "-http" filled in;
// with env (the peer) the ports go in GRPC_PORT, PORT and DEBUG_PORT.
func start(bin string, args, env []string) (addr string, stop func(), err error) {
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command(bin, args...)
	if env == nil {
		for i, a := range args {
			switch a {
			case "-grpc":
				args[i+1] = addr
			case "-http":
				args[i+1] = "127.0.0.1:" + strconv.Itoa(ports[1])
			}
		}
		cmd = exec.Command(bin, args...)
	} else {
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env, "GRPC_PORT="+strconv.Itoa(ports[0]), "PORT="+strconv.Itoa(ports[1]), "DEBUG_PORT="+strconv.Itoa(ports[2]))
	}
	if env == nil {
		cmd.Stderr = os.Stderr // ours logs little; the peer logs a warning per setting
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }
	call, done, err := grpcImpl(addr)(1)
	if err != nil {
		stop()
		return "", nil, err
	}
	defer done()
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = call(ctx, 0, "warmup")
		cancel()
		if err == nil {
			return addr, stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("not answering at %s: %w", addr, err)
}

func numCPU() int { return runtime.NumCPU() }
