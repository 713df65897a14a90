package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestLeasesOption: with Config.Leases, 200 requests of one hot client on
// a real Redis are all admitted in a few Redis calls, the rest from leased
// batches; without it, each request is a call. Close gives the batch back
// (goleak, in TestMain, fails the package if its goroutine is left).
func TestLeasesOption(t *testing.T) {
	const requests = 200
	rdb := redistest.Start(t).Client()
	for _, tc := range []struct {
		name     string
		leases   *hybrid.LeasesConfig
		maxCalls int64
	}{
		{"leased", &hybrid.LeasesConfig{Instances: 1, Clock: storetest.NewClock()}, requests / 8},
		{"unleased", nil, requests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t) + tc.name + ":"})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			count := observe.Funcs{Decision: func(context.Context, observe.Decision) { calls.Add(1) }}
			mw, err := httplimit.New(httplimit.Config{
				Store:  observe.Wrap(rs, "redis", count),
				Limits: []httplimit.Limit{{Policy: algo.PerSecond(1000).Burst(1000)}},
				Leases: tc.leases,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			admitted := 0
			for range requests {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				if w.Code == http.StatusOK {
					admitted++
				}
			}
			if err := mw.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d of %d admitted in %d Redis calls", tc.name, admitted, requests, calls.Load())
			if admitted != requests {
				t.Errorf("admitted %d of %d", admitted, requests)
			}
			if n := calls.Load(); n > tc.maxCalls || tc.leases == nil && n != requests {
				t.Errorf("%d Redis calls for %d requests, want at most %d", n, requests, tc.maxCalls)
			}
		})
	}
}

// TestLeasesRefused: the configurations Config.Leases cannot honour are
// refused by New and With, each with an error wrapping ErrInvalidConfig.
func TestLeasesRefused(t *testing.T) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	one := &hybrid.LeasesConfig{Instances: 1}
	for _, tc := range []struct {
		name string
		cfg  httplimit.Config
		also error
	}{
		{"no store", httplimit.Config{Leases: one}, nil},
		{"delay", httplimit.Config{Store: ms, Leases: one, Delay: time.Second}, nil},
		{"no instances", httplimit.Config{Store: ms, Leases: &hybrid.LeasesConfig{}}, hybrid.ErrInvalidConfig},
		{"negative lifetime", httplimit.Config{Store: ms, Leases: &hybrid.LeasesConfig{Instances: 2, Lifetime: -1}}, hybrid.ErrInvalidConfig},
	} {
		_, err := httplimit.New(tc.cfg)
		if !errors.Is(err, httplimit.ErrInvalidConfig) || tc.also != nil && !errors.Is(err, tc.also) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig (and %v)", tc.name, err, tc.also)
		}
	}
	mw, err := httplimit.New(httplimit.Config{Store: ms, Leases: one})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	for name, route := range map[string]httplimit.Config{
		"route delay":  {Delay: time.Second},
		"route leases": {Leases: one},
	} {
		if _, err := mw.With(route); !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Errorf("%s: With: %v, want ErrInvalidConfig", name, err)
		}
	}
}
