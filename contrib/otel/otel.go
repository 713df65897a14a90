// Package otelobserver records ratebucket's observer contract (package
// store) with OpenTelemetry metric instruments, from the
// metric.MeterProvider the caller passes:
//
//	ratebucket.decisions           Int64Counter      result, policy, route, store
//	ratebucket.store.latency       Float64Histogram  store          (unit s)
//	ratebucket.breaker.state       Int64Gauge        store, state   (1 for the current state)
//	ratebucket.breaker.transitions Int64Counter      store, from, to
//	ratebucket.denycache.hits      Int64Counter      store, policy, route
//	ratebucket.pipeline.batch_size Int64Histogram    store          (unit {command})
//
// result is allowed, denied, shadow_denied or error; state, from and to
// are closed, open or half-open. Every attribute value comes from
// configuration or is a fixed word: the contract never carries a key, so
// the number of attribute sets is bounded by construction. Through an
// OpenTelemetry Prometheus exporter the names become those of
// contrib/prometheus (ratebucket_decisions_total,
// ratebucket_store_latency_seconds, ...), and its queries apply.
//
// Import it under its name, and give one Observer to every part that
// reports:
//
//	import otelobserver "github.com/ratebucket/ratebucket/contrib/otel"
//
//	obs, err := otelobserver.New(otel.GetMeterProvider(), otelobserver.Options{})
//	rs, _ := redisstore.New(rdb, redisstore.Config{Observer: obs})
//	s := store.Observe(rs, "redis", obs)
//
// Latency is recorded for the calls store.Observe times: all of them on
// Redis, a uniform sample of 1 in 64 on memstore (see
// store.Decision.Latency).
package otelobserver

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratebucket/ratebucket/internal/obscache"
	"github.com/ratebucket/ratebucket/store"
)

// ScopeName is the instrumentation scope of the Meter the Observer uses.
const ScopeName = "github.com/ratebucket/ratebucket/contrib/otel"

// DefaultLatencyBuckets spans 1µs (memstore) to 2.5s (a Redis timeout),
// in seconds: the explicit bucket boundaries advised for
// ratebucket.store.latency.
var DefaultLatencyBuckets = []float64{1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}

// DefaultBatchBuckets are powers of two up to 256 commands.
var DefaultBatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// Options configures an [Observer]. The zero value uses the defaults.
type Options struct {
	// LatencyBuckets are the bucket boundaries advised for
	// ratebucket.store.latency, in seconds; a View may override them.
	// The default is DefaultLatencyBuckets.
	LatencyBuckets []float64
	// BatchBuckets are those of ratebucket.pipeline.batch_size. The
	// default is DefaultBatchBuckets.
	BatchBuckets []float64
}

// Observer is a store.Observer that records OpenTelemetry metrics. It is
// safe for simultaneous use by multiple goroutines. Each label set's
// attribute sets are built once and kept, so a decision allocates nothing
// here (what the SDK does is the SDK's).
type Observer struct {
	decisions   metric.Int64Counter
	latency     metric.Float64Histogram
	state       metric.Int64Gauge
	transitions metric.Int64Counter
	hits        metric.Int64Counter
	batches     metric.Int64Histogram

	series  obscache.Cache[series]
	hitsBy  obscache.Cache[[]metric.AddOption]
	batchBy obscache.Cache[[]metric.RecordOption]
}

var _ store.Observer = (*Observer)(nil)

// series are the attribute sets of one label set of decisions, as option
// slices: passed on with ..., a kept slice is not allocated again.
type series struct {
	outcome [5][]metric.AddOption // by store.Outcome
	latency []metric.RecordOption
}

