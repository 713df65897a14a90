package rls_test

import (
	"context"
	"fmt"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// A service deciding envoyproxy/ratelimit's configuration on token
// buckets, called directly (a Server puts it on gRPC). Two a second per
// address: the third request at once is refused, with the exact wait.
func Example() {
	cfg, err := rls.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 2
`))
	if err != nil {
		panic(err)
	}
	ms, _ := memstore.New(memstore.Config{Clock: storetest.NewClock()}) // a manual clock: deterministic
	defer ms.Close()
	svc, err := rls.NewService(cfg, rls.Options{Store: ms})
	if err != nil {
		panic(err)
	}
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.7"}}},
	}}
	for range 3 {
		resp, _ := svc.ShouldRateLimit(context.Background(), req)
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.LimitRemaining, st.DurationUntilReset.AsDuration())
	}
	// Output:
	// OK 1 500ms
	// OK 0 1s
	// OVER_LIMIT 0 500ms
}

// A configuration error names the file and the line.
func ExampleParse() {
	_, err := rls.Parse("limits/api.yaml", []byte(`domain: api
descriptors:
  - key: client
    rate_limit: {unit: fortnight, requests_per_unit: 5}
`))
	fmt.Println(err)
	// Output:
	// limits/api.yaml:4: api.client: rate_limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
}
