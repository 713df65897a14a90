package grpclimit_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// A server whose calls are limited per authenticated caller to a burst of
// 2 and 1 per second. The example's authentication interceptor trusts a
// metadata value, to keep it short; yours checks a credential first.
func Example() {
	clk := storetest.NewClock() // a manual clock: the example is deterministic
	ms, _ := memstore.New(memstore.Config{Clock: clk})
	defer ms.Close()
	lim, err := grpclimit.New(grpclimit.Config{
		Store:  ms,
		Clock:  clk,
		Policy: algo.PerSecond(1).Burst(2),
		Key:    grpclimit.Identity,
	})
	if err != nil {
		panic(err)
	}
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "user"); len(v) == 1 {
			ctx = grpclimit.WithIdentity(ctx, v[0])
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, lim.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 16)
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "user", "alice")
	for range 3 {
		var md metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Printf("%v, remaining %s", st.Code(), md.Get(grpclimit.MDRemaining))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Printf(", retry in %v", ri.RetryDelay.AsDuration())
			}
		}
		fmt.Println()
	}
	// Output:
	// OK, remaining [1]
	// OK, remaining [0]
	// ResourceExhausted, remaining [0], retry in 1s
}
