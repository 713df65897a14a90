package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// fleet is N instances of one app, each a real http.Server on its own
// loopback port with its own store (and Redis client, when on Redis).
type fleet struct {
	urls   []string
	client *http.Client
}

// startFleet starts one server per store, all running the middleware built
// from cfg over /api/feed.
func startFleet(t *testing.T, cfg httplimit.Config, stores []store.Store) *fleet {
	t.Helper()
	f := &fleet{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}}
	t.Cleanup(f.client.CloseIdleConnections)
	for _, st := range stores {
		cfg := cfg
		cfg.Store = st
		mw, err := httplimit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /api/feed", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`+"\n")
		})))
		srv := httptest.NewServer(mux) // a real http.Server on 127.0.0.1:0
		t.Cleanup(srv.Close)
		f.urls = append(f.urls, srv.URL)
	}
	return f
}

// load sends n requests from c concurrent clients, round-robin over the
// instances (as a load balancer would), and counts the status codes per
// instance.
func (f *fleet) load(t *testing.T, n, c int, header http.Header) (codes []map[int]int) {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	codes = make([]map[int]int, len(f.urls))
	for i := range codes {
		codes[i] = map[int]int{}
	}
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				inst := i % len(f.urls)
				req, _ := http.NewRequest(http.MethodGet, f.urls[inst]+"/api/feed", nil)
				req.Header = header.Clone()
				resp, err := f.client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[inst][resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

func total(codes []map[int]int, status int) int {
	n := 0
	for _, c := range codes {
		n += c[status]
	}
	return n
}

// serverTime reads the Redis server's clock, the clock the buckets use.
func serverTime(t *testing.T, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// TestFleetAdmitsOneLimit: three instances sharing one redisstore (server
// clock) admit one limit, capacity + rate·elapsed, under concurrent load;
// three instances with their own memstores admit one limit each.
func TestFleetAdmitsOneLimit(t *testing.T) {
	const instances, clients, requests = 3, 8, 900
	policy := algo.PerSecond(20).Burst(60)
	srv := redistest.Start(t)
	cfg := httplimit.Config{Prefix: redistest.Prefix(t), Limits: []httplimit.Limit{{Name: "burst", Policy: policy}}}

	t.Run("shared redisstore", func(t *testing.T) {
		var stores []store.Store
		for range instances {
			st, err := redisstore.New(srv.Client(), redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			stores = append(stores, st)
		}
		f := startFleet(t, cfg, stores)
		rdb := srv.Client()
		start := serverTime(t, rdb)
		codes := f.load(t, requests, clients, nil)
		elapsed := serverTime(t, rdb).Sub(start)

		ok, denied := total(codes, 200), total(codes, 429)
		limit := policy.Capacity() + int64(elapsed.Seconds()*float64(policy.Rate().Tokens))
		t.Logf("%d instances, %d clients, %d requests in %v (server clock): admitted %d, denied %d; limit %d (capacity %d + 20/s × %.3fs); per instance %v",
			instances, clients, requests, elapsed.Round(time.Millisecond), ok, denied, limit, policy.Capacity(), elapsed.Seconds(), codes)
		if ok+denied != requests {
			t.Errorf("%d answers other than 200 and 429: %v", requests-ok-denied, codes)
		}
		if int64(ok) > limit {
			t.Errorf("the fleet admitted %d, above the one limit %d", ok, limit)
		}
		// Demand never stops, so tokens go unused only at the ends: those
		// refilled into the still-full bucket while the clients connect,
		// and those refilled after the last requests. Allow a second's.
		if slack := int64(policy.Rate().Tokens); int64(ok) < limit-slack {
			t.Errorf("the fleet admitted %d, more than %d below the limit %d", ok, slack, limit)
		}
		for i, c := range codes {
			if c[200] == 0 {
				t.Errorf("instance %d admitted nothing: %v", i, c)
			}
		}
	})

	t.Run("memstore per instance, for contrast", func(t *testing.T) {
		var stores []store.Store
		for range instances {
			st, _ := memstore.New(memstore.Config{})
			stores = append(stores, st)
		}
		f := startFleet(t, cfg, stores)
		began := time.Now()
		codes := f.load(t, requests, clients, nil)
		elapsed := time.Since(began)
		ok := total(codes, 200)
		one := policy.Capacity() + int64(elapsed.Seconds()*20)
		t.Logf("%d instances with their own memstore: admitted %d in %v, where one limit is %d", instances, ok, elapsed.Round(time.Millisecond), one)
		// Each instance sees requests/instances ≥ capacity requests, so
		// each admits at least its own full burst.
		if int64(ok) < instances*policy.Capacity() {
			t.Errorf("admitted %d, want at least %d (a burst per instance)", ok, instances*policy.Capacity())
		}
	})
}

// TestRedisOutage: with redis-server killed, a fail-open route serves and a
// fail-closed route answers 503, never 429; when it is back (empty), limits
// resume.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.Client(), redisstore.Config{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Store: st, Prefix: redistest.Prefix(t),
		Logger: slog.New(slog.DiscardHandler), Limits: []httplimit.Limit{{Policy: algo.PerMinute(2).Burst(2)}}})
	if err != nil {
		t.Fatal(err)
	}
	login, _ := mw.With(httplimit.Config{Fail: httplimit.FailClosed(time.Second)})
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	feed, auth := mw.Handler(ok), login.Handler(ok)
	get := func(h http.Handler) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	steps := []struct {
		name       string
		h          http.Handler
		want       int
		kill, back bool
	}{
		{"up: first", feed, 200, false, false},
		{"up: second", auth, 200, false, false},
		{"up: empty", feed, 429, false, false},
		{"down: fail-open serves", feed, 200, true, false},
		{"down: fail-closed refuses with 503", auth, 503, false, false},
		{"back, empty: a fresh bucket", feed, 200, false, true},
		{"back: limiting again", feed, 200, false, false},
		{"back: empty again", auth, 429, false, false},
	}
	for i, s := range steps {
		if s.kill {
			srv.Kill(t)
		}
		if s.back {
			srv.Revive(t)
		}
		if got := get(s.h); got != s.want {
			t.Errorf("step %d (%s): %d, want %d", i, s.name, got, s.want)
		}
	}
}

// TestClusterMultiLimit: on a Redis Cluster, limits keyed by the same
// identity share its hash tag, so TakeMulti is atomic; limits keyed by
// different identities fall back to taking in order.
func TestClusterMultiLimit(t *testing.T) {
	cl := redistest.StartCluster(t)
	st, err := redisstore.New(cl.Client(), redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	tenant := func(r *http.Request) (httplimit.Key, error) { return httplimit.Key{Class: "tenant", ID: "acme"}, nil }
	for _, c := range []struct {
		name, prefix string
		daily        httplimit.KeyFunc
		burst        string // burst's RateLimit item after the daily limit refuses
	}{
		{"same identity: atomic", "atomic:", nil, `"burst";r=2;`},
		{"ip and tenant: in order", "inorder:", tenant, `"burst";r=0;`},
	} {
		t.Run(c.name, func(t *testing.T) {
			mw, err := httplimit.New(httplimit.Config{Store: st, Prefix: prefix + c.prefix,
				Limits: []httplimit.Limit{
					{Name: "burst", Policy: algo.PerHour(1).Burst(5)},
					{Name: "daily", Policy: algo.PerDay(3).Burst(3), Key: c.daily},
				}})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			var w *httptest.ResponseRecorder
			codes := map[int]int{}
			for range 5 {
				w = httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				codes[w.Code]++
			}
			if codes[200] != 3 || codes[429] != 2 {
				t.Errorf("codes %v, want 3×200 then 2×429 (daily)", codes)
			}
			if got := w.Header().Get("RateLimit"); len(got) < len(c.burst) || got[:len(c.burst)] != c.burst {
				t.Errorf("RateLimit %q, want prefix %q", got, c.burst)
			}
		})
	}
}

// TestKeyMemoryUsage measures, on a real redis-server under redisstore's
// default prefix "rb:", the MEMORY USAGE of the buckets the middleware
// makes for common clients, and of the same bucket copied to the key the
// layout before the compact one gave it (http:default:*:user:{id}). Run
// it with
//
//	go test -run TestKeyMemoryUsage -v ./httplimit/
//
// On redis-server 7.0.15 a bucket costs 72 bytes up to a 30-byte Redis
// key, 88 up to 44, 104 up to 60, 120 up to 76.
func TestKeyMemoryUsage(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("measures keys under the default prefix: needs a server of its own, not REDIS_URL")
	}
	rdb := srv.Client()
	st, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Store: st, Key: httplimit.User(httplimit.IP)})
	if err != nil {
		t.Fatal(err)
	}
	byAPIKey, err := mw.With(httplimit.Config{Limits: []httplimit.Limit{{Policy: algo.PerSecond(2).Burst(100), Key: httplimit.APIKey("X-API-Key")}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	usage := func(key string) int64 {
		t.Helper()
		n, err := rdb.MemoryUsage(ctx, key).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		return n
	}
	const uuid = "0b7d1a52-3c1e-4f0a-9d2b-6a8e5f4c3b21"
	for _, c := range []struct {
		name, remote, user, apiKey string
		mw                         *httplimit.Middleware
		old                        string // the key before, without "rb:"
		want                       int64  // at most, bytes
	}{
		{"user test-user", "127.0.0.1:1", "test-user", "", mw, "http:default:*:user:{test-user}", 72},
		{"IPv4", "203.0.113.195:1", "", "", mw, "http:default:*:ip:{203.0.113.195}", 72},
		{"IPv6 /64", "[2001:db8:85a3:8d3:1319:8a2e:370:7348]:1", "", "", mw, "http:default:*:ip:{2001:db8:85a3:8d3::/64}", 88},
		{"user UUID", "127.0.0.1:1", uuid, "", mw, "http:default:*:user:{" + uuid + "}", 104},
		{"API key, hashed", "127.0.0.1:1", "", "secret", byAPIKey, "", 104},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/feed", nil)
		r.RemoteAddr = c.remote
		if c.user != "" {
			r = r.WithContext(httplimit.WithUser(r.Context(), c.user))
		}
		if c.apiKey != "" {
			r.Header.Set("X-API-Key", c.apiKey)
		}
		w := httptest.NewRecorder()
		c.mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
		keys, err := c.mw.Keys(r)
		if w.Code != 200 || err != nil {
			t.Fatalf("%s: %d, %v", c.name, w.Code, err)
		}
		key := redisstore.DefaultPrefix + keys[0]
		got := usage(key)
		if c.old == "" {
			_, id, _ := strings.Cut(keys[0], "{")
			c.old = "http:default:*:apikey:{" + id
		}
		old := redisstore.DefaultPrefix + c.old
		if err := rdb.Copy(ctx, key, old, 0, false).Err(); err != nil {
			t.Fatal(err)
		}
		before := usage(old)
		t.Logf("%-16s %3d B  %-45s  before: %3d B  %s", c.name, got, key, before, old)
		if got > c.want || got > before {
			t.Errorf("%s: %s uses %d bytes, want at most %d and at most the %d of %s", c.name, key, got, c.want, before, old)
		}
	}
}
