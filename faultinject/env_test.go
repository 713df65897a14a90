package faultinject

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxics log through zerolog's global logger
	// Toxiproxy's slicer leaves its Pipe goroutines blocked on a channel
	// send when its link closes (a Toxiproxy bug, not ours); everything of
	// ratebucket's, go-redis's and the rest of Toxiproxy's must be gone.
	leaktest.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*SlicerToxic).Pipe"))
}

// Settings every scenario shares.
const (
	timeout   = 150 * time.Millisecond // the Fallback's deadline per Redis call
	coolDown  = time.Second            // virtual: the breaker reads the manual clock
	instances = 2
)

// policy is the article's: burst 100, 2 per second.
var policy = algo.PerSecond(2).Burst(100)

// env is one scenario's world: a real redis-server, an in-process Toxiproxy
// in front of it, a go-redis client through the proxy, redisstore on it
// with the manual clock as its client clock, and a Fallback around that
// with a local memstore, on the same clock. Faults are real (the network
// and the server misbehave in real time); bucket and breaker time is
// virtual, so admitted counts are exact and nothing sleeps.
type env struct {
	srv     *redistest.Server
	proxy   *toxiproxy.Proxy
	clk     *storetest.Clock
	primary *redisstore.Store
	cache   *hybrid.DenyCache // between f and primary, or nil
	f       *hybrid.Fallback
	mu      sync.Mutex
	changes []string // the breaker's states, in order
}

func (e *env) history() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.changes...)
}

func newEnv(t *testing.T, mode hybrid.Mode) *env { return newEnvCache(t, mode, false) }

// newEnvCache is newEnv, with a hybrid.DenyCache between the Fallback and
// redisstore when cached is true.
func newEnvCache(t *testing.T, mode hybrid.Mode, cached bool) *env {
	t.Helper()
	e := &env{srv: redistest.Start(t), clk: storetest.NewClock()}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	api.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	e.proxy = toxiproxy.NewProxy(api, "redis", "127.0.0.1:0", e.srv.Addr)
	if err := e.proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.proxy.Stop)
	rdb := redis.NewClient(&redis.Options{
		Addr:                  e.proxy.Listen,
		ContextTimeoutEnabled: true, // the Fallback's deadline reaches the socket
		// The socket timeouts no longer than the Fallback's: with only
		// the context's deadline, a call during a restart once took the
		// whole ReadTimeout (1s then), so some go-redis path is bounded
		// by these alone.
		DialTimeout:  timeout,
		ReadTimeout:  timeout,
		WriteTimeout: timeout,
		MaxRetries:   -1,
		PoolSize:     8,
	})
	t.Cleanup(func() { rdb.Close() })
	var err error
	if e.primary, err = redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Clock: e.clk}); err != nil {
		t.Fatal(err)
	}
	var local *memstore.Store
	if mode == hybrid.LocalFallback {
		if local, err = memstore.New(memstore.Config{Clock: e.clk}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { local.Close() })
	}
	var primary store.Store = e.primary
	if cached {
		if e.cache, err = hybrid.NewDenyCache(e.primary, hybrid.DenyCacheConfig{Clock: e.clk}); err != nil {
			t.Fatal(err)
		}
		primary = e.cache
	}
	e.f, err = hybrid.NewFallback(primary, local, hybrid.FallbackConfig{
		Mode: mode, Instances: instances, Timeout: timeout, CoolDown: coolDown, Clock: e.clk,
		Logger: slog.New(slog.DiscardHandler),
		OnStateChange: func(from, to observe.BreakerState) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.changes = append(e.changes, to.String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// warm loads the script and opens a connection with a generous deadline, so
// that the healthy phase does not depend on how fast a loaded machine dials.
func (e *env) warm(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.primary.Take(ctx, store.Request{Key: "warm", Policy: policy, Cost: 0}); err != nil {
		t.Fatal(err)
	}
}

// toxic adds a toxic to the proxy from its JSON description.
func (e *env) toxic(t *testing.T, js string) {
	t.Helper()
	if _, err := e.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("toxic %s: %v", js, err)
	}
}

// healToxics removes every toxic.
func healToxics(t *testing.T, e *env) { e.proxy.Toxics.ResetToxics(context.Background()) }

// call is one request's outcome.
type call struct {
	res     algo.Result
	err     error
	took    time.Duration // real time
	primary bool          // the Fallback's primary answered (its call count rose and it did not fail)
}

// take makes one request for key and measures it.
func (e *env) take(key string) call {
	before := e.f.Stats()
	start := time.Now()
	res, err := e.f.Take(context.Background(), store.Request{Key: key, Policy: policy, Cost: 1})
	took := time.Since(start)
	after := e.f.Stats()
	return call{res: res, err: err, took: took,
		primary: after.Calls > before.Calls && after.Failures == before.Failures}
}
