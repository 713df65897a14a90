// Package cputime measures the in-process limiters by CPU time per call
// (getrusage, summed over threads) besides wall time. On a loaded machine
// the wall time of a RunParallel benchmark mostly measures how much of the
// machine the benchmark got; CPU time per call does not grow when the OS
// deschedules its threads. It lives apart from package bench so that
// run.sh's `go test -bench .` does not add these rows to its tables.
//
//	cd bench && go test -run '^$' -bench . -count 6 ./cputime
package cputime

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/bench"
	"github.com/ratebucket/ratebucket/memstore"
)

var keys = bench.Keys(100_000, "")

// cpuTime is the process's user+system CPU time, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hotKey is the key of bench's HotKey benchmark.
var hotKey = []string{"rl:user:000000000042"}

// prefill takes once from every key of ks, so that the measured calls find
// their buckets in place (bench's TestSpread checks that keys do not share).
func prefill(b *testing.B, l bench.Limiter, ks []string) {
	for _, k := range ks {
		if _, err := l.Allow(k); err != nil {
			b.Fatal(err)
		}
	}
}

// run measures l over the pre-filled keys ks, from RunParallel goroutines
// or from one loop, and reports cpu-ns/op.
func run(b *testing.B, l bench.Limiter, ks []string, parallel bool) {
	prefill(b, l, ks)
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	if parallel {
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)*7919) % len(ks)
			for pb.Next() {
				if _, err := l.Allow(ks[i]); err != nil {
					b.Error(err)
					return
				}
				if i++; i == len(ks) {
					i = 0
				}
			}
		})
	} else {
		for i := range b.N {
			if _, err := l.Allow(ks[i%len(ks)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkDistinctKeys is bench's DistinctKeys (parallel=false) and
// ParallelDistinctKeys (parallel=true) with CPU time per call.
func BenchmarkDistinctKeys(b *testing.B) {
	for _, p := range []bench.Policy{bench.Admit, bench.Deny} {
		for _, impl := range bench.InProc {
			for _, par := range []bool{false, true} {
				b.Run(fmt.Sprintf("policy=%s/impl=%s/parallel=%v", p.Name, impl.Name, par), func(b *testing.B) {
					l, stop, err := impl.New(p)
					if err != nil {
						b.Fatal(err)
					}
					defer stop()
					run(b, l, keys, par)
				})
			}
		}
	}
}

// BenchmarkHotKey is bench's HotKey with CPU time per call: one key, from
// one loop.
func BenchmarkHotKey(b *testing.B) {
	for _, p := range []bench.Policy{bench.Admit, bench.Deny} {
		for _, impl := range bench.InProc {
			b.Run(fmt.Sprintf("policy=%s/impl=%s", p.Name, impl.Name), func(b *testing.B) {
				l, stop, err := impl.New(p)
				if err != nil {
					b.Fatal(err)
				}
				defer stop()
				run(b, l, hotKey, false)
			})
		}
	}
}

// memLimiter is memstore with a given shard count, as bench's own
// adapter calls it.
type memLimiter struct {
	s *memstore.Store
	p algo.Policy
}

func (m memLimiter) Allow(key string) (bool, error) {
	res, err := m.s.Take(context.Background(), store.Request{Key: key, Policy: m.p, Cost: 1})
	return res.Allowed, err
}

// BenchmarkShards runs memstore with 8 (the default on 2 cores), 64 and
// 1024 shards: whether the parallel rows depend on the shard count (lock
// contention, shard cache lines moving between cores).
func BenchmarkShards(b *testing.B) {
	for _, p := range []bench.Policy{bench.Admit, bench.Deny} {
		for _, shards := range []int{8, 64, 1024} {
			for _, par := range []bool{false, true} {
				b.Run(fmt.Sprintf("policy=%s/shards=%d/parallel=%v", p.Name, shards, par), func(b *testing.B) {
					ap, err := p.Algo()
					if err != nil {
						b.Fatal(err)
					}
					s, err := memstore.New(memstore.Config{Shards: shards})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					run(b, memLimiter{s, ap}, keys, par)
				})
			}
		}
	}
}
