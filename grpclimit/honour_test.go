package grpclimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestConfigsHonoured is issue 28's property for grpclimit: a Config New
// accepts is one its rules can honour. It generates Configs (a default
// policy, cost, KeyFunc, FailMode and Prefix, and up to three rules over
// the health service's methods, by name or by service, each with a name,
// a token bucket or calendar quota, a cost, a KeyFunc and a FailMode, or
// exempt; token leases or none), some of them invalid. A Config New
// refuses must be refused with ErrInvalidConfig. For each one New accepts, real gRPC calls (unary
// Check and List, and Watch streams) go over TCP on 127.0.0.1 through a
// real grpc.Server with the limiter behind an authentication interceptor,
// every call with the identity and tenant a KeyFunc may read, while a
// manual clock moves on, across days and the end of January. Every call
// must then be admitted or refused (ResourceExhausted with a RetryInfo):
// never Internal or InvalidArgument from bad input, never Unavailable,
// and never let through by a FailMode, which the limiter would log and
// which would carry no rate-limit metadata. On memstore and on a real
// redis-server (the manual clock as redisstore's client clock).
func TestConfigsHonoured(t *testing.T) {
	srv := redistest.Start(t)
	backends := []struct {
		name string
		new  func(t *testing.T, clk *storetest.Clock) store.Store
	}{
		{"memstore", func(t *testing.T, clk *storetest.Clock) store.Store {
			ms, err := memstore.New(memstore.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ms.Close() })
			return ms
		}},
		{"redis", func(t *testing.T, clk *storetest.Clock) store.Store {
			rs, err := redisstore.New(srv.Client(), redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			return rs
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clk := storetest.NewClock()
			clk.Set(time.Date(2026, time.January, 31, 22, 0, 0, 0, time.UTC))
			s := b.new(t, clk)
			h := serveSwappable(t)
			var accepted, refused, calls int
			rapid.Check(t, func(rt *rapid.T) {
				cfg := genHonourConfig(rt)
				cfg.Store, cfg.Clock = s, clk
				if cfg.Leases != nil {
					cfg.Leases.Clock = clk
				}
				var logs syncBuffer
				cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				lim, err := grpclimit.New(cfg)
				if err != nil {
					if !errors.Is(err, grpclimit.ErrInvalidConfig) {
						rt.Fatalf("New refused with %v, which is not ErrInvalidConfig", err)
					}
					refused++
					return
				}
				accepted++
				defer lim.Close()
				h.lim.Store(lim)
				for i := range rapid.IntRange(1, 8).Draw(rt, "calls") {
					method := rapid.SampledFrom([]string{checkMethod, listMethod, watchMethod}).Draw(rt, "method")
					who := rapid.SampledFrom(honourIDs).Draw(rt, "who")
					tenant := rapid.SampledFrom([]string{"acme", "globex"}).Draw(rt, "tenant")
					md, err := h.call(method, who, tenant)
					calls++
					switch status.Code(err) {
					case codes.OK:
					case codes.ResourceExhausted:
						if d, ok := retryInfo(err); !ok || d <= 0 {
							rt.Fatalf("call %d (%s as %.12q): refused with RetryInfo %v, %v; want a positive wait", i, method, who, d, ok)
						}
					default:
						rt.Fatalf("call %d (%s as %.12q, tenant %s): %v; want OK or ResourceExhausted", i, method, who, tenant, err)
					}
					if r := ruleOf(cfg, method); !r.Exempt && !cfg.NoMetadata && len(md.Get(grpclimit.MDLimit)) != 1 {
						rt.Fatalf("call %d (%s): %v without rate-limit metadata %v: let through unlimited", i, method, err, md)
					}
					if l := logs.String(); l != "" {
						rt.Fatalf("call %d (%s as %.12q): the limiter logged a failure: %s", i, method, who, l)
					}
					clk.Add(rapid.SampledFrom([]time.Duration{0, 300 * time.Millisecond, 5 * time.Second, time.Hour, 26 * time.Hour}).Draw(rt, "advance"))
				}
			})
			t.Logf("%d configurations accepted, %d refused; %d calls", accepted, refused, calls)
			if accepted == 0 || refused == 0 {
				t.Fatalf("%d accepted, %d refused: the generator must make both", accepted, refused)
			}
		})
	}
}

// The health service's methods the generated rules and calls name, with
// checkMethod and watchMethod.
const (
	listMethod = "/grpc.health.v1.Health/List"
	healthAll  = "/grpc.health.v1.Health/*"
)

// honourIDs are the callers' identities: plain, and ones a bucket key
// holds only as a digest (long, or with bytes a key cannot carry).
var honourIDs = []string{"alice", "bob", strings.Repeat("x", 100), "#tenant {a b}"}

// honourPolicies are the generated policies: the zero Policy (the
// default), token buckets and calendar quotas; badPolicies are invalid.
var (
	honourPolicies = []algo.Policy{
		{}, algo.PerSecond(2).Burst(5), algo.PerMinute(30).Burst(20), algo.PerHour(1).Burst(3),
		algo.Quota(4, algo.Day, 0), algo.Quota(20, algo.Month, 0), algo.Quota(3, algo.Week, -5*time.Hour),
	}
	badPolicies = []algo.Policy{algo.Quota(0, algo.Day, 0), algo.PerSecond(1).Burst(0)}
)

// tenantKey keys a call by its x-tenant metadata, in class "tenant".
func tenantKey(_ context.Context, _ string, md metadata.MD) (grpclimit.Key, error) {
	v := md.Get("x-tenant")
	if len(v) != 1 {
		return grpclimit.Key{}, fmt.Errorf("%w: no x-tenant", grpclimit.ErrNoKey)
	}
	return grpclimit.Key{Class: "tenant", ID: v[0]}, nil
}

