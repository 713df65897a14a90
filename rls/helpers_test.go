package rls_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// server, client, store and watcher must be stopped.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// backend opens a store on the test's manual clock. Redis backends use it
// as their client clock, so every backend answers the same, exactly.
type backend struct {
	name string
	open func(t *testing.T, clk *storetest.Clock) (s store.Store, cluster bool)
}

var memory = backend{"memstore", func(t *testing.T, clk *storetest.Clock) (store.Store, bool) {
	ms, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	return ms, false
}}

// onRedis returns a backend on one real redis-server (started on first
// use, for the whole test t), each store under its own prefix.
func onRedis(t *testing.T) backend {
	var (
		once sync.Once
		srv  *redistest.Server
	)
	return backend{"redis", func(tt *testing.T, clk *storetest.Clock) (store.Store, bool) {
		once.Do(func() { srv = redistest.Start(t) })
		return newRedisStore(tt, srv.Client(), clk), false
	}}
}

// onCluster is onRedis on a local Redis Cluster of three masters.
func onCluster(t *testing.T) backend {
	var (
		once sync.Once
		cl   *redistest.Cluster
	)
	return backend{"cluster", func(tt *testing.T, clk *storetest.Clock) (store.Store, bool) {
		once.Do(func() { cl = redistest.StartCluster(t) })
		return newRedisStore(tt, cl.Client(), clk), true
	}}
}

func newRedisStore(t *testing.T, c redis.UniversalClient, clk *storetest.Clock) store.Store {
	rs, err := redisstore.New(c, redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// quiet is the tests' logger: servers starting and stopping by the
// hundred say nothing worth reading.
var quiet = slog.New(slog.DiscardHandler)

// rig is a running rls.Server on 127.0.0.1 and a gRPC client of it.
type rig struct {
	client pb.RateLimitServiceClient
	conn   *grpc.ClientConn
	reg    *prometheus.Registry
	addr   string
}

// serve runs a Server for src over opt.Store (with fresh metrics) until
// the test ends.
func serve(t *testing.T, src rls.ConfigSource, opt rls.Options, srv *rls.Server) *rig {
	t.Helper()
	r := &rig{reg: prometheus.NewRegistry()}
	if opt.Metrics == nil {
		m, err := rls.NewMetrics(r.reg)
		if err != nil {
			t.Fatal(err)
		}
		opt.Metrics = m
	}
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	svc, err := rls.NewService(src, opt)
	if err != nil {
		t.Fatal(err)
	}
	if srv == nil {
		srv = &rls.Server{}
	}
	if srv.Logger == nil {
		srv.Logger = quiet
	}

	srv.Service = svc
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, nil) }()
	r.conn, err = grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		svc.Close()
	})
	r.client = pb.NewRateLimitServiceClient(r.conn)
	return r
}

// desc builds a descriptor from "key=value" entries.
func desc(entries ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// hits sets a descriptor's own hits_addend.
func hits(d *rlpb.RateLimitDescriptor, n uint64) *rlpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// ask sends one request and fails the test on a gRPC error.
func (r *rig) ask(t *testing.T, domain string, hitsAddend uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := r.client.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hitsAddend})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// render renders a response as its overall code and each status's code and
// remaining tokens, such as "OVER_LIMIT [OVER_LIMIT/0 OK/95]"; a status
// without a limit shows as "-", an unlimited one as "OK/max".
func render(resp *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.OverallCode.String())
	b.WriteString(" [")
	for i, s := range resp.Statuses {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case s.LimitRemaining == 1<<32-1:
			b.WriteString(s.Code.String() + "/max")
		case s.CurrentLimit == nil:
			b.WriteString("-")
		default:
			b.WriteString(s.Code.String() + "/" + itoa(int64(s.LimitRemaining)))
		}
	}
	b.WriteByte(']')
	return b.String()
}

// descs builds one descriptor per "key=value" entry.
func descs(entries ...string) []*rlpb.RateLimitDescriptor {
	out := make([]*rlpb.RateLimitDescriptor, len(entries))
	for i, e := range entries {
		out[i] = desc(e)
	}
	return out
}
