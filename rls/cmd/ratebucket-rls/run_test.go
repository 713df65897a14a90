package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/internal/redistest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestRunServesUntilCancelled runs the command as main does, on a real
// redis-server given by -redis, answers a request, and returns nil once
// its context (SIGTERM in main) ends.
func TestRunServesUntilCancelled(t *testing.T) {
	r := startRun(t, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"-http", "127.0.0.1:0", "-response-headers")
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}}
	for _, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		resp, err := r.client.ShouldRateLimit(t.Context(), req)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("got %v, %v; want %v", resp, err, want)
		}
		if len(resp.ResponseHeadersToAdd) < 3 {
			t.Fatalf("-response-headers: no headers in %v", resp)
		}
	}
	r.stop(t)
}

// TestRunLeases: with -lease-instances, a lease: true descriptor on a
// real redis-server answers every request, and the command returns nil
// once cancelled, the Leases closed (goleak: its sweeper is gone).
func TestRunLeases(t *testing.T) {
	r := startRun(t, "domain: hot\ndescriptors:\n  - key: global\n    lease: true\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
		"-http", "", "-lease-instances", "2", "-lease-lifetime", "50ms")
	req := &pb.RateLimitRequest{Domain: "hot", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "global", Value: "all"}}}}}
	for i := range 50 {
		resp, err := r.client.ShouldRateLimit(t.Context(), req)
		if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, %v", i, resp, err)
		}
	}
	r.stop(t)
}

// running is the command run as main runs it, on a real redis-server, with
// a configuration file of yaml and args besides, and a gRPC client of it.
type running struct {
	client pb.RateLimitServiceClient
	cancel func()
	done   chan error
}

func startRun(t *testing.T, yaml string, args ...string) *running {
	t.Helper()
	srv := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	addrs := make(chan string, 1)
	args = append([]string{"-config", dir, "-grpc", "127.0.0.1:0", "-redis", srv.Addr, "-redis-prefix", redistest.Prefix(t)}, args...)
	go func() {
		r.done <- run(ctx, args, func(string) string { return "" }, nil, func(g, _ string) { addrs <- g })
	}()
	conn, err := grpc.NewClient(<-addrs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.client = pb.NewRateLimitServiceClient(conn)
	return r
}

// stop cancels the command's context (SIGTERM in main) and fails t unless
// it returns nil.
func (r *running) stop(t *testing.T) {
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

// TestRunRefusesBadFlags: a bad configuration is reported with its file
// and line before anything listens.
func TestRunRefusesBadFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n"), 0o644)
	hot := filepath.Join(t.TempDir(), "hot.yaml")
	os.WriteFile(hot, []byte("domain: hot\ndescriptors:\n  - key: global\n    lease: true\n    rate_limit: {unit: second, requests_per_unit: 1000}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-config is required"},
		{[]string{"-config", bad}, bad + ":4: d.a: rate_limit: unknown unit \"sec\""},
		{[]string{"-config", bad, "-hash-tag", "slot"}, `-hash-tag "slot"`},
		{[]string{"-config", hot}, `rls: domain "hot" has lease: true descriptors, which need Options.Leases`},
		{[]string{"-config", hot, "-lease-lifetime", "1s"}, "rls: Options.Leases: hybrid: invalid config: Instances 0"},
	} {
		err := run(t.Context(), c.args, func(string) string { return "" }, nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want %s", c.args, err, c.want)
		}
	}
}
