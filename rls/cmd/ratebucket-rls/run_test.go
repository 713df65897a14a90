package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratebucket/ratebucket/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunServesUntilCancelled runs the command as main does, on a real
// redis-server given by -redis, answers a request, and returns nil once
// its context (SIGTERM in main) ends.
func TestRunServesUntilCancelled(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", dir, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-redis", srv.Addr,
			"-redis-prefix", redistest.Prefix(t), "-response-headers"}, func(string) string { return "" }, nil,
			func(g, _ string) { addrs <- g })
	}()
	conn, err := grpc.NewClient(<-addrs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}}
	for _, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), req)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("got %v, %v; want %v", resp, err, want)
		}
		if len(resp.ResponseHeadersToAdd) < 3 {
			t.Fatalf("-response-headers: no headers in %v", resp)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunRefusesBadFlags: a bad configuration is reported with its file
// and line before anything listens.
func TestRunRefusesBadFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-config is required"},
		{[]string{"-config", bad}, bad + ":4: d.a: rate_limit: unknown unit \"sec\""},
		{[]string{"-config", bad, "-hash-tag", "slot"}, `-hash-tag "slot"`},
	} {
		err := run(t.Context(), c.args, func(string) string { return "" }, nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want %s", c.args, err, c.want)
		}
	}
}
