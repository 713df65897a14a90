// Package promtext is an observe.Observer that keeps the metrics of
// contrib/prometheus in memory and writes them in the Prometheus text
// exposition format (version 0.0.4), with no dependency: for programs of
// the library's own module, such as `ratebucket demo --serve`, whose go.mod
// must not require client_golang. It writes the same families, labels and
// buckets as contrib/prometheus, whose tests parse this package's output
// with Prometheus's own parser and compare it with client_golang's.
//
// It takes a lock per event: right for a demo, not for a hot path (use
// contrib/prometheus there).
package promtext

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ratebucket/ratebucket/internal/obscache"
	"github.com/ratebucket/ratebucket/observe"
)

// LatencyBuckets and BatchBuckets are contrib/prometheus's defaults.
var (
	LatencyBuckets = []float64{1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
		1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}
	BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
)

// The families' help texts, as contrib/prometheus writes them.
const (
	HelpDecisions   = "Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store."
	HelpLatency     = "Latency of the store calls timed: every call of a network store, 1 in 64 of an in-process one."
	HelpState       = "1 for the current state (closed, open, half-open) of the circuit breaker in front of a store, 0 for the others."
	HelpTransitions = "Circuit-breaker state changes by store, from and to."
	HelpHits        = "Requests a deny cache refused without calling its store."
	HelpBatches     = "Commands per pipeline sent to the store."
)

// The token-lease families (observe.LeaseBatch), as contrib/prometheus
// writes them: name and help, in the order of leaseCounts.
var LeaseFamilies = [...][2]string{
	{"ratebucket_lease_batches_total", "Batches a token lease took from its store in one call (a batch filled or topped up)."},
	{"ratebucket_lease_local_admissions_total", "Requests admitted from a leased batch, without a store call."},
	{"ratebucket_lease_tokens_lost_total", "Tokens of leased batches whose return to the store failed (never admitted)."},
	{"ratebucket_lease_tokens_returned_total", "Tokens of leased batches given back to the store."},
}

// LeaseCounts returns b's additions to the families of [LeaseFamilies],
// in their order.
func LeaseCounts(b observe.LeaseBatch) [len(LeaseFamilies)]uint64 {
	var batch uint64
	if b.Taken > 0 {
		batch = 1
	}
	return [...]uint64{batch, uint64(max(b.Local, 0)), uint64(max(b.Lost, 0)), uint64(max(b.Returned, 0))}
}

// Registry is an observe.Observer whose metrics [Registry.WriteTo] writes. The
// zero value is ready to use; a Registry is safe for simultaneous use.
type Registry struct {
	mu          sync.Mutex
	decisions   map[obscache.Key]*[5]uint64 // by observe.Outcome
	latency     map[string]*histogram       // by store
	state       map[string]observe.BreakerState
	transitions map[[3]string]uint64 // store, from, to
	hits        map[obscache.Key]uint64
	batches     map[string]*histogram
	leases      map[string]*[len(LeaseFamilies)]uint64 // by store
}

var _ observe.Observer = (*Registry)(nil)

type histogram struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func (h *histogram) observe(bounds []float64, v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
	}
	i, _ := slices.BinarySearch(bounds, v) // le: v <= bound
	h.counts[i]++
	h.sum += v
	h.n++
}

// ObserveDecision counts d and records its latency when timed.
func (r *Registry) ObserveDecision(_ context.Context, d observe.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := obscache.Key{Policy: d.Policy, Route: d.Route, Store: d.Store}
	c := lazy(&r.decisions, k)
	if int(d.Outcome) < len(c) && d.Outcome != 0 {
		c[d.Outcome]++
	}
	h := lazy(&r.latency, d.Store) // the series exists once the store decided
	if d.Timed {
		h.observe(LatencyBuckets, d.Latency.Seconds())
	}
}

// ObserveBreaker records the breaker's state and counts the transition.
func (r *Registry) ObserveBreaker(c observe.BreakerChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == nil {
		r.state, r.transitions = map[string]observe.BreakerState{}, map[[3]string]uint64{}
	}
	r.state[c.Store] = c.To
	r.transitions[[3]string{c.Store, c.From.String(), c.To.String()}]++
}

// ObserveDenyCacheHit counts h.
func (r *Registry) ObserveDenyCacheHit(_ context.Context, h observe.DenyCacheHit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hits == nil {
		r.hits = map[obscache.Key]uint64{}
	}
	r.hits[obscache.Key{Policy: h.Policy, Route: h.Route, Store: h.Store}]++
}

// ObservePipelineBatch records b's size.
func (r *Registry) ObservePipelineBatch(b observe.PipelineBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lazy(&r.batches, b.Store).observe(BatchBuckets, float64(b.Size))
}

