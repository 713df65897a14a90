package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/observe/promtext"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// demoFleet is the demo's running instances and the stores behind them.
type demoFleet struct {
	urls     []string // base URLs, http://127.0.0.1:PORT
	servers  []*http.Server
	backends []*backend // one shared, or one per instance
	obs      *demoObserver
	metrics  *promtext.Registry // served at /metrics
	prefix   string             // redisstore prefix of this run's keys
	serving  sync.WaitGroup     // the servers' Serve loops
}

// startFleet opens the stores and starts cfg.instances servers on loopback.
// The caller must call stop.
func startFleet(ctx context.Context, e *env, cfg *demoConfig) (f *demoFleet, err error) {
	f = &demoFleet{obs: &demoObserver{}, metrics: &promtext.Registry{}, prefix: "rb:demo:" + runID() + ":"}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	stores := 1 // one memstore shared by every instance
	if cfg.perInstance || cfg.redis.url != "" {
		stores = cfg.instances // a memstore each, or a Redis client each
	}
	cfg.redis.poolSize = (cfg.c + cfg.instances - 1) / cfg.instances // what reaches one instance
	cfg.redis.observer = f.metrics                                   // pipeline batch sizes
	for range stores {
		be, err := openBackend(ctx, cfg.redis, f.prefix)
		if err != nil {
			return f, err
		}
		f.backends = append(f.backends, be)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i := range cfg.instances {
		be := f.backends[i%len(f.backends)]
		hc := demoLimits(cfg)
		hc.Store, hc.Observer, hc.Logger = f.observedStore(be), f.obs.Observe, logger
		if cfg.fail == "closed" {
			hc.Fail = httplimit.FailClosed(time.Second)
		}
		mw, err := httplimit.New(hc)
		if err != nil {
			return f, err
		}
		login, err := mw.With(httplimit.Config{Fail: httplimit.FailClosed(time.Second)})
		if err != nil {
			return f, err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /api/feed", mw.Handler(http.HandlerFunc(feed)))
		mux.Handle("POST /api/login", login.Handler(http.HandlerFunc(feed)))
		mux.Handle("GET /metrics", f.metrics)
		addr := "127.0.0.1:0"
		if cfg.port != 0 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.port+i))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return f, fmt.Errorf("instance %d: %w", i+1, err)
		}
		srv := &http.Server{Handler: trustUserHeader(cfg.userHeader, mux), ReadHeaderTimeout: 10 * time.Second}
		f.servers = append(f.servers, srv)
		f.urls = append(f.urls, "http://"+ln.Addr().String())
		f.serving.Go(func() { srv.Serve(ln) }) // returns http.ErrServerClosed at stop
	}
	return f, nil
}

// demoLimits is the middleware's configuration without its store: one
// limit of the demo's policy, keyed by user, else by IP.
func demoLimits(cfg *demoConfig) httplimit.Config {
	return httplimit.Config{Limits: []httplimit.Limit{{Policy: cfg.policy}}, Key: httplimit.User(httplimit.IP)}
}

// stores returns the number of independent stores: one when the instances
// share memstore or Redis, one per instance with --per-instance.
func (f *demoFleet) stores() int {
	if f.backends[0].onRedis() {
		return 1
	}
	return len(f.backends)
}

// warm opens n connections in each Redis client's pool, with n PINGs at
// once, and loads the script with a peek (cost 0 writes nothing), as a
// long-running app would have done: the run then measures the limiter, not
// the TCP and HELLO handshakes and NOSCRIPT fallbacks of a cold start.
func (f *demoFleet) warm(ctx context.Context, n int, p algo.Policy) error {
	var g errgroup.Group
	for _, be := range f.backends {
		for range n {
			g.Go(func() error { return be.rdb.Ping(ctx).Err() })
		}
	}
	err := g.Wait()
	for _, be := range f.backends {
		if err == nil {
			_, err = be.store.Take(ctx, store.Request{Key: "warm-up", Policy: p, Cost: 0})
		}
	}
	if err != nil {
		return fmt.Errorf("warming the Redis connections: %w", err)
	}
	return nil
}

// sent sums the commands the fleet's Redis clients have sent, and their
// round trips.
func (f *demoFleet) sent() (map[string]int64, int64) {
	total, trips := map[string]int64{}, int64(0)
	for _, be := range f.backends {
		n, t := be.sent.snapshot()
		for k, v := range n {
			total[k] += v
		}
		trips += t
	}
	return total, trips
}

// stop shuts the servers down, waiting for requests in flight, and closes
// the stores.
func (f *demoFleet) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range f.servers {
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	}
	f.serving.Wait()
	for _, be := range f.backends {
		be.close()
	}
}

// feed is the article's handler, and the demo's login: {"ok":true}.
func feed(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}` + "\n"))
}

// trustUserHeader stands in for an app's authentication middleware: it
// takes the user id from the named header and puts it in the request
// context with httplimit.WithUser, where httplimit.User finds it.
//
// This is for the local demo ONLY. A client can send any header, so a real
// app sets the user from a verified credential (a session, a signed token),
// never from a header the client controls. An empty header name trusts
// nothing, and every request is keyed by its IP.
func trustUserHeader(header string, next http.Handler) http.Handler {
	if header == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := strings.TrimSpace(r.Header.Get(header)); id != "" {
			r = r.WithContext(httplimit.WithUser(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// demoObserver is the demo's httplimit Config.Observer: it counts outcomes and
// records the latency of the limiter's own check (the store call inside the
// middleware), as a user would feed Prometheus.
type demoObserver struct {
	mu       sync.Mutex
	check    histogram
	outcomes map[string]int
	firstErr error
}

// Observe is the demo's httplimit Config.Observer.
func (o *demoObserver) Observe(_ context.Context, ev httplimit.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.outcomes == nil {
		o.outcomes = map[string]int{}
	}
	o.outcomes[ev.Outcome.String()]++
	o.check.record(ev.Latency)
	if ev.Err != nil && o.firstErr == nil {
		o.firstErr = ev.Err
	}
}

// snapshot returns a copy of what o has seen, and resets it.
func (o *demoObserver) snapshot() (h histogram, outcomes map[string]int, firstErr error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, outcomes, firstErr = o.check, o.outcomes, o.firstErr
	o.check, o.outcomes, o.firstErr = histogram{}, nil, nil
	return h, outcomes, firstErr
}

// redisKeys returns this run's keys (without the store prefix) and their
// total MEMORY USAGE in bytes.
func (f *demoFleet) redisKeys(ctx context.Context) (keys []string, bytes int64, err error) {
	rdb := f.backends[0].rdb
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, f.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n, err := c.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			keys, bytes = append(keys, strings.TrimPrefix(iter.Val(), f.prefix)), bytes+n
			mu.Unlock()
		}
		return iter.Err()
	}
	if err := forEachNode(ctx, rdb, scan); err != nil {
		return nil, 0, fmt.Errorf("reading the run's keys: %w", err)
	}
	return keys, bytes, nil
}
