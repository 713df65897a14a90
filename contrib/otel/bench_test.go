package otelobserver_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratebucket/ratebucket/algo"
	otelobserver "github.com/ratebucket/ratebucket/contrib/otel"
	"github.com/ratebucket/ratebucket/internal/obstest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// BenchmarkTake measures what the OpenTelemetry adapter, on the SDK's
// MeterProvider with a ManualReader, adds to a memstore Take with a route
// and a policy in the context: on one hot key and over 100,000 keys in
// turn, as contrib/prometheus's BenchmarkTake. Compare with benchstat
// -col /observer, on cpu-ns/op where the machine is loaded.
func BenchmarkTake(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	obs, err := otelobserver.New(mp, otelobserver.Options{})
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
	}{{"none", filled()}, {"otel", observe.Wrap(filled(), "memory", obs)}}
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