// New returns an Observer recording with a Meter of mp named [ScopeName].
// It returns an error when mp refuses an instrument.
func New(mp metric.MeterProvider, opts Options) (*Observer, error) {
	if mp == nil {
		return nil, fmt.Errorf("otelobserver: nil MeterProvider")
	}
	if opts.LatencyBuckets == nil {
		opts.LatencyBuckets = DefaultLatencyBuckets
	}
	if opts.BatchBuckets == nil {
		opts.BatchBuckets = DefaultBatchBuckets
	}
	m := mp.Meter(ScopeName)
	o := &Observer{}
	var errs [6]error
	o.decisions, errs[0] = m.Int64Counter("ratebucket.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store."))
	o.latency, errs[1] = m.Float64Histogram("ratebucket.store.latency", metric.WithUnit("s"),
		metric.WithDescription("Latency of the store calls timed: every call of a network store, 1 in 64 of an in-process one."),
		metric.WithExplicitBucketBoundaries(opts.LatencyBuckets...))
	o.state, errs[2] = m.Int64Gauge("ratebucket.breaker.state", metric.WithUnit("1"),
		metric.WithDescription("1 for the current state (closed, open, half-open) of the circuit breaker in front of a store, 0 for the others."))
	o.transitions, errs[3] = m.Int64Counter("ratebucket.breaker.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit-breaker state changes by store, from and to."))
	o.hits, errs[4] = m.Int64Counter("ratebucket.denycache.hits", metric.WithUnit("{request}"),
		metric.WithDescription("Requests a deny cache refused without calling its store."))
	o.batches, errs[5] = m.Int64Histogram("ratebucket.pipeline.batch_size", metric.WithUnit("{command}"),
		metric.WithDescription("Commands per pipeline sent to the store."),
		metric.WithExplicitBucketBoundaries(opts.BatchBuckets...))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("otelobserver: %w", err)
		}
	}
	o.series.New = func(k obscache.Key) *series {
		s := &series{latency: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store)))}}
		for out := store.OutcomeAllowed; out <= store.OutcomeError; out++ {
			s.outcome[out] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("result", out.String()),
				attribute.String("policy", k.Policy), attribute.String("route", k.Route), attribute.String("store", k.Store)))}
		}
		return s
	}
	o.hitsBy.New = func(k obscache.Key) *[]metric.AddOption {
		return &[]metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store),
			attribute.String("policy", k.Policy), attribute.String("route", k.Route)))}
	}
	o.batchBy.New = func(k obscache.Key) *[]metric.RecordOption {
		return &[]metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store)))}
	}
	return o, nil
}

// ObserveDecision counts d, and records its latency when it was timed.
func (o *Observer) ObserveDecision(ctx context.Context, d store.Decision) {
	s := o.series.Get(obscache.Key{Policy: d.Policy, Route: d.Route, Store: d.Store})
	if int(d.Outcome) < len(s.outcome) && s.outcome[d.Outcome] != nil {
		o.decisions.Add(ctx, 1, s.outcome[d.Outcome]...)
	}
	if d.Timed {
		o.latency.Record(ctx, d.Latency.Seconds(), s.latency...)
	}
}

// ObserveBreaker records the breaker's state and counts the transition.
func (o *Observer) ObserveBreaker(c store.BreakerChange) {
	ctx := context.Background()
	for _, s := range store.BreakerStates {
		v := int64(0)
		if s == c.To {
			v = 1
		}
		o.state.Record(ctx, v, metric.WithAttributes(attribute.String("store", c.Store), attribute.String("state", s.String())))
	}
	o.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("store", c.Store),
		attribute.String("from", c.From.String()), attribute.String("to", c.To.String())))
}

// ObserveDenyCacheHit counts h.
func (o *Observer) ObserveDenyCacheHit(ctx context.Context, h store.DenyCacheHit) {
	o.hits.Add(ctx, 1, *o.hitsBy.Get(obscache.Key{Policy: h.Policy, Route: h.Route, Store: h.Store})...)
}

// ObservePipelineBatch records b's size.
func (o *Observer) ObservePipelineBatch(b store.PipelineBatch) {
	o.batches.Record(context.Background(), int64(b.Size), *o.batchBy.Get(obscache.Key{Store: b.Store})...)
}
