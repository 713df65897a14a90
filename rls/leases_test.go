package rls_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// hotYAML is a domain with a hot descriptor (one bucket for every
// request) marked lease: true, and a per-client one beside it.
const hotYAML = `domain: hot
descriptors:
  - key: global
    lease: true
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// TestHotDescriptor: on a real Redis (client clock, stopped), 200
// requests of a lease: true descriptor are all admitted in a few Redis
// calls with Options.Leases, and in 200 without the lease key. Then 21
// requests of the hot descriptor beside a client's (1 an hour): the
// first is admitted, the others refused by the client's bucket, and the
// hot bucket, once Close gave the batches back, has exactly 1000 − 201
// tokens: a refusal by the other descriptor gives the leased tokens back.
func TestHotDescriptor(t *testing.T) {
	rdb := redistest.Start(t).Client()
	global := desc("global=all")
	for _, tc := range []struct {
		name     string
		yaml     string
		leases   *hybrid.LeasesConfig
		maxCalls int64
	}{
		{"leased", hotYAML, &hybrid.LeasesConfig{Instances: 1}, 25},
		{"unleased", strings.Replace(hotYAML, "    lease: true\n", "", 1), nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := rls.Parse("hot.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			clk := storetest.NewClock()
			if tc.leases != nil {
				tc.leases.Clock = clk
			}
			rs, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t) + tc.name + ":", Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			var calls atomic.Int64
			count := observe.Funcs{Decision: func(context.Context, observe.Decision) { calls.Add(1) }}
			svc, err := rls.NewService(cfg, rls.Options{Store: observe.Wrap(rs, "redis", count), Leases: tc.leases, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			ask := func(ds ...*rlpb.RateLimitDescriptor) pb.RateLimitResponse_Code {
				resp, err := svc.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "hot", Descriptors: ds})
				if err != nil {
					t.Fatal(err)
				}
				return resp.OverallCode
			}
			for i := range 200 {
				if c := ask(global); c != pb.RateLimitResponse_OK {
					t.Fatalf("request %d: %v", i, c)
				}
			}
			n := calls.Load()
			t.Logf("%s: 200 requests admitted in %d Redis calls", tc.name, n)
			if n > tc.maxCalls || tc.leases == nil && n != 200 {
				t.Errorf("%d Redis calls for 200 requests, want at most %d", n, tc.maxCalls)
			}
			for i := range 21 {
				want := pb.RateLimitResponse_OVER_LIMIT
				if i == 0 {
					want = pb.RateLimitResponse_OK
				}
				if c := ask(global, desc("client=203.0.113.9")); c != want {
					t.Fatalf("request %d with the client's descriptor: %v, want %v", i, c, want)
				}
			}
			svc.Close()
			key, _ := svc.Key("hot", global)
			b, err := rs.Inspect(t.Context(), key, algo.PerSecond(1000).Burst(1000))
			if err != nil {
				t.Fatal(err)
			}
			if b.Tokens != 1000-201 {
				t.Errorf("the hot bucket has %d tokens after Close, want %d", b.Tokens, 1000-201)
			}
		})
	}
}

// TestLeaseRefused: the loader refuses lease: true where no batch could
// serve it, naming the line; NewService refuses lease: true descriptors
// without Options.Leases, and a LeasesConfig hybrid refuses.
func TestLeaseRefused(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: a\n    lease: true\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
			`f.yaml:4: d.a: lease without a rate_limit of its own`},
		{"domain: d\ndescriptors:\n  - key: a\n    lease: true\n    rate_limit: {unlimited: true}\n",
			`f.yaml:4: d.a: lease on a rate_limit that keeps no bucket`},
		{"domain: d\ndescriptors:\n  - key: a\n    lease: true\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
			`f.yaml:4: d.a: lease on a rate_limit that keeps no bucket`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: v\n    shadow_mode: true\n    lease: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
			`f.yaml:6: d.a_v: lease with shadow_mode`},
		{"domain: d\ndescriptors:\n  - key: a\n    lease: yes please\n",
			`f.yaml:4: lease: "yes please" is not true or false`},
	} {
		_, err := rls.Parse("f.yaml", []byte(c.yaml))
		if !errors.Is(err, rls.ErrConfig) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.yaml, err, c.want)
		}
	}
	cfg, err := rls.Parse("hot.yaml", []byte(hotYAML))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if _, err := rls.NewService(cfg, rls.Options{Store: ms}); err == nil || !strings.Contains(err.Error(), `domain "hot" has lease: true descriptors`) {
		t.Errorf("NewService without Leases: %v", err)
	}
	if _, err := rls.NewService(cfg, rls.Options{Store: ms, Leases: &hybrid.LeasesConfig{}}); !errors.Is(err, hybrid.ErrInvalidConfig) {
		t.Errorf("NewService with Instances 0: %v, want hybrid.ErrInvalidConfig", err)
	}
}
