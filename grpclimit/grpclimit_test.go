package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// small is a bucket of 3 refilled 2 per second: one token per 500ms.
var small = algo.PerSecond(2).Burst(3)

// TestUnaryBurstThenExactRetry: a caller gets the burst, then
// ResourceExhausted whose RetryInfo is the exact wait, and is admitted
// exactly that much later; every call carries the limit's metadata.
func TestUnaryBurstThenExactRetry(t *testing.T) {
	e := start(t, grpclimit.Config{Policy: small}, options{})
	ctx := t.Context()
	for i := range 3 {
		md, err := e.check(t, ctx, "alice")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantMD(t, md, map[string]string{
			grpclimit.MDLimit:     "3",
			grpclimit.MDRemaining: []string{"2", "1", "0"}[i],
			grpclimit.MDPolicy:    `"default";q=3;w=2`,
		})
	}
	e.clk.Add(200 * time.Millisecond)
	md, err := e.check(t, ctx, "alice")
	if d := retryDelay(t, err); d != 300*time.Millisecond {
		t.Fatalf("RetryInfo delay = %v, want 300ms (a token every 500ms, 200ms elapsed)", d)
	}
	// Full 1.3s from now: 2.6 tokens missing at 2 per second. Reset is
	// Unix seconds rounded up from Start+200ms+1.3s.
	wantMD(t, md, map[string]string{
		grpclimit.MDRemaining: "0",
		grpclimit.MDReset:     itoa(storetest.Start.Unix() + 2),
		grpclimit.MDRateLimit: `"default";r=0;t=2`,
	})
	e.clk.Add(300*time.Millisecond - time.Microsecond)
	if _, err := e.check(t, ctx, "alice"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a microsecond early: err = %v, want ResourceExhausted", err)
	}
	e.clk.Add(time.Microsecond)
	if _, err := e.check(t, ctx, "alice"); err != nil {
		t.Fatalf("exactly RetryAfter later: %v", err)
	}
	// Another identity has its own bucket.
	if _, err := e.check(t, ctx, "bob"); err != nil {
		t.Fatalf("bob: %v", err)
	}
}

