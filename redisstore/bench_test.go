package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// BenchmarkTake measures Take on a local server with the server clock, on
// distinct keys and on one hot key, at 1, 16 and 64 goroutines, with
// auto-pipelining on and off. At one goroutine each Take is one round
// trip either way; with more, pipelining answers many per round trip. The
// comparisons with other limiters live in the bench module.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	p := algo.PerSecond(1000).Burst(100)
	var n atomic.Int64
	keys := []struct {
		name string
		key  func() string
	}{
		{"distinct", func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }},
		{"hot", func() string { return "hot" }},
	}
	for _, pipe := range []bool{true, false} {
		s, err := redisstore.New(srv.Client(), redisstore.Config{
			Prefix:   redistest.Prefix(b),
			Pipeline: redisstore.PipelineConfig{Disabled: !pipe},
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		for _, kc := range keys {
			for _, g := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("pipeline=%v/%s/g=%d", pipe, kc.name, g), func(b *testing.B) {
					b.ReportAllocs()
					parallel(b, g, func() error {
						_, err := s.Take(context.Background(), store.Request{Key: kc.key(), Policy: p, Cost: 1})
						return err
					})
				})
			}
		}
	}
}

// parallel runs f b.N times in total over g goroutines.
func parallel(b *testing.B, g int, f func() error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := f(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkTakeCluster measures pipelined Take on a local cluster of three
// masters with the server clock, on distinct keys (spread over the
// masters by their slots) and on one hot key, at 1, 16 and 64 goroutines.
// Besides wall time it reports CPU time per Take, of this process
// (cpu-ns/op: getrusage) and of the three servers (redis-cpu-ns/op: INFO
// cpu), which a loaded machine does not inflate as it does wall time, and
// the Takes per pipeline sent (a Take sent alone is a pipeline of one).
func BenchmarkTakeCluster(b *testing.B) {
	cl := redistest.StartCluster(b)
	rdb := cl.Client()
	p := algo.PerSecond(1000).Burst(100)
	var pipes atomic.Int64
	obs := observe.Funcs{PipelineBatch: func(observe.PipelineBatch) { pipes.Add(1) }}
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(b), Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	var n atomic.Int64
	for _, kc := range []struct {
		name string
		key  func() string
	}{
		{"distinct", func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }},
		{"hot", func() string { return "hot" }},
	} {
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/g=%d", kc.name, g), func(b *testing.B) {
				b.ReportAllocs()
				cpu0, srv0 := processCPU(b), clusterCPU(b, rdb)
				pipes.Store(0)
				b.ResetTimer()
				parallel(b, g, func() error {
					_, err := s.Take(context.Background(), store.Request{Key: kc.key(), Policy: p, Cost: 1})
					return err
				})
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(clusterCPU(b, rdb)-srv0)/float64(b.N), "redis-cpu-ns/op")
				b.ReportMetric(float64(b.N)/float64(pipes.Load()), "takes/pipeline")
			})
		}
	}
}

// processCPU returns this process's user and system CPU time, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// clusterCPU returns the user and system CPU time the masters of rdb have
// used (INFO cpu), in ns.
func clusterCPU(b *testing.B, rdb *redis.ClusterClient) int64 {
	var total atomic.Int64
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\r\n") {
			name, v, _ := strings.Cut(line, ":")
			if name == "used_cpu_user" || name == "used_cpu_sys" {
				sec, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("INFO cpu %s: %w", name, err)
				}
				total.Add(int64(sec * 1e9))
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return total.Load()
}
