package otelobserver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/ratebucket/ratebucket/algo"
	otelobserver "github.com/ratebucket/ratebucket/contrib/otel"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// newObserver returns an Observer on an SDK MeterProvider read by hand.
func newObserver(t *testing.T, opts otelobserver.Options) (*sdkmetric.ManualReader, *otelobserver.Observer) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := otelobserver.New(mp, opts)
	if err != nil {
		t.Fatal(err)
	}
	return reader, obs
}

// collect reads every metric of the Observer's scope, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelobserver.ScopeName {
			t.Fatalf("scope %q, want %q", sm.Scope.Name, otelobserver.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func set(kv ...string) attribute.Set {
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(attrs...)
}

func counter(points ...metricdata.DataPoint[int64]) metricdata.Sum[int64] {
	return metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: points}
}

// TestMetrics feeds every kind of event and compares each instrument's
// data, as the SDK collects it, with what it must be.
func TestMetrics(t *testing.T) {
	reader, obs := newObserver(t, otelobserver.Options{LatencyBuckets: []float64{0.3, 1}, BatchBuckets: []float64{1, 8}})
	ctx := context.Background()
	login := observe.Decision{Op: observe.OpTake, Store: "redis", Policy: "login", Route: "POST /login", Cost: 1}
	for _, e := range []struct {
		out     observe.Outcome
		latency time.Duration
	}{{observe.OutcomeAllowed, 250 * time.Millisecond}, {observe.OutcomeAllowed, 0}, {observe.OutcomeDenied, 500 * time.Millisecond},
		{observe.OutcomeShadowDenied, 0}, {observe.OutcomeError, 2 * time.Second}} {
		d := login
		d.Outcome, d.Latency, d.Timed = e.out, e.latency, e.latency > 0
		obs.ObserveDecision(ctx, d)
	}
	obs.ObserveBreaker(observe.BreakerChange{Store: "redis", From: observe.BreakerClosed, To: observe.BreakerOpen, Err: errors.New("down")})
	obs.ObserveBreaker(observe.BreakerChange{Store: "redis", From: observe.BreakerOpen, To: observe.BreakerHalfOpen})
	obs.ObserveDenyCacheHit(ctx, observe.DenyCacheHit{Store: "redis", Policy: "login", Route: "POST /login"})
	obs.ObserveDenyCacheHit(ctx, observe.DenyCacheHit{Store: "redis", Policy: "login", Route: "POST /login"})
	obs.ObservePipelineBatch(observe.PipelineBatch{Store: "redis", Size: 1})
	obs.ObservePipelineBatch(observe.PipelineBatch{Store: "redis", Size: 12})
	obs.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Taken: 25, Local: 2})
	obs.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Returned: 9, Local: 14})
	obs.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Lost: 3})

	decision := func(result string, n int64) metricdata.DataPoint[int64] {
		return metricdata.DataPoint[int64]{Attributes: set("policy", "login", "result", result, "route", "POST /login", "store", "redis"), Value: n}
	}
	redis, leases := set("store", "redis"), set("store", "leases")
	want := []metricdata.Metrics{
		{Name: "ratebucket.decisions", Unit: "{decision}", Data: counter(decision("allowed", 2), decision("denied", 1), decision("shadow_denied", 1), decision("error", 1))},
		{Name: "ratebucket.store.latency", Unit: "s", Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality,
			DataPoints: []metricdata.HistogramDataPoint[float64]{{Attributes: redis, Count: 3, Bounds: []float64{0.3, 1}, BucketCounts: []uint64{1, 1, 1},
				Min: metricdata.NewExtrema(0.25), Max: metricdata.NewExtrema(2.0), Sum: 2.75}}}},
		{Name: "ratebucket.breaker.state", Unit: "1", Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{
			{Attributes: set("state", "closed", "store", "redis"), Value: 0},
			{Attributes: set("state", "open", "store", "redis"), Value: 0},
			{Attributes: set("state", "half-open", "store", "redis"), Value: 1}}}},
		{Name: "ratebucket.breaker.transitions", Unit: "{transition}", Data: counter(
			metricdata.DataPoint[int64]{Attributes: set("from", "closed", "store", "redis", "to", "open"), Value: 1},
			metricdata.DataPoint[int64]{Attributes: set("from", "open", "store", "redis", "to", "half-open"), Value: 1})},
		{Name: "ratebucket.denycache.hits", Unit: "{request}", Data: counter(
			metricdata.DataPoint[int64]{Attributes: set("policy", "login", "route", "POST /login", "store", "redis"), Value: 2})},
		{Name: "ratebucket.pipeline.batch_size", Unit: "{command}", Data: metricdata.Histogram[int64]{Temporality: metricdata.CumulativeTemporality,
			DataPoints: []metricdata.HistogramDataPoint[int64]{{Attributes: redis, Count: 2, Bounds: []float64{1, 8}, BucketCounts: []uint64{1, 0, 1},
				Min: metricdata.NewExtrema[int64](1), Max: metricdata.NewExtrema[int64](12), Sum: 13}}}},
		{Name: "ratebucket.lease.batches", Unit: "{batch}", Data: counter(metricdata.DataPoint[int64]{Attributes: leases, Value: 1})},
		{Name: "ratebucket.lease.local_admissions", Unit: "{request}", Data: counter(metricdata.DataPoint[int64]{Attributes: leases, Value: 16})},
		{Name: "ratebucket.lease.tokens.lost", Unit: "{token}", Data: counter(metricdata.DataPoint[int64]{Attributes: leases, Value: 3})},
		{Name: "ratebucket.lease.tokens.returned", Unit: "{token}", Data: counter(metricdata.DataPoint[int64]{Attributes: leases, Value: 9})},
	}
	got := collect(t, reader)
	if len(got) != len(want) {
		t.Errorf("%d instruments collected, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[w.Name]
		if !ok {
			t.Errorf("no %s collected", w.Name)
			continue
		}
		if g.Description == "" {
			t.Errorf("%s has no description", w.Name)
		}
		w.Description = g.Description
		metricdatatest.AssertEqual(t, w, g, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
	}
}

// sum adds up a counter's data points whose result attribute is result.
func sum(m metricdata.Metrics, result string) int64 {
	var n int64
	for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if v, _ := p.Attributes.Value("result"); v.AsString() == result {
			n += p.Value
		}
	}
	return n
}

