package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
)

// One limit of 1000 calls a second for the whole health service, shared
// by a fleet of 4 instances: with Leases, each instance takes the service
// bucket's tokens in batches, one store call each, and spends them
// locally. Close, once the server has stopped, gives back what is left.
// (The store is a memstore so that the example runs; in a fleet it is a
// redisstore.)
func ExampleLimiter_Close() {
	shared, _ := memstore.New(memstore.Config{})
	defer shared.Close()
	var storeCalls atomic.Int64
	counted := observe.Wrap(shared, "shared", observe.Funcs{
		Decision: func(context.Context, observe.Decision) { storeCalls.Add(1) },
	})
	service := func(context.Context, string, metadata.MD) (grpclimit.Key, error) {
		return grpclimit.Key{Class: "service", ID: "health"}, nil
	}
	lim, err := grpclimit.New(grpclimit.Config{
		Store:  counted,
		Policy: algo.PerSecond(1000).Burst(1000),
		Key:    service,
		Leases: &hybrid.LeasesConfig{Instances: 4},
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close() // deferred first, so it runs after srv.Stop
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 16)
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ok := 0
	for range 50 {
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
			ok++
		}
	}
	fmt.Println("admitted:", ok)
	fmt.Println("fewer store calls than calls:", storeCalls.Load() < 50)
	// Output:
	// admitted: 50
	// fewer store calls than calls: true
}
