// Package otelobserver records ratebucket's observer contract (package
// observe) with OpenTelemetry metric instruments, from the
// metric.MeterProvider the caller passes:
//
//	ratebucket.decisions              Int64ObservableCounter result, policy, route, store
//	ratebucket.store.latency          Float64Histogram  store          (unit s)
//	ratebucket.breaker.state          Int64Gauge        store, state   (1 for the current state)
//	ratebucket.breaker.transitions    Int64Counter      store, from, to
//	ratebucket.denycache.hits         Int64Counter      store, policy, route
//	ratebucket.pipeline.batch_size    Int64Histogram    store          (unit {command})
//	ratebucket.lease.batches          Int64Counter      store          (unit {batch})
//	ratebucket.lease.local_admissions Int64Counter      store          (unit {request})
//	ratebucket.lease.tokens.returned  Int64Counter      store          (unit {token})
//	ratebucket.lease.tokens.lost      Int64Counter      store          (unit {token})
//
// The lease instruments count what hybrid.Leases reports as
// observe.LeaseBatch: batches taken, requests admitted from them without
// a store call, and tokens given back or lost.
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
//	s := observe.Wrap(rs, "redis", obs)
//
// Latency is recorded for the calls observe.Wrap times: all of them on
// Redis, a sample of 1 in 64 on memstore (see observe.Decision.Latency).
//
// The Observer is an observe.DecisionCounter: the stores observe.Wrap wraps
// for it count their decisions themselves, and ratebucket.decisions is an
// observable counter that reads those counts at each collection, so a
// decision costs an atomic addition, not an SDK Add.
package otelobserver

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratebucket/ratebucket/internal/obscache"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/promtext"
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

// Observer is an observe.Observer that records OpenTelemetry metrics. It is
// safe for simultaneous use by multiple goroutines. Each label set's
// attribute sets are built once and kept, so an event allocates nothing
// here (what the SDK does is the SDK's). It counts the decisions it
// receives uncounted (Decision.Counted false) itself.
type Observer struct {
	decisions   metric.Int64ObservableCounter
	latency     metric.Float64Histogram
	state       metric.Int64Gauge
	transitions metric.Int64Counter
	hits        metric.Int64Counter
	batches     metric.Int64Histogram
	leases      [len(leaseInstruments)]metric.Int64Counter

	mu     sync.Mutex
	counts []*observe.DecisionCounts // the observed stores', then own
	own    observe.DecisionCounts

	attrs     obscache.Cache[[len(observe.Tally{}.N)]metric.ObserveOption] // by observe.Outcome
	latencyBy obscache.Cache[[]metric.RecordOption]
	hitsBy    obscache.Cache[[]metric.AddOption]
	batchBy   obscache.Cache[[]metric.RecordOption]
	leaseBy   obscache.Cache[[]metric.AddOption]
}

// leaseInstruments are the lease counters' names and units, in the order
// of promtext.LeaseFamilies, whose help texts they share.
var leaseInstruments = [len(promtext.LeaseFamilies)][2]string{
	{"ratebucket.lease.batches", "{batch}"},
	{"ratebucket.lease.local_admissions", "{request}"},
	{"ratebucket.lease.tokens.lost", "{token}"},
	{"ratebucket.lease.tokens.returned", "{token}"},
}

var (
	_ observe.Observer        = (*Observer)(nil)
	_ observe.DecisionCounter = (*Observer)(nil)
)

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
	o.counts = []*observe.DecisionCounts{&o.own}
	var errs [6]error
	o.decisions, errs[0] = m.Int64ObservableCounter("ratebucket.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store."),
		metric.WithInt64Callback(o.observeDecisions))
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
	for i, in := range leaseInstruments {
		var err error
		if o.leases[i], err = m.Int64Counter(in[0], metric.WithUnit(in[1]), metric.WithDescription(promtext.LeaseFamilies[i][1])); err != nil {
			return nil, fmt.Errorf("otelobserver: %w", err)
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("otelobserver: %w", err)
		}
	}
	o.attrs.New = func(k obscache.Key) *[len(observe.Tally{}.N)]metric.ObserveOption {
		var a [len(observe.Tally{}.N)]metric.ObserveOption
		for out := observe.OutcomeAllowed; out <= observe.OutcomeError; out++ {
			a[out] = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", out.String()),
				attribute.String("policy", k.Policy), attribute.String("route", k.Route), attribute.String("store", k.Store)))
		}
		return &a
	}
	o.latencyBy.New = func(k obscache.Key) *[]metric.RecordOption {
		return &[]metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store)))}
	}
	o.hitsBy.New = func(k obscache.Key) *[]metric.AddOption {
		return &[]metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store),
			attribute.String("policy", k.Policy), attribute.String("route", k.Route)))}
	}
	o.batchBy.New = func(k obscache.Key) *[]metric.RecordOption {
		return &[]metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store)))}
	}
	o.leaseBy.New = func(k obscache.Key) *[]metric.AddOption {
		return &[]metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", k.Store)))}
	}
	return o, nil
}

// observeDecisions reports the decision counts, summed over the stores
// that share a name, at each collection.
func (o *Observer) observeDecisions(_ context.Context, obs metric.Int64Observer) error {
	o.mu.Lock()
	counts := o.counts
	o.mu.Unlock()
	for _, t := range observe.SumTallies(counts...) {
		a := o.attrs.Get(obscache.Key{Policy: t.Policy, Route: t.Route, Store: t.Store})
		for out := observe.OutcomeAllowed; out <= observe.OutcomeError; out++ {
			obs.Observe(int64(t.N[out]), a[out])
		}
	}
	return nil
}

// CountDecisions keeps c, the counts of a store observe.Wrap wraps, to
// read them at each collection.
func (o *Observer) CountDecisions(c *observe.DecisionCounts) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts = append(o.counts[:len(o.counts):len(o.counts)], c)
}

// ObserveDecision records d's latency when it was timed, and counts d
// unless it was counted already (d.Counted).
func (o *Observer) ObserveDecision(ctx context.Context, d observe.Decision) {
	if !d.Counted {
		o.own.Add(d)
	}
	if d.Timed {
		o.latency.Record(ctx, d.Latency.Seconds(), *o.latencyBy.Get(obscache.Key{Store: d.Store})...)
	}
}

// ObserveBreaker records the breaker's state and counts the transition.
func (o *Observer) ObserveBreaker(c observe.BreakerChange) {
	ctx := context.Background()
	for _, s := range observe.BreakerStates {
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
func (o *Observer) ObserveDenyCacheHit(ctx context.Context, h observe.DenyCacheHit) {
	o.hits.Add(ctx, 1, *o.hitsBy.Get(obscache.Key{Policy: h.Policy, Route: h.Route, Store: h.Store})...)
}

// ObservePipelineBatch records b's size.
func (o *Observer) ObservePipelineBatch(b observe.PipelineBatch) {
	o.batches.Record(context.Background(), int64(b.Size), *o.batchBy.Get(obscache.Key{Store: b.Store})...)
}

// ObserveLeaseBatch counts b: a batch taken, the local admissions, and
// the tokens returned or lost.
func (o *Observer) ObserveLeaseBatch(b observe.LeaseBatch) {
	attrs := *o.leaseBy.Get(obscache.Key{Store: b.Store})
	for i, n := range promtext.LeaseCounts(b) {
		if n > 0 {
			o.leases[i].Add(context.Background(), int64(n), attrs...)
		}
	}
}