// TestStores counts the decisions of an observed memstore and of an
// observed redisstore on a real server, whose pipelines add up to the
// calls sent and whose every call is timed.
func TestStores(t *testing.T) {
	reader, obs := newObserver(t, otelobserver.Options{})
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	rs, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /feed", Policy: "burst"})
	p := algo.PerHour(1).Burst(3)
	const callers, each = 8, 5
	for _, s := range []store.Store{observe.Wrap(ms, "memory", obs), observe.Wrap(rs, "redis", obs)} {
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range each {
					s.Take(ctx, store.Request{Key: "alice", Policy: p, Cost: 1})
				}
			})
		}
		wg.Wait()
	}
	got := collect(t, reader)
	if a, d := sum(got["ratebucket.decisions"], "allowed"), sum(got["ratebucket.decisions"], "denied"); a != 2*3 || d != 2*(callers*each-3) {
		t.Fatalf("%d allowed, %d denied; want 6 and %d", a, d, 2*(callers*each-3))
	}
	for _, p := range got["ratebucket.store.latency"].Data.(metricdata.Histogram[float64]).DataPoints {
		if v, _ := p.Attributes.Value("store"); v.AsString() == "redis" && p.Count != callers*each {
			t.Errorf("%d Redis calls timed of %d", p.Count, callers*each)
		}
	}
	b := got["ratebucket.pipeline.batch_size"].Data.(metricdata.Histogram[int64]).DataPoints
	if len(b) != 1 || b[0].Sum != callers*each {
		t.Fatalf("batches %+v, want sizes adding up to %d", b, callers*each)
	}
}