// TestStreamChargedOnceAtOpen: an admitted stream takes one token when it
// opens and none per message; a refused one never reaches the handler.
func TestStreamChargedOnceAtOpen(t *testing.T) {
	e := start(t, grpclimit.Config{Policy: algo.PerMinute(1).Burst(2)}, options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 2 {
		st, err := e.health.Watch(as(ctx, "alice"), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		md, err := st.Header()
		if err != nil {
			t.Fatal(err)
		}
		wantMD(t, md, map[string]string{grpclimit.MDRemaining: itoa(int64(1 - i))})
		// More messages on an open stream cost nothing.
		e.hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		e.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.health.Watch(as(ctx, "alice"), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if d := retryDelay(t, err); d != time.Minute {
		t.Fatalf("RetryInfo delay = %v, want 1m", d)
	}
	md, _ := st.Header()
	wantMD(t, md, map[string]string{grpclimit.MDRemaining: "0"})
	if res, err := e.ms.Take(ctx, store.Request{Key: "g:default:id{alice}", Policy: algo.PerMinute(1).Burst(2), Cost: 0}); err != nil || res.Remaining != 0 {
		t.Fatalf("bucket after two streams and many messages: %+v, %v; want 0 left", res, err)
	}
}

// TestMethodRules: a method's rule sets its cost, its own named bucket or
// an exemption; the longest match wins.
func TestMethodRules(t *testing.T) {
	e := start(t, grpclimit.Config{
		Policy: algo.PerMinute(1).Burst(10),
		Key:    grpclimit.Identity,
		Methods: map[string]grpclimit.Rule{
			checkMethod:                   {Cost: 4},
			"/grpc.health.v1.Health/*":    {Name: "health", Policy: algo.PerMinute(1).Burst(1)},
			"/grpc.health.v1.Health/List": {Exempt: true},
		},
	}, options{})
	ctx := t.Context()
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if _, err := e.check(t, ctx, "alice"); status.Code(err) != want {
			t.Fatalf("Check %d: %v, want %v (cost 4 of 10)", i, err, want)
		}
	}
	for range 3 {
		if _, err := e.health.List(as(ctx, "alice"), &healthpb.HealthListRequest{}); err != nil {
			t.Fatalf("exempt List: %v", err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		st, err := e.health.Watch(as(wctx, "alice"), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != want {
			t.Fatalf("Watch %d: %v, want %v (own bucket of 1)", i, err, want)
		}
	}
	if res, err := e.ms.Take(ctx, store.Request{Key: "g:default:id{alice}", Policy: algo.PerMinute(1).Burst(10), Cost: 0}); err != nil || res.Remaining != 2 {
		t.Fatalf("default bucket: %+v, %v; want 2 left (two Checks of 4)", res, err)
	}
}

// TestCancelledAndExpiredCallsChargeNothing: a call whose context ends
// before the limiter decides (a slow interceptor ahead of it) fails with
// Canceled or DeadlineExceeded, and its bucket is untouched.
func TestCancelledAndExpiredCallsChargeNothing(t *testing.T) {
	arrived := make(chan struct{}, 1)
	ended := make(chan error, 1) // the server's outcome of each slow call
	e := start(t, grpclimit.Config{Policy: small}, options{ended: ended, before: func(ctx context.Context) {
		if len(metadata.ValueFromIncomingContext(ctx, "slow")) > 0 {
			arrived <- struct{}{}
			<-ctx.Done() // the call ends while it waits here
		}
	}})
	slow := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(as(ctx, "alice"), "slow", "1")
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := e.health.Check(slow(ctx), &healthpb.HealthCheckRequest{}); done <- err }()
	<-arrived
	cancel()
	wantCode(t, <-done, codes.Canceled)
	wantCode(t, <-ended, codes.Canceled)

	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := e.health.Check(slow(ctx), &healthpb.HealthCheckRequest{})
	<-arrived
	wantCode(t, err, codes.DeadlineExceeded)
	// The server sees its own timer or the client's reset, whichever
	// comes first.
	if c := status.Code(<-ended); c != codes.DeadlineExceeded && c != codes.Canceled {
		t.Fatalf("server side of the expired call: %v, want DeadlineExceeded or Canceled", c)
	}

	sctx, scancel := context.WithCancel(t.Context())
	st, err := e.health.Watch(slow(sctx), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	scancel()
	_, err = st.Recv()
	wantCode(t, err, codes.Canceled)
	wantCode(t, <-ended, codes.Canceled)

	if n := e.ms.Len(); n != 0 {
		t.Fatalf("memstore holds %d buckets after three ended calls, want 0", n)
	}
	md, err := e.check(t, t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	wantMD(t, md, map[string]string{grpclimit.MDRemaining: "2"})
}

// TestStoreFailureFollowsFailMode: a store that cannot decide (here a
// closed memstore) lets calls through under FailOpen, without metadata,
// and refuses them with Unavailable under FailClosed; never
// ResourceExhausted.
func TestStoreFailureFollowsFailMode(t *testing.T) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms.Close()
	e := start(t, grpclimit.Config{
		Store:   ms,
		Methods: map[string]grpclimit.Rule{watchMethod: {Fail: grpclimit.FailClosed}},
	}, options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	md, err := e.check(t, ctx, "alice")
	if err != nil {
		t.Fatalf("FailOpen: %v", err)
	}
	if v := md.Get(grpclimit.MDLimit); len(v) != 0 {
		t.Fatalf("FailOpen call carries %s %v; want no rate-limit metadata", grpclimit.MDLimit, v)
	}
	st, err := e.health.Watch(as(ctx, "alice"), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, err, codes.Unavailable)
}

// TestBadInput: how key and store errors reach the client.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
	t.Run("no identity is InvalidArgument", func(t *testing.T) {
		e := start(t, grpclimit.Config{Key: grpclimit.Identity}, options{})
		_, err := e.check(t, ctx, "")
		wantCode(t, err, codes.InvalidArgument)
	})
	t.Run("no peer address (bufconn) is Internal", func(t *testing.T) {
		e := start(t, grpclimit.Config{}, options{})
		_, err := e.check(t, ctx, "")
		wantCode(t, err, codes.Internal)
	})
	t.Run("a KeyFunc's own status passes through", func(t *testing.T) {
		e := start(t, grpclimit.Config{Key: func(context.Context, string, metadata.MD) (grpclimit.Key, error) {
			return grpclimit.Key{}, status.Error(codes.PermissionDenied, "no tenant")
		}}, options{})
		_, err := e.check(t, ctx, "alice")
		wantCode(t, err, codes.PermissionDenied)
	})
	t.Run("store.ErrKeyTooLong is Internal", func(t *testing.T) {
		ms, err := memstore.New(memstore.Config{MaxKeyLen: 16})
		if err != nil {
			t.Fatal(err)
		}
		e := start(t, grpclimit.Config{Store: ms}, options{})
		_, err = e.check(t, ctx, "a-long-enough-identity")
		wantCode(t, err, codes.Internal)
		if n := ms.Len(); n != 0 {
			t.Fatalf("memstore holds %d buckets, want 0", n)
		}
	})
	t.Run("a long or binary identity is hashed", func(t *testing.T) {
		e := start(t, grpclimit.Config{}, options{})
		long := string(make([]byte, 300)) + "x"
		if _, err := e.lim.Unary()(grpclimit.WithIdentity(ctx, long), nil, &grpc.UnaryServerInfo{FullMethod: checkMethod},
			func(context.Context, any) (any, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if n := e.ms.Len(); n != 1 {
			t.Fatalf("memstore holds %d buckets, want 1", n)
		}
	})
}

// TestNewRefusesBadConfig: configurations that cannot work are errors
// when the limiter is built, not on the first call.
func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]grpclimit.Config{
		"cost above capacity":        {Policy: small, Cost: 4},
		"rule cost above capacity":   {Methods: map[string]grpclimit.Rule{checkMethod: {Cost: 101}}},
		"own policy without a name":  {Methods: map[string]grpclimit.Rule{checkMethod: {Policy: small}}},
		"one name, two policies":     {Methods: map[string]grpclimit.Rule{checkMethod: {Name: "x", Policy: small}, watchMethod: {Name: "x", Policy: algo.PerSecond(1).Burst(1)}}},
		"bad method pattern":         {Methods: map[string]grpclimit.Rule{"grpc.health.v1.Health/Check": {}}},
		"bad rule name":              {Methods: map[string]grpclimit.Rule{checkMethod: {Name: "a b", Policy: small}}},
		"unknown fail mode":          {Fail: 7},
		"prefix too long for a key":  {Prefix: string(make([]byte, 65))},
		"invalid policy (zero rate)": {Policy: algo.Per(0, time.Second).Burst(1)},
	} {
		if _, err := grpclimit.New(cfg); !errors.Is(err, grpclimit.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestPeerGroupsIPv6By64: Peer keys IPv4 by address and IPv6 by /64,
// unmapping IPv4-in-IPv6.
func TestPeerGroupsIPv6By64(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:443":                "192.0.2.7",
		"[::ffff:192.0.2.7]:443":       "192.0.2.7",
		"[2001:db8:1:2:aa:bb:cc:dd]:1": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1":             "fe80::/64",
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))})
		k, err := grpclimit.Peer(ctx, checkMethod, nil)
		if err != nil || k.Class != "ip" || k.ID != want {
			t.Errorf("Peer(%s) = %+v, %v; want ip %s", addr, k, err, want)
		}
	}
	if _, err := grpclimit.Peer(context.Background(), checkMethod, nil); !errors.Is(err, grpclimit.ErrNoPeer) {
		t.Errorf("no peer: err = %v, want ErrNoPeer", err)
	}
}

func wantMD(t *testing.T, md metadata.MD, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := md.Get(k); len(got) != 1 || got[0] != v {
			t.Errorf("metadata %s = %q, want %q", k, got, v)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
