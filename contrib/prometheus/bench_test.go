package promobserver_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebucket/ratebucket/algo"
	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// BenchmarkTake measures what the Prometheus adapter adds to a memstore
// Take on one hot key (the cheapest store call there is, so the worst
// ratio): observer=none is memstore itself, observer=prometheus the same
// store observed, without labels and with a route and a policy. Compare
// with benchstat -col /observer. On a loaded machine compare cpu-ns/op,
// the CPU time of the benchmark's thread per call, which leaves out the time
// the thread waited for a core.
func BenchmarkTake(b *testing.B) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer ms.Close()
	obs, err := promobserver.New(prometheus.NewRegistry(), promobserver.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := algo.PerSecond(1).Burst(1_000_000_000)
	labelled := store.WithLabels(context.Background(), store.Labels{Route: "GET /api/feed", Policy: "burst"})
	for _, bc := range []struct {
		name string
		s    store.Store
		ctx  context.Context
	}{
		{"observer=none/labels=none", ms, context.Background()},
		{"observer=nop/labels=none", store.Observe(ms, "memory", store.ObserverFuncs{}), context.Background()},
		{"observer=prometheus/labels=none", store.Observe(ms, "memory", obs), context.Background()},
		{"observer=none/labels=route", ms, labelled},
		{"observer=prometheus/labels=route", store.Observe(ms, "memory", obs), labelled},
	} {
		b.Run("keys=1/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu := threadCPU()
			for b.Loop() {
				bc.s.Take(bc.ctx, "hot", p, 1)
			}
			if cpu >= 0 {
				b.ReportMetric(float64(threadCPU()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// BenchmarkTakeKeys is BenchmarkTake over 100,000 keys in turn, each
// holding a bucket: the map and cache misses of a store with many clients,
// against the same fixed cost of observing.
func BenchmarkTakeKeys(b *testing.B) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer ms.Close()
	obs, err := promobserver.New(prometheus.NewRegistry(), promobserver.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := algo.PerSecond(1).Burst(1_000_000_000)
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		ms.Take(context.Background(), keys[i], p, 1)
	}
	labelled := store.WithLabels(context.Background(), store.Labels{Route: "GET /api/feed", Policy: "burst"})
	for _, bc := range []struct {
		name string
		s    store.Store
	}{{"observer=none", ms}, {"observer=prometheus", store.Observe(ms, "memory", obs)}} {
		b.Run("keys=100k/"+bc.name+"/labels=route", func(b *testing.B) {
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu, i := threadCPU(), 0
			for b.Loop() {
				bc.s.Take(labelled, keys[i], p, 1)
				if i++; i == len(keys) {
					i = 0
				}
			}
			if cpu >= 0 {
				b.ReportMetric(float64(threadCPU()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
