package grpclimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestLeasesOption: with Config.Leases, 200 real gRPC calls of one caller
// on a real Redis are all admitted in a few Redis calls, the rest from
// leased batches; without it, each call is a Redis call. The Limiter's
// Close (start's cleanup) stops the Leases' goroutine, which goleak checks.
func TestLeasesOption(t *testing.T) {
	const calls = 200
	rdb := redistest.Start(t).Client()
	for _, tc := range []struct {
		name     string
		leases   *hybrid.LeasesConfig
		maxCalls int64
	}{
		{"leased", &hybrid.LeasesConfig{Instances: 1, Clock: storetest.NewClock()}, calls / 8},
		{"unleased", nil, calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t) + tc.name + ":"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			var redisCalls atomic.Int64
			count := observe.Funcs{Decision: func(context.Context, observe.Decision) { redisCalls.Add(1) }}
			e := start(t, grpclimit.Config{Store: observe.Wrap(rs, "redis", count), Policy: algo.PerSecond(1000).Burst(1000), Leases: tc.leases}, options{})
			for i := range calls {
				if _, err := e.check(t, t.Context(), "alice"); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			n := redisCalls.Load()
			t.Logf("%s: %d calls admitted in %d Redis calls", tc.name, calls, n)
			if n > tc.maxCalls || tc.leases == nil && n != calls {
				t.Errorf("%d Redis calls for %d gRPC calls, want at most %d", n, calls, tc.maxCalls)
			}
		})
	}
}

// TestLeasesRefused: New refuses Leases it cannot honour with an error
// wrapping ErrInvalidConfig (and hybrid's, for a LeasesConfig NewLeases
// refuses).
func TestLeasesRefused(t *testing.T) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	for name, tc := range map[string]struct {
		cfg  grpclimit.Config
		also error
	}{
		"no store":     {grpclimit.Config{Leases: &hybrid.LeasesConfig{Instances: 1}}, nil},
		"no instances": {grpclimit.Config{Store: ms, Leases: &hybrid.LeasesConfig{}}, hybrid.ErrInvalidConfig},
		"bad rule":     {grpclimit.Config{Store: ms, Leases: &hybrid.LeasesConfig{Instances: 1}, Cost: -1}, nil},
	} {
		if _, err := grpclimit.New(tc.cfg); !errors.Is(err, grpclimit.ErrInvalidConfig) || tc.also != nil && !errors.Is(err, tc.also) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig (and %v)", name, err, tc.also)
		}
	}
}