// ObserveLeaseBatch counts b.
func (r *Registry) ObserveLeaseBatch(b observe.LeaseBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := lazy(&r.leases, b.Store)
	for i, n := range LeaseCounts(b) {
		c[i] += n
	}
}

// lazy returns m[k], making the map and the value on first use.
func lazy[K comparable, V any](m *map[K]*V, k K) *V {
	if *m == nil {
		*m = map[K]*V{}
	}
	v, ok := (*m)[k]
	if !ok {
		v = new(V)
		(*m)[k] = v
	}
	return v
}

// ContentType is the media type of the text format WriteTo writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ServeHTTP writes the metrics, for GET /metrics.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	r.WriteTo(w)
}

// WriteTo writes every family that has a series, sorted by name, each
// series sorted by its labels, in the text exposition format.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cw := &countingWriter{w: w}
	b := bufio.NewWriter(cw)
	if len(r.state) > 0 {
		family(b, "ratebucket_breaker_state", "gauge", HelpState)
		for _, s := range sorted(r.state) {
			for _, st := range observe.BreakerStates {
				sample(b, "ratebucket_breaker_state", labels("state", st.String(), "store", s), boolValue(r.state[s] == st))
			}
		}
		family(b, "ratebucket_breaker_transitions_total", "counter", HelpTransitions)
		for _, k := range slices.SortedFunc(maps.Keys(r.transitions), func(a, b [3]string) int { return slices.Compare(a[:], b[:]) }) {
			sample(b, "ratebucket_breaker_transitions_total", labels("from", k[1], "store", k[0], "to", k[2]), u(r.transitions[k]))
		}
	}
	if len(r.decisions) > 0 {
		family(b, "ratebucket_decisions_total", "counter", HelpDecisions)
		for _, k := range sortedKeys(r.decisions) {
			for _, o := range []observe.Outcome{observe.OutcomeAllowed, observe.OutcomeDenied, observe.OutcomeError, observe.OutcomeShadowDenied} {
				sample(b, "ratebucket_decisions_total", labels("policy", k.Policy, "result", o.String(), "route", k.Route, "store", k.Store), u(r.decisions[k][o]))
			}
		}
	}
	if len(r.hits) > 0 {
		family(b, "ratebucket_denycache_hits_total", "counter", HelpHits)
		for _, k := range sortedKeys(r.hits) {
			sample(b, "ratebucket_denycache_hits_total", labels("policy", k.Policy, "route", k.Route, "store", k.Store), u(r.hits[k]))
		}
	}
	for i, f := range LeaseFamilies {
		if len(r.leases) > 0 {
			family(b, f[0], "counter", f[1])
		}
		for _, s := range sorted(r.leases) {
			sample(b, f[0], labels("store", s), u(r.leases[s][i]))
		}
	}
	histograms(b, "ratebucket_pipeline_batch_size", HelpBatches, BatchBuckets, r.batches)
	histograms(b, "ratebucket_store_latency_seconds", HelpLatency, LatencyBuckets, r.latency)
	err := b.Flush()
	return cw.n, err
}

// histograms writes a histogram family with one series per store.
func histograms(b *bufio.Writer, name, help string, bounds []float64, hs map[string]*histogram) {
	if len(hs) == 0 {
		return
	}
	family(b, name, "histogram", help)
	for _, s := range sorted(hs) {
		h := hs[s]
		var cum uint64
		for i, le := range append(slices.Clone(bounds), math.Inf(1)) {
			if h.counts != nil {
				cum += h.counts[i]
			}
			sample(b, name+"_bucket", labels("store", s, "le", float(le)), u(cum))
		}
		sample(b, name+"_sum", labels("store", s), float(h.sum))
		sample(b, name+"_count", labels("store", s), u(h.n))
	}
}

func family(b *bufio.Writer, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

func sample(b *bufio.Writer, name, labels, value string) {
	b.WriteString(name)
	b.WriteString(labels)
	b.WriteByte(' ')
	b.WriteString(value)
	b.WriteByte('\n')
}

// labels writes name="value" pairs, given in the order to write them.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(escapeValue(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// The format escapes \ and newline in help texts, and " too in label
// values.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeValue(s string) string { return valueEscaper.Replace(s) }

func u(n uint64) string { return strconv.FormatUint(n, 10) }

func boolValue(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// float writes v as the format wants: shortest form, +Inf for infinity.
func float(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func sorted[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }

func sortedKeys[V any](m map[obscache.Key]V) []obscache.Key {
	return slices.SortedFunc(maps.Keys(m), func(a, b obscache.Key) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Route, b.Route), cmp.Compare(a.Store, b.Store))
	})
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
