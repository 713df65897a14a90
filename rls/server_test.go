package rls_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store"
)

// gateStore is a memstore whose Takes wait at a gate: the test holds a
// call in flight for as long as it likes.
type gateStore struct {
	*memstore.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gateStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
}

// TestServerHealthAndGracefulShutdown: the gRPC health service and
// /healthz, /readyz, /metrics answer; at shutdown the health service and
// /readyz turn NOT_SERVING first, a call in flight still completes, and
// Serve returns only after it.
func TestServerHealthAndGracefulShutdown(t *testing.T) {
	cfg, err := rls.Parse("api.yaml", []byte(api))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateStore{ms, make(chan struct{}), make(chan struct{})}
	reg := prometheus.NewRegistry()
	m, _ := rls.NewMetrics(reg)
	svc, err := rls.NewService(cfg, rls.Options{Store: store.Store(gate), Metrics: m, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var notReady atomic.Pointer[error] // what Ready answers; nil: ready
	srv := &rls.Server{Service: svc, Gatherer: reg, Logger: quiet,
		Ready: func(context.Context) error {
			if e := notReady.Load(); e != nil {
				return *e
			}
			return nil
		}}
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, shutdown := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, gl, hl) }()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	base := "http://" + hl.Addr().String()

	health := healthpb.NewHealthClient(conn)
	wantHealth(t, health, healthpb.HealthCheckResponse_SERVING)
	wantHTTP(t, base+"/healthz", 200, "ok")
	wantHTTP(t, base+"/readyz", 200, "ok")
	// Readiness follows the store, in /readyz and in the health service.
	refused := errors.New("redis: connection refused")
	notReady.Store(&refused)
	wantHTTP(t, base+"/readyz", 503, "store not ready: redis: connection refused")
	wantHealth(t, health, healthpb.HealthCheckResponse_NOT_SERVING)
	notReady.Store(nil)
	wantHTTP(t, base+"/readyz", 200, "ok")
	wantHealth(t, health, healthpb.HealthCheckResponse_SERVING)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, family := range []string{"ratebucket_rls_request_duration_seconds", "ratebucket_rls_config_domains"} {
		if !strings.Contains(string(text), family) {
			t.Errorf("/metrics has no %s:\n%s", family, text)
		}
	}

	wctx, stopWatch := context.WithCancel(t.Context())
	watch, err := health.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v, %v", resp, err)
	}

	inflight := make(chan error, 1)
	go func() {
		resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(),
			&pb.RateLimitRequest{Domain: "api", Descriptors: descs("client=a")})
		if err == nil && resp.OverallCode != pb.RateLimitResponse_OK {
			err = errors.New(resp.String())
		}
		inflight <- err
	}()
	<-gate.entered
	shutdown()
	if resp, err := watch.Recv(); err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch at shutdown: %v, %v; want NOT_SERVING", resp, err)
	}
	stopWatch() // a Watch stream is a call in flight too; Envoy's checks use Check
	wantHTTP(t, base+"/readyz", 503, "shutting down")
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a call in flight", err)
	default:
	}
	close(gate.release)
	if err := <-inflight; err != nil {
		t.Fatalf("the call in flight at shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	ms.Close()
}

// wantHealth checks both services' status in the gRPC health service.
func wantHealth(t *testing.T, health healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for _, service := range []string{"", pb.RateLimitService_ServiceDesc.ServiceName} {
		resp, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.Status != want {
			t.Fatalf("health of %q: %v, %v; want %v", service, resp, err, want)
		}
	}
}

func wantHTTP(t *testing.T, url string, code int, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code || strings.TrimSpace(string(b)) != body {
		t.Fatalf("GET %s: %d %q, want %d %q", url, resp.StatusCode, b, code, body)
	}
}
