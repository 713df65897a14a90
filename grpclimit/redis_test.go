package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// TestTCPPeerOnRedis runs the whole path for real: a gRPC client over TCP
// on 127.0.0.1, keyed by its peer address, buckets in a real redis-server
// on the server's clock. It checks the bucket with Inspect after a burst,
// a refusal and a call cancelled before the limiter decided.
func TestTCPPeerOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	p := algo.PerHour(1).Burst(5)
	arrived := make(chan struct{}, 1)
	ended := make(chan error, 1)
	e := start(t, grpclimit.Config{Store: rs, Policy: p, Key: grpclimit.Peer}, options{tcp: true, ended: ended,
		before: func(ctx context.Context) {
			if len(metadata.ValueFromIncomingContext(ctx, "slow")) > 0 {
				arrived <- struct{}{}
				<-ctx.Done()
			}
		}})
	ctx := t.Context()
	key := "g:default:ip{127.0.0.1}"
	for i := range 5 {
		md, err := e.check(t, ctx, "")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		wantMD(t, md, map[string]string{grpclimit.MDRemaining: itoa(int64(4 - i))})
	}
	_, err = e.check(t, ctx, "")
	if d := retryDelay(t, err); d <= 59*time.Minute || d > time.Hour {
		t.Fatalf("RetryInfo delay = %v, want just under 1h (server clock)", d)
	}
	b, err := rs.Inspect(ctx, key, p)
	if err != nil || !b.Exists || b.Tokens != 0 {
		t.Fatalf("Inspect after the burst: %+v, %v; want an empty bucket", b, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.health.Check(metadata.AppendToOutgoingContext(rctx, "slow", "1"), &healthpb.HealthCheckRequest{})
		done <- err
	}()
	<-arrived
	cancel()
	wantCode(t, <-done, codes.Canceled)
	wantCode(t, <-ended, codes.Canceled)
	after, err := rs.Inspect(ctx, key, p)
	if err != nil || after.Deficit != b.Deficit || !after.Stamp.Equal(b.Stamp) {
		t.Fatalf("Inspect after a cancelled call: %+v, %v; want the state unchanged from %+v", after, err, b)
	}
}
