package otelobserver_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratebucket/ratebucket/algo"
	otelobserver "github.com/ratebucket/ratebucket/contrib/otel"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// BenchmarkTake measures what the OpenTelemetry adapter, on the SDK's
// MeterProvider, adds to a memstore Take on one hot key. Compare with
// benchstat -col /observer.
func BenchmarkTake(b *testing.B) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer ms.Close()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	obs, err := otelobserver.New(mp, otelobserver.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := algo.PerSecond(1).Burst(1_000_000_000)
	ctx := store.WithLabels(context.Background(), store.Labels{Route: "GET /api/feed", Policy: "burst"})
	for _, bc := range []struct {
		name string
		s    store.Store
	}{{"observer=none", ms}, {"observer=otel", store.Observe(ms, "memory", obs)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.s.Take(ctx, "hot", p, 1)
			}
		})
	}
}
