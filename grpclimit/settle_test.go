package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
)

// TestSettleFromTrailer: a rule with Settle holds its Cost as the
// estimate and charges the cost the handler's trailer reports: the
// difference back, or the extra into debt that the next call waits out,
// its RetryInfo exact; a call without the trailer keeps its estimate.
func TestSettleFromTrailer(t *testing.T) {
	used := map[string]string{} // by identity: the cost the handler reports
	e := start(t, grpclimit.Config{Policy: algo.PerSecond(100).Burst(1000), Cost: 100,
		Methods: map[string]grpclimit.Rule{checkMethod: {Settle: "x-llm-tokens"}}}, options{after: func(ctx context.Context) {
		id, _ := grpclimit.IdentityFrom(ctx)
		if u := used[id]; u != "" {
			grpc.SetTrailer(ctx, metadata.Pairs("x-llm-tokens", u))
		}
	}})
	ctx := t.Context()
	remaining := func(md metadata.MD) string { return md.Get(grpclimit.MDRemaining)[0] }
	used["alice"] = "30"
	if _, err := e.check(t, ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	used["alice"] = ""
	md, err := e.check(t, ctx, "alice") // holds 100 of the 970 left; keeps it
	if err != nil || remaining(md) != "870" {
		t.Fatalf("second call: %v, remaining %v, want 870 after its hold (30 settled before)", err, md)
	}
	used["alice"] = "1000"
	if md, err = e.check(t, ctx, "alice"); err != nil || remaining(md) != "770" {
		t.Fatalf("third call: %v, remaining %v, want 770 after its hold", err, md)
	}
	// 770 left less 900 extra: 130 in debt. The next estimate of 100
	// waits for 230 tokens at 100 a second.
	if _, err = e.check(t, ctx, "alice"); retryDelay(t, err) != 2300*time.Millisecond {
		t.Fatalf("in debt: %v, want RetryInfo 2.3s", err)
	}
}
