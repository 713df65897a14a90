package promobserver_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebucket/ratebucket/algo"
	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/internal/obstest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// BenchmarkTake measures what observing adds to a memstore Take with a
// route and a policy in the context, as httplimit passes them: on one hot
// key (the cheapest store call there is, so the worst ratio) and over
// 100,000 keys in turn, each holding a bucket (the map and cache misses of
// a store with many clients). observer=none is memstore itself (what
// observe.Wrap returns without an Observer), nop the store observed by
// an Observer that does nothing with each decision it receives, prometheus
// this package's Observer. Compare with benchstat -col /observer. On a
// loaded machine compare cpu-ns/op, the CPU time of the benchmark's thread
// per call, which leaves out the time the thread waited for a core.
func BenchmarkTake(b *testing.B) {
	obs, err := promobserver.New(prometheus.NewRegistry(), promobserver.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := algo.PerSecond(1).Burst(1_000_000_000)
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	// A store of its own for each row (see obstest.Filled).
	filled := func() store.Store {
		return obstest.Filled(b, func() (*memstore.Store, error) { return memstore.New(memstore.Config{}) }, keys, p)
	}
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /api/feed", Policy: "burst"})
	observers := []struct {
		name string
		s    store.Store
	}{
		{"none", observe.Wrap(filled(), "memory", nil)},
		{"nop", observe.Wrap(filled(), "memory", observe.Funcs{})},
		{"prometheus", observe.Wrap(filled(), "memory", obs)},
	}
	for _, n := range []int{1, len(keys)} {
		for _, o := range observers {
			b.Run("keys="+strconv.Itoa(n)+"/observer="+o.name, func(b *testing.B) {
				b.ReportAllocs()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu, i := obstest.ThreadCPU(), 0
				for b.Loop() {
					o.s.Take(ctx, store.Request{Key: keys[i], Policy: p, Cost: 1})
					if i++; i == n {
						i = 0
					}
				}
				if cpu >= 0 {
					b.ReportMetric(float64(obstest.ThreadCPU()-cpu)/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