// genHonourConfig draws a Config without its Store, Clock and Logger.
// Each field is invalid now and then (rare), so that about half the
// Configs are accepted; a valid cost may still exceed a capacity, and two
// rules may give one name two policies.
func genHonourConfig(t *rapid.T) grpclimit.Config {
	// rapid draws the ends of a range often: a value inside it is rare.
	rare := func(label string) bool { return rapid.IntRange(0, 23).Draw(t, label) == 13 }
	pick := func(label string, valid, invalid []string) string {
		if rare(label + "Bad") {
			return rapid.SampledFrom(invalid).Draw(t, label)
		}
		return rapid.SampledFrom(valid).Draw(t, label)
	}
	policy := func(label string) algo.Policy {
		if rare(label + "badPolicy") {
			return rapid.SampledFrom(badPolicies).Draw(t, label+"policy")
		}
		return rapid.SampledFrom(honourPolicies).Draw(t, label+"policy")
	}
	cost := func(label string) int64 {
		if rare(label + "badCost") {
			return rapid.SampledFrom([]int64{-1, 21}).Draw(t, label+"cost")
		}
		return rapid.SampledFrom([]int64{0, 0, 1, 2, 3}).Draw(t, label+"cost")
	}
	keys := []grpclimit.KeyFunc{nil, grpclimit.Identity, grpclimit.Peer, grpclimit.IdentityOr(grpclimit.Peer), tenantKey}
	key := func(label string) grpclimit.KeyFunc { return keys[rapid.IntRange(0, len(keys)-1).Draw(t, label+"key")] }
	fail := func(label string) grpclimit.FailMode {
		if rare(label + "badFail") {
			return grpclimit.FailClosed + 1
		}
		return rapid.SampledFrom([]grpclimit.FailMode{grpclimit.FailDefault, grpclimit.FailOpen, grpclimit.FailClosed}).Draw(t, label+"fail")
	}
	cfg := grpclimit.Config{
		Policy: policy(""), Cost: cost(""), Key: key(""), Fail: fail(""),
		Prefix:     pick("prefix", []string{"", "t:"}, []string{strings.Repeat("p", 65)}),
		NoMetadata: rapid.IntRange(0, 3).Draw(t, "noMetadata") == 0,
	}
	for i := range rapid.IntRange(0, 3).Draw(t, "rules") {
		label := fmt.Sprintf("rule%d.", i)
		r := grpclimit.Rule{Exempt: rapid.IntRange(0, 4).Draw(t, label+"exempt") == 0}
		if !r.Exempt || rare(label+"exemptWithFields") {
			r.Name = pick(label+"name", []string{"", "", "default", "a", "b"}, []string{"bad name"})
			r.Cost, r.Key, r.Fail = cost(label), key(label), fail(label)
			if rapid.Bool().Draw(t, label+"ownPolicy") {
				r.Policy = policy(label) // without a Name, refused unless the default's
			}
		}
		if cfg.Methods == nil {
			cfg.Methods = map[string]grpclimit.Rule{}
		}
		cfg.Methods[pick(label+"method", []string{checkMethod, listMethod, watchMethod, healthAll}, []string{"grpc.health.v1.Health/Check"})] = r
	}
	if rapid.IntRange(0, 2).Draw(t, "lease") == 0 {
		cfg.Leases = &hybrid.LeasesConfig{
			Instances:  rapid.IntRange(1, 3).Draw(t, "instances"),
			Lifetime:   rapid.SampledFrom([]time.Duration{100 * time.Millisecond, 2 * time.Second, 10 * time.Second}).Draw(t, "lifetime"),
			MinBatch:   rapid.Int64Range(1, 4).Draw(t, "minBatch"),
			SweepEvery: -1,
		}
		if rare("badLease") {
			cfg.Leases.Instances = 0
		}
	}
	return cfg
}

// ruleOf returns the rule cfg gives method: its own, else its
// service's, else the default (the zero Rule).
func ruleOf(cfg grpclimit.Config, method string) grpclimit.Rule {
	if r, ok := cfg.Methods[method]; ok {
		return r
	}
	return cfg.Methods[healthAll]
}

// swappable is a real gRPC server on 127.0.0.1 whose limiter is the one
// in lim at each call, and a client of it.
type swappable struct {
	lim    atomic.Pointer[grpclimit.Limiter]
	health healthpb.HealthClient
}

// serveSwappable serves the health service behind the test
// authentication and the limiter in lim, until the test ends.
func serveSwappable(t *testing.T) *swappable {
	h := &swappable{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(authUnary, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			return h.lim.Load().Unary()(ctx, req, info, next)
		}),
		grpc.ChainStreamInterceptor(authStream, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			return h.lim.Load().Stream()(srv, ss, info, next)
		}),
	)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Shutdown()
		srv.Stop()
		wg.Wait()
	})
	h.health = healthpb.NewHealthClient(conn)
	return h
}

// call makes one call of method as who, with an x-tenant of tenant, and
// returns the response header metadata and the call's error: a Watch
// stream's is its first message's.
func (h *swappable) call(method, who, tenant string) (metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(as(ctx, who), "x-tenant", tenant)
	var md metadata.MD
	var err error
	switch method {
	case checkMethod:
		_, err = h.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	case listMethod:
		_, err = h.health.List(ctx, &healthpb.HealthListRequest{}, grpc.Header(&md))
	default:
		var st grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
		if st, err = h.health.Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			_, err = st.Recv()
			md, _ = st.Header()
		}
	}
	return md, err
}

// syncBuffer is a bytes.Buffer safe for the limiter's logging from the
// server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
