// Command articleapi is the article's Express app in Go: /api limited to a
// burst of 100 and 2 requests per second sustained, keyed by user else IP,
// with /api/feed answering {"ok":true}.
//
//	go run ./examples/articleapi                  # in-process limits
//	ab -n 1000 -c 200 http://127.0.0.1:3000/api/feed
//
// With -redis redis://127.0.0.1:6379/0 the buckets live in Redis, and any
// number of instances share one limit.
//
// The article keys by a client-supplied x-user-id header, which lets any
// client pick a fresh bucket per request. Here the user comes from the
// request context, set by an auth middleware after it checks a bearer
// token (demo tokens: -tokens alice=s3cret,bob=hunter2). Pass
// -trust-user-header only behind a gateway that strips and sets x-user-id
// itself; then the article's own ab run works unchanged:
//
//	ab -n 1000 -c 200 -H "x-user-id: test-user" http://127.0.0.1:3000/api/feed
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// options are the command's flags.
type options struct {
	addr            string
	capacity        int64
	rate            float64
	trustProxies    string // comma-separated CIDRs
	tokens          string // user=token pairs
	trustUserHeader bool
	redisURL        string
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:3000", "listen address")
	flag.Int64Var(&o.capacity, "capacity", 100, "burst capacity per client")
	flag.Float64Var(&o.rate, "rate", 2, "sustained requests per second per client (0.5: one every 2 s)")
	flag.StringVar(&o.trustProxies, "trust-proxy", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For is trusted")
	flag.StringVar(&o.tokens, "tokens", "", "demo bearer tokens, user=token,...")
	flag.BoolVar(&o.trustUserHeader, "trust-user-header", false, "key by the x-user-id header (only behind a gateway that sets it)")
	flag.StringVar(&o.redisURL, "redis", "", "Redis URL such as redis://127.0.0.1:6379/0, to share the limits between instances (default: in-process)")
	flag.Parse()

	st, closeStore, err := openStore(o.redisURL)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()
	h, err := newHandler(o, st)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: o.addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	slog.Info("listening", "addr", o.addr, "capacity", o.capacity, "rate", o.rate, "redis", o.redisURL != "")
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// openStore returns the store the buckets live in, and how to release it:
// Redis when a URL is given, so that several instances share one limit
// (run two with -addr 127.0.0.1:3000 and :3001 and the same -redis), else
// in-process.
func openStore(redisURL string) (store.Store, func(), error) {
	if redisURL == "" {
		s, err := memstore.New(memstore.Config{})
		return s, func() {}, err
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	opts.ContextTimeoutEnabled = true // a slow Redis costs at most the store's timeout
	rdb := redis.NewClient(opts)
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); rdb.Close() }, nil
}

// newHandler builds the app: auth, then the limiter, then the routes.
func newHandler(o options, st store.Store) (http.Handler, error) {
	var cfg httplimit.IPConfig
	if o.trustProxies != "" {
		cfg.TrustedProxies = strings.Split(o.trustProxies, ",")
	}
	ips, err := httplimit.NewClientIP(cfg)
	if err != nil {
		return nil, err
	}
	policy, err := algo.NewPolicy(o.capacity, algo.PerSecond(o.rate))
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(httplimit.Config{
		Store:  st,
		Key:    httplimit.User(ips.Key),
		Limits: []httplimit.Limit{{Name: "burst", Policy: policy}},
	})
	if err != nil {
		return nil, err
	}
	users := map[string]string{} // token → user
	for _, pair := range strings.Split(o.tokens, ",") {
		if user, token, ok := strings.Cut(pair, "="); ok && user != "" && token != "" {
			users[token] = user
		}
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /api/feed", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]bool{"ok": true})
	})
	root := http.NewServeMux()
	root.Handle("/api/", mw.Handler(api))
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return authenticate(root, users, o.trustUserHeader), nil
}

// authenticate puts the caller's user in the request context: the owner of
// a valid bearer token, or with trustHeader the x-user-id header. An
// invalid token is refused rather than treated as anonymous.
func authenticate(next http.Handler, users map[string]string, trustHeader bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			user, known := users[token]
			if !known {
				http.Error(w, `{"error":"invalid_token"}`, http.StatusUnauthorized)
				return
			}
			r = r.WithContext(httplimit.WithUser(r.Context(), user))
		} else if id := r.Header.Get("X-User-Id"); trustHeader && id != "" {
			r = r.WithContext(httplimit.WithUser(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}
