package rls_test

import (
	"context"
	"fmt"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/rls"
)

// A hot descriptor: one bucket of 5000 a second for the whole domain,
// shared by 4 servers, spent from leased batches (lease: true and
// Options.Leases). Close, once the server has stopped, gives back what the
// batches hold. (The store is a memstore so that the example runs; a fleet
// shares a redisstore.)
func ExampleService_Close() {
	cfg, err := rls.Parse("api.yaml", []byte(`
domain: api
descriptors:
  - key: global
    lease: true
    rate_limit: {unit: second, requests_per_unit: 5000}
`))
	if err != nil {
		panic(err)
	}
	shared, _ := memstore.New(memstore.Config{})
	defer shared.Close()
	svc, err := rls.NewService(cfg, rls.Options{Store: shared, Leases: &hybrid.LeasesConfig{Instances: 4}})
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "global", Value: "all"}}},
	}}
	ok := 0
	for range 100 {
		if resp, _ := svc.ShouldRateLimit(context.Background(), req); resp.OverallCode == pb.RateLimitResponse_OK {
			ok++
		}
	}
	fmt.Println("OK:", ok)
	// Output: OK: 100
}
