package promobserver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

func newObserver(t *testing.T, opts promobserver.Options) (*prometheus.Registry, *promobserver.Observer) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return reg, obs
}

// TestMetrics feeds every kind of event and compares the whole gathered
// registry with the exposition it must produce.
func TestMetrics(t *testing.T) {
	reg, obs := newObserver(t, promobserver.Options{LatencyBuckets: []float64{0.3, 1}, BatchBuckets: []float64{1, 8}})
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
	want := `
# HELP ratebucket_breaker_state 1 for the current state (closed, open, half-open) of the circuit breaker in front of a store, 0 for the others.
# TYPE ratebucket_breaker_state gauge
ratebucket_breaker_state{state="closed",store="redis"} 0
ratebucket_breaker_state{state="half-open",store="redis"} 1
ratebucket_breaker_state{state="open",store="redis"} 0
# HELP ratebucket_breaker_transitions_total Circuit-breaker state changes by store, from and to.
# TYPE ratebucket_breaker_transitions_total counter
ratebucket_breaker_transitions_total{from="closed",store="redis",to="open"} 1
ratebucket_breaker_transitions_total{from="open",store="redis",to="half-open"} 1
# HELP ratebucket_decisions_total Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store.
# TYPE ratebucket_decisions_total counter
ratebucket_decisions_total{policy="login",result="allowed",route="POST /login",store="redis"} 2
ratebucket_decisions_total{policy="login",result="denied",route="POST /login",store="redis"} 1
ratebucket_decisions_total{policy="login",result="error",route="POST /login",store="redis"} 1
ratebucket_decisions_total{policy="login",result="shadow_denied",route="POST /login",store="redis"} 1
# HELP ratebucket_denycache_hits_total Requests a deny cache refused without calling its store.
# TYPE ratebucket_denycache_hits_total counter
ratebucket_denycache_hits_total{policy="login",route="POST /login",store="redis"} 2
# HELP ratebucket_lease_batches_total Batches a token lease took from its store in one call (a batch filled or topped up).
# TYPE ratebucket_lease_batches_total counter
ratebucket_lease_batches_total{store="leases"} 1
# HELP ratebucket_lease_local_admissions_total Requests admitted from a leased batch, without a store call.
# TYPE ratebucket_lease_local_admissions_total counter
ratebucket_lease_local_admissions_total{store="leases"} 16
# HELP ratebucket_lease_tokens_lost_total Tokens of leased batches whose return to the store failed (never admitted).
# TYPE ratebucket_lease_tokens_lost_total counter
ratebucket_lease_tokens_lost_total{store="leases"} 3
# HELP ratebucket_lease_tokens_returned_total Tokens of leased batches given back to the store.
# TYPE ratebucket_lease_tokens_returned_total counter
ratebucket_lease_tokens_returned_total{store="leases"} 9
# HELP ratebucket_pipeline_batch_size Commands per pipeline sent to the store.
# TYPE ratebucket_pipeline_batch_size histogram
ratebucket_pipeline_batch_size_bucket{store="redis",le="1"} 1
ratebucket_pipeline_batch_size_bucket{store="redis",le="8"} 1
ratebucket_pipeline_batch_size_bucket{store="redis",le="+Inf"} 2
ratebucket_pipeline_batch_size_sum{store="redis"} 13
ratebucket_pipeline_batch_size_count{store="redis"} 2
# HELP ratebucket_store_latency_seconds Latency of the store calls timed: every call of a network store, 1 in 64 of an in-process one.
# TYPE ratebucket_store_latency_seconds histogram
ratebucket_store_latency_seconds_bucket{store="redis",le="0.3"} 1
ratebucket_store_latency_seconds_bucket{store="redis",le="1"} 2
ratebucket_store_latency_seconds_bucket{store="redis",le="+Inf"} 3
ratebucket_store_latency_seconds_sum{store="redis"} 2.75
ratebucket_store_latency_seconds_count{store="redis"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestRegistration checks that registration is the caller's: a second
// Observer on the same registry is refused, and a nil one registers
// nothing.
func TestRegistration(t *testing.T) {
	reg, _ := newObserver(t, promobserver.Options{})
	if _, err := promobserver.New(reg, promobserver.Options{}); err == nil {
		t.Fatal("a second Observer registered the same metrics")
	}
	obs, err := promobserver.New(nil, promobserver.Options{})
	if err != nil || len(obs.Collectors()) != 10 {
		t.Fatalf("New(nil): %v, %d collectors", err, len(obs.Collectors()))
	}
}

// TestMemstore counts real decisions of an observed memstore: labels from
// the context, none without, and a latency sample.
func TestMemstore(t *testing.T) {
	reg, obs := newObserver(t, promobserver.Options{})
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	s := observe.Wrap(ms, "memory", obs)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /feed", Policy: "burst"})
	p := algo.PerHour(1).Burst(3)
	for range 5 {
		s.Take(ctx, store.Request{Key: "alice", Policy: p, Cost: 1})
	}
	s.Take(context.Background(), store.Request{Key: "bob", Policy: p, Cost: 1})
	want := `
# HELP ratebucket_decisions_total Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store.
# TYPE ratebucket_decisions_total counter
ratebucket_decisions_total{policy="",result="allowed",route="",store="memory"} 1
ratebucket_decisions_total{policy="",result="denied",route="",store="memory"} 0
ratebucket_decisions_total{policy="",result="error",route="",store="memory"} 0
ratebucket_decisions_total{policy="",result="shadow_denied",route="",store="memory"} 0
ratebucket_decisions_total{policy="burst",result="allowed",route="GET /feed",store="memory"} 3
ratebucket_decisions_total{policy="burst",result="denied",route="GET /feed",store="memory"} 2
ratebucket_decisions_total{policy="burst",result="error",route="GET /feed",store="memory"} 0
ratebucket_decisions_total{policy="burst",result="shadow_denied",route="GET /feed",store="memory"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratebucket_decisions_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(obs.Collectors()[1]); n != 1 {
		t.Fatalf("%d latency series, want 1 (store=memory): the first call is always timed", n)
	}
}

// TestRedis runs an observed redisstore behind a Fallback and a DenyCache,
// all reporting to one Observer: every decision timed, pipeline batches
// that add up to the calls sent, deny-cache hits, and the breaker opening
// when the server is killed.
func TestRedis(t *testing.T) {
	reg, obs := newObserver(t, promobserver.Options{})
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	rs, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	dc, err := hybrid.NewDenyCache(rs, hybrid.DenyCacheConfig{Observer: obs, Name: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	fb, err := hybrid.NewFallback(dc, local, hybrid.FallbackConfig{Observer: obs, Name: "redis", Timeout: time.Minute, FailureThreshold: 1, CoolDown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s := observe.Wrap(fb, "redis", obs)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /feed", Policy: "burst"})
	p := algo.PerHour(1).Burst(50)
	const callers, each = 8, 10 // 80 calls on 8 keys: all admitted, each from Redis
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for range each {
				if _, err := s.Take(ctx, store.Request{Key: string(rune('a' + g)), Policy: p, Cost: 1}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	allowed := testutil.ToFloat64(counter(t, reg, "ratebucket_decisions_total", "allowed"))
	if allowed != callers*each {
		t.Fatalf("%v allowed, want %d", allowed, callers*each)
	}
	lat, batches := histogram(t, reg, "ratebucket_store_latency_seconds"), histogram(t, reg, "ratebucket_pipeline_batch_size")
	if lat.GetSampleCount() != callers*each {
		t.Errorf("%d decisions timed of %d: Redis calls are all timed", lat.GetSampleCount(), callers*each)
	}
	if batches.GetSampleSum() != callers*each || batches.GetSampleCount() == 0 {
		t.Errorf("batches %d adding up to %v, want calls in batches adding up to %d", batches.GetSampleCount(), batches.GetSampleSum(), callers*each)
	}
	// Drain one bucket: the cache then denies by itself.
	for range 55 {
		s.Take(ctx, store.Request{Key: "z", Policy: p, Cost: 1})
	}
	hits := testutil.ToFloat64(counter(t, reg, "ratebucket_denycache_hits_total", ""))
	if hits == 0 {
		t.Error("no deny-cache hit after draining a bucket")
	}
	srv.Kill(t)
	if res, err := s.Take(ctx, store.Request{Key: "y", Policy: p, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("with Redis killed: %+v %v, want the local fallback's answer", res, err)
	}
	want := `
# HELP ratebucket_breaker_state 1 for the current state (closed, open, half-open) of the circuit breaker in front of a store, 0 for the others.
# TYPE ratebucket_breaker_state gauge
ratebucket_breaker_state{state="closed",store="redis"} 0
ratebucket_breaker_state{state="half-open",store="redis"} 0
ratebucket_breaker_state{state="open",store="redis"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratebucket_breaker_state"); err != nil {
		t.Fatal(err)
	}
}

// TestCountsAddUp checks ratebucket_decisions_total where stores share a
// name (one series, their sum) and where decisions also arrive uncounted,
// from code that calls ObserveDecision itself.
func TestCountsAddUp(t *testing.T) {
	reg, obs := newObserver(t, promobserver.Options{})
	p := algo.PerHour(1).Burst(2)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /feed", Policy: "burst"})
	for range 2 {
		ms, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		s := observe.Wrap(ms, "memory", obs)
		for range 3 {
			s.Take(ctx, store.Request{Key: "alice", Policy: p, Cost: 1}) // 2 admitted, 1 denied
		}
	}
	obs.ObserveDecision(ctx, observe.Decision{Op: observe.OpTake, Outcome: observe.OutcomeError, Store: "memory", Policy: "burst", Route: "GET /feed"})
	obs.ObserveDecision(ctx, observe.Decision{Op: observe.OpTake, Outcome: observe.OutcomeDenied, Store: "memory", Policy: "burst", Route: "GET /feed", Counted: true})
	want := `
# HELP ratebucket_decisions_total Rate-limit decisions by result (allowed, denied, shadow_denied, error), policy, route and store.
# TYPE ratebucket_decisions_total counter
ratebucket_decisions_total{policy="burst",result="allowed",route="GET /feed",store="memory"} 4
ratebucket_decisions_total{policy="burst",result="denied",route="GET /feed",store="memory"} 2
ratebucket_decisions_total{policy="burst",result="error",route="GET /feed",store="memory"} 1
ratebucket_decisions_total{policy="burst",result="shadow_denied",route="GET /feed",store="memory"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratebucket_decisions_total"); err != nil {
		t.Fatal(err)
	}
}
