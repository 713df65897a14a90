// Package promobserver exports ratebucket's observer contract (package
// observe) as Prometheus metrics:
//
//	ratebucket_decisions_total{result,policy,route,store}   counter
//	ratebucket_store_latency_seconds{store}                 histogram
//	ratebucket_breaker_state{store,state}                   gauge, 1 for the current state
//	ratebucket_breaker_transitions_total{store,from,to}     counter
//	ratebucket_denycache_hits_total{store,policy,route}     counter
//	ratebucket_pipeline_batch_size{store}                   histogram
//	ratebucket_lease_batches_total{store}                   counter
//	ratebucket_lease_local_admissions_total{store}          counter
//	ratebucket_lease_tokens_returned_total{store}           counter
//	ratebucket_lease_tokens_lost_total{store}               counter
//
// The lease families count what hybrid.Leases (httplimit's, grpclimit's
// and the rls server's Leases options) reports as observe.LeaseBatch:
// batches taken from the store, requests admitted from them without a
// store call (which ratebucket_decisions_total, counting the store's
// calls, does not see), and the tokens given back, or lost when the
// refund failed.
//
// result is allowed, denied, shadow_denied or error; state, from and to
// are closed, open or half-open. Every label value comes from
// configuration (store and component names, limit names, route patterns)
// or is a fixed word: the contract never carries a key, a client address
// or a user id, so the number of series is bounded by construction.
//
// Import it under its name:
//
//	import promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
//
// and give one Observer to every part that reports:
//
//	obs, err := promobserver.New(reg, promobserver.Options{})
//	rs, _ := redisstore.New(rdb, redisstore.Config{Observer: obs})
//	s := observe.Wrap(rs, "redis", obs)
//	mw, _ := httplimit.New(httplimit.Config{Store: s})
//
// Latency is recorded for the calls observe.Wrap times: all of them on
// Redis, a sample of 1 in 64, unbiased, on memstore (see
// observe.Decision.Latency). Count decisions with ratebucket_decisions_total,
// not with the histogram's _count.
//
// The queries an operator needs:
//
//	# share of requests denied, per route
//	sum by (route) (rate(ratebucket_decisions_total{result="denied"}[5m]))
//	  / sum by (route) (rate(ratebucket_decisions_total[5m]))
//	# failed decisions per second (store errors, resolver failures), per store
//	sum by (store) (rate(ratebucket_decisions_total{result="error"}[5m]))
//	# stores whose fallback breaker is open
//	ratebucket_breaker_state{state="open"} == 1
package promobserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebucket/ratebucket/internal/obscache"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/promtext"
)

// DefaultLatencyBuckets spans 1µs (memstore) to 2.5s (a Redis timeout),
// in seconds.
var DefaultLatencyBuckets = []float64{1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}

// DefaultBatchBuckets are powers of two up to 256 commands; redisstore
// sends at most 64 by default.
var DefaultBatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// Options configures an [Observer]. The zero value uses the defaults.
type Options struct {
	// LatencyBuckets are the upper bounds of
	// ratebucket_store_latency_seconds, in seconds. The default is
	// DefaultLatencyBuckets.
	LatencyBuckets []float64
	// BatchBuckets are the upper bounds of ratebucket_pipeline_batch_size.
	// The default is DefaultBatchBuckets.
	BatchBuckets []float64
}

// Observer is an observe.Observer that updates Prometheus metrics. It is safe
// for simultaneous use by multiple goroutines.
//
// It is an observe.DecisionCounter: the stores observe.Wrap wraps for it
// count their decisions themselves, an atomic addition per call, and the
// Observer reads the counts when the registry is gathered, so that
// ratebucket_decisions_total costs a memstore Take a few percent. It
// receives only the timed calls (for the latency histogram) and the
// errors; a decision it receives uncounted (Decision.Counted false, from
// code that calls ObserveDecision itself) it counts on its own. Other
// events cost a map read and atomic adds, and allocate nothing once their
// label set was seen. A label set's series of every result exists from
// its first decision, at 0 for the results not seen, so that a ratio such
// as the denial rate reads 0, not nothing, before the first denial.
type Observer struct {
	decisions   *prometheus.Desc // collected from counts
	latency     *prometheus.HistogramVec
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	hits        *prometheus.CounterVec
	batches     *prometheus.HistogramVec
	leases      [len(promtext.LeaseFamilies)]*prometheus.CounterVec

	mu     sync.Mutex
	counts []*observe.DecisionCounts // the observed stores', then own
	own    observe.DecisionCounts    // the decisions received uncounted

	latencyBy obscache.Cache[prometheus.Observer]
	hitsBy    obscache.Cache[prometheus.Counter]
	batchBy   obscache.Cache[prometheus.Observer]
	leaseBy   obscache.Cache[[len(promtext.LeaseFamilies)]prometheus.Counter]
}

var (
	_ observe.Observer        = (*Observer)(nil)
	_ observe.DecisionCounter = (*Observer)(nil)
)

