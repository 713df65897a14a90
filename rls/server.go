package rls

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Server runs a [Service] on a gRPC listener, with the gRPC health
// service, and an HTTP listener with /healthz, /readyz and /metrics.
type Server struct {
	// Service answers ShouldRateLimit. Required.
	Service *Service
	// Ready, if set, says whether the server should get traffic: nil when
	// the store answers (a Redis PING). It is asked at start, by every
	// /readyz and every ReadyInterval, and each answer sets the gRPC
	// health service's status: SERVING or NOT_SERVING.
	Ready func(ctx context.Context) error
	// ReadyInterval is how often Ready is asked besides /readyz. Default
	// 5s.
	ReadyInterval time.Duration
	// Gatherer serves /metrics. Default: none (404).
	Gatherer prometheus.Gatherer
	// ShutdownTimeout bounds how long in-flight calls may take to finish
	// once shutdown begins; then the remaining ones are cut. Default 10s.
	ShutdownTimeout time.Duration
	// Logger: default slog.Default().
	Logger *slog.Logger

	draining atomic.Bool
	health   *health.Server
}

// ready asks Ready and sets the health service's status from the answer;
// it returns Ready's error. During shutdown it changes nothing.
func (s *Server) ready(ctx context.Context) error {
	var err error
	if s.Ready != nil {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		err = s.Ready(ctx)
		cancel()
	}
	st := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	if !s.draining.Load() {
		s.health.SetServingStatus("", st)
		s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, st)
	}
	return err
}

// Serve serves gRPC on grpcLis and HTTP on httpLis (which may be nil)
// until ctx ends, then shuts down gracefully: the health service and
// /readyz report NOT_SERVING at once (so load balancers stop sending),
// the listeners stop accepting, in-flight calls finish (for at most
// ShutdownTimeout), and Serve returns. It closes the listeners, not the
// store: the caller closes that after Serve returns, when no call can
// use it any more.
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	if s.Service == nil {
		return errors.New("rls: Server needs a Service")
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.Default()
	}
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, s.Service)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	s.health = hs
	s.ready(ctx)
	every := s.ReadyInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()

	var hsrv *http.Server
	if httpLis != nil {
		hsrv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		if err := gs.Serve(grpcLis); err != nil {
			errs <- err
		}
	})
	if hsrv != nil {
		wg.Go(func() {
			if err := hsrv.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		})
	}
	var err error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case err = <-errs:
			break wait
		case <-tick.C:
			s.ready(ctx)
		}
	}
	logger.Info("rls: shutting down; finishing in-flight calls", "timeout", timeout)
	s.draining.Store(true)
	hs.Shutdown() // every service NOT_SERVING
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(timeout)
	select {
	case <-stopped:
	case <-timer.C:
		logger.Warn("rls: in-flight calls still running at the shutdown timeout; cutting them")
		gs.Stop()
		<-stopped
	}
	timer.Stop()
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		hsrv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	return err
}

// handler serves /healthz (the process runs), /readyz (it should get
// traffic: not shutting down and the store answers) and /metrics.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if err := s.ready(r.Context()); err != nil {
			http.Error(w, "store not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	if s.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}
