package grpclimit_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/internal/limitheader"
)

// TestMetadataFixture runs every case of the cross-module fixture
// (internal/testdata/ratelimit-headers.json) through a real server's
// interceptor, on the Limiter's Clock, over a store giving the case's
// answer, and checks each of the fixture's fields is exactly its value as
// lower-case metadata, retry-after only on a denial. httplimit's headers
// and rls's are pinned by the same cases.
func TestMetadataFixture(t *testing.T) {
	cases, err := limitheader.ReadCases("../internal/testdata/ratelimit-headers.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			policy := algo.PerSecond(1).Burst(c.Capacity)
			cfg := grpclimit.Config{Store: c.Store(), Policy: policy}
			if c.Name != "default" {
				cfg.Methods = map[string]grpclimit.Rule{"/grpc.health.v1.Health/*": {Name: c.Name, Policy: policy}}
			}
			e := start(t, cfg, options{})
			e.clk.Set(c.Now())
			md, err := e.check(t, t.Context(), "alice")
			if want := map[bool]codes.Code{true: codes.OK, false: codes.ResourceExhausted}[c.Allowed]; status.Code(err) != want {
				t.Errorf("err = %v, want code %v", err, want)
			}
			for _, m := range c.Mismatches(func(name string) []string { return md.Get(strings.ToLower(name)) }) {
				t.Error(m)
			}
		})
	}
}
