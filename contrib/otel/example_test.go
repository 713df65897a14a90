package otelobserver_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratebucket/ratebucket/algo"
	otelobserver "github.com/ratebucket/ratebucket/contrib/otel"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// One Observer on the caller's MeterProvider (here an SDK one read by
// hand; in production, otel.GetMeterProvider() with an exporter), and the
// store wrapped with observe.Wrap.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := otelobserver.New(mp, otelobserver.Options{})
	if err != nil {
		panic(err)
	}
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer ms.Close()
	s := observe.Wrap(ms, "memory", obs)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "POST /login", Policy: "login"})
	for range 3 {
		s.Take(ctx, store.Request{Key: "alice", Policy: algo.PerMinute(1).Burst(2), Cost: 1})
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "ratebucket.decisions" {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if p.Value > 0 {
				result, _ := p.Attributes.Value("result")
				fmt.Printf("%s result=%s %d\n", m.Name, result.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// ratebucket.decisions result=allowed 2
	// ratebucket.decisions result=denied 1
}
