package grpclimit_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// interceptors start none, and every server and client must be closed.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// env is a real gRPC server with grpc's health service behind a test
// authentication interceptor and the limiter, and a client of it: over
// bufconn, or over TCP on 127.0.0.1 when tcp is set.
type env struct {
	clk    *storetest.Clock
	ms     *memstore.Store // the store, when start made it
	lim    *grpclimit.Limiter
	health healthpb.HealthClient
	hs     *health.Server
}

// options of start.
type options struct {
	tcp bool
	// before, if set, runs between authentication and the limiter, in
	// both unary and stream calls.
	before func(ctx context.Context)
	// ended, if set, receives the server's outcome of every call whose
	// metadata has "slow", once the whole interceptor chain returned.
	ended chan<- error
	// after, if set, runs after the limiter, before the handler, in
	// unary calls, with the handler's context (to set trailers).
	after func(ctx context.Context)
}

// start serves cfg's limiter. A nil cfg.Store becomes a memstore on the
// env's manual clock, which is also the limiter's Clock.
func start(t *testing.T, cfg grpclimit.Config, o options) *env {
	t.Helper()
	e := &env{clk: storetest.NewClock()}
	if cfg.Store == nil {
		ms, err := memstore.New(memstore.Config{Clock: e.clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
		e.ms, cfg.Store = ms, ms
	}
	if cfg.Clock == nil {
		cfg.Clock = e.clk
	}
	lim, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.lim = lim
	t.Cleanup(func() { lim.Close() }) // after the server stops
	before := func(ctx context.Context) {}
	if o.before != nil {
		before = o.before
	}
	report := func(ctx context.Context, err error) error {
		if o.ended != nil && len(metadata.ValueFromIncomingContext(ctx, "slow")) > 0 {
			o.ended <- err
		}
		return err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			return resp, report(ctx, err)
		}, authUnary, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			before(ctx)
			return h(ctx, req)
		}, lim.Unary(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if o.after != nil {
				o.after(ctx)
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return report(ss.Context(), h(srv, ss))
		}, authStream, func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			before(ss.Context())
			return h(srv, ss)
		}, lim.Stream()),
	)
	e.hs = health.NewServer()
	healthpb.RegisterHealthServer(srv, e.hs)

	var lis net.Listener
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	target := "passthrough:///bufconn"
	if o.tcp {
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		target = lis.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 16)
		lis = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		e.hs.Shutdown()
		srv.Stop()
		wg.Wait()
	})
	e.health = healthpb.NewHealthClient(conn)
	return e
}

// as returns ctx carrying the test bearer token of who ("" for none).
func as(ctx context.Context, who string) context.Context {
	if who == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+who)
}

// identity is the test authentication: the bearer token is the identity.
func identity(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		if id, ok := strings.CutPrefix(v[0], "Bearer "); ok {
			return grpclimit.WithIdentity(ctx, id)
		}
	}
	return ctx
}

func authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(identity(ctx), req)
}

// authedStream is a ServerStream whose context carries the identity.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authedStream) Context() context.Context { return s.ctx }

func authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, authedStream{ss, identity(ss.Context())})
}

// check makes one unary Check call as who and returns the response header
// metadata and the error.
func (e *env) check(t *testing.T, ctx context.Context, who string) (metadata.MD, error) {
	t.Helper()
	var md metadata.MD
	_, err := e.health.Check(as(ctx, who), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	return md, err
}

// retryDelay returns the RetryInfo delay of a ResourceExhausted error, and
// fails the test for any other error.
func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v, want ResourceExhausted", err)
	}
	d, ok := retryInfo(err)
	if !ok {
		t.Fatalf("ResourceExhausted without a RetryInfo detail: %v", status.Convert(err).Proto())
	}
	return d
}

// retryInfo returns the RetryInfo delay of a status error.
func retryInfo(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

// wantCode fails the test unless err has gRPC status code c.
func wantCode(t *testing.T, err error, c codes.Code) {
	t.Helper()
	if got := status.Code(err); got != c {
		t.Fatalf("err = %v (code %v), want code %v", err, got, c)
	}
}
