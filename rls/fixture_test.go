package rls_test

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratebucket/ratebucket/internal/limitheader"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestHeaderFixture runs every case of the cross-module fixture
// (internal/testdata/ratelimit-headers.json) through a real server's
// ShouldRateLimit, on the Service's Clock, over a store giving the case's
// answer, and checks each of the fixture's headers is exactly its value,
// in lower case as Envoy adds it, retry-after only on a denial.
// httplimit's headers and grpclimit's metadata are pinned by the same
// cases.
func TestHeaderFixture(t *testing.T) {
	cases, err := limitheader.ReadCases("../internal/testdata/ratelimit-headers.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			cfg, err := rls.Parse("fixture.yaml", fmt.Appendf(nil, `domain: fixture
descriptors:
  - key: client
    rate_limit:
      name: %s
      unit: hour
      requests_per_unit: %d
`, c.Name, c.Capacity))
			if err != nil {
				t.Fatal(err)
			}
			clk := storetest.NewClock()
			clk.Set(c.Now())
			r := serve(t, cfg, rls.Options{Store: c.Store(), Clock: clk, ResponseHeaders: true}, nil)
			resp := r.ask(t, "fixture", 0, desc("client=a"))
			if want := map[bool]pb.RateLimitResponse_Code{true: pb.RateLimitResponse_OK, false: pb.RateLimitResponse_OVER_LIMIT}[c.Allowed]; resp.OverallCode != want {
				t.Errorf("overall %v, want %v", resp.OverallCode, want)
			}
			for _, m := range c.Mismatches(func(name string) []string {
				var vs []string
				for _, h := range resp.ResponseHeadersToAdd {
					if h.Key == strings.ToLower(name) {
						vs = append(vs, h.Value)
					}
				}
				return vs
			}) {
				t.Error(m)
			}
		})
	}
}