// New returns an Observer whose metrics are registered with reg, which may
// be nil to register nothing (then collect them with the Observer's
// Collectors). It returns reg's error when a metric of the same name is
// registered there already.
func New(reg prometheus.Registerer, opts Options) (*Observer, error) {
	if opts.LatencyBuckets == nil {
		opts.LatencyBuckets = DefaultLatencyBuckets
	}
	if opts.BatchBuckets == nil {
		opts.BatchBuckets = DefaultBatchBuckets
	}
	o := &Observer{
		decisions: prometheus.NewDesc("ratebucket_decisions_total",
			"Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store.",
			[]string{"result", "policy", "route", "store"}, nil),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebucket_store_latency_seconds",
			Help:    "Latency of the store calls timed: every call of a network store, 1 in 64 of an in-process one.",
			Buckets: opts.LatencyBuckets,
		}, []string{"store"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratebucket_breaker_state",
			Help: "1 for the current state (closed, open, half-open) of the circuit breaker in front of a store, 0 for the others.",
		}, []string{"store", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebucket_breaker_transitions_total",
			Help: "Circuit-breaker state changes by store, from and to.",
		}, []string{"store", "from", "to"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebucket_denycache_hits_total",
			Help: "Requests a deny cache refused without calling its store.",
		}, []string{"store", "policy", "route"}),
		batches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebucket_pipeline_batch_size",
			Help:    "Commands per pipeline sent to the store.",
			Buckets: opts.BatchBuckets,
		}, []string{"store"}),
	}
	for i, f := range promtext.LeaseFamilies {
		o.leases[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: f[0], Help: f[1]}, []string{"store"})
	}
	o.counts = []*observe.DecisionCounts{&o.own}
	o.leaseBy.New = func(k obscache.Key) *[len(promtext.LeaseFamilies)]prometheus.Counter {
		var c [len(promtext.LeaseFamilies)]prometheus.Counter
		for i, v := range o.leases {
			c[i] = v.WithLabelValues(k.Store)
		}
		return &c
	}
	o.latencyBy.New = func(k obscache.Key) *prometheus.Observer {
		h := o.latency.WithLabelValues(k.Store)
		return &h
	}
	o.hitsBy.New = func(k obscache.Key) *prometheus.Counter {
		c := o.hits.WithLabelValues(k.Store, k.Policy, k.Route)
		return &c
	}
	o.batchBy.New = func(k obscache.Key) *prometheus.Observer {
		h := o.batches.WithLabelValues(k.Store)
		return &h
	}
	if reg != nil {
		for _, c := range o.Collectors() {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("promobserver: %w", err)
			}
		}
	}
	return o, nil
}

// Collectors returns the Observer's metrics, for registering them by hand.
func (o *Observer) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{decisions{o}, o.latency, o.state, o.transitions, o.hits, o.batches}
	for _, l := range o.leases {
		cs = append(cs, l)
	}
	return cs
}

// decisions collects ratebucket_decisions_total from the counts.
type decisions struct{ o *Observer }

func (c decisions) Describe(ch chan<- *prometheus.Desc) { ch <- c.o.decisions }

// Collect sends a series per label set and result, summed over the
// stores that share a name.
func (c decisions) Collect(ch chan<- prometheus.Metric) {
	c.o.mu.Lock()
	counts := c.o.counts
	c.o.mu.Unlock()
	for _, t := range observe.SumTallies(counts...) {
		for out := observe.OutcomeAllowed; out <= observe.OutcomeError; out++ {
			ch <- prometheus.MustNewConstMetric(c.o.decisions, prometheus.CounterValue, float64(t.N[out]),
				out.String(), t.Policy, t.Route, t.Store)
		}
	}
}

// CountDecisions keeps c, the counts of a store observe.Wrap wraps, to
// read them when the registry is gathered.
func (o *Observer) CountDecisions(c *observe.DecisionCounts) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts = append(o.counts[:len(o.counts):len(o.counts)], c)
}

// ObserveDecision records d's latency when it was timed, and counts d
// unless it was counted already (d.Counted).
func (o *Observer) ObserveDecision(_ context.Context, d observe.Decision) {
	if !d.Counted {
		o.own.Add(d)
	}
	h := *o.latencyBy.Get(obscache.Key{Store: d.Store}) // the series exists once the store decided
	if d.Timed {
		h.Observe(d.Latency.Seconds())
	}
}

// ObserveBreaker sets the breaker's state and counts the transition.
func (o *Observer) ObserveBreaker(c observe.BreakerChange) {
	for _, s := range observe.BreakerStates {
		v := 0.0
		if s == c.To {
			v = 1
		}
		o.state.WithLabelValues(c.Store, s.String()).Set(v)
	}
	o.transitions.WithLabelValues(c.Store, c.From.String(), c.To.String()).Inc()
}

// ObserveDenyCacheHit counts h.
func (o *Observer) ObserveDenyCacheHit(_ context.Context, h observe.DenyCacheHit) {
	(*o.hitsBy.Get(obscache.Key{Policy: h.Policy, Route: h.Route, Store: h.Store})).Inc()
}

// ObservePipelineBatch records b's size.
func (o *Observer) ObservePipelineBatch(b observe.PipelineBatch) {
	(*o.batchBy.Get(obscache.Key{Store: b.Store})).Observe(float64(b.Size))
}

// ObserveLeaseBatch counts b: a batch taken, the local admissions, and
// the tokens returned or lost. The four series of b's store exist from
// its first event.
func (o *Observer) ObserveLeaseBatch(b observe.LeaseBatch) {
	c := o.leaseBy.Get(obscache.Key{Store: b.Store})
	for i, n := range promtext.LeaseCounts(b) {
		if n > 0 {
			c[i].Add(float64(n))
		}
	}
}
