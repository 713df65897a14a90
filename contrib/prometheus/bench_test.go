package promobserver_test

import (
	"context"
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
// with benchstat -col /observer.
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
		{"observer=prometheus/labels=none", store.Observe(ms, "memory", obs), context.Background()},
		{"observer=none/labels=route", ms, labelled},
		{"observer=prometheus/labels=route", store.Observe(ms, "memory", obs), labelled},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.s.Take(bc.ctx, "hot", p, 1)
			}
		})
	}
}
