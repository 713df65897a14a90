package promobserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/internal/promtext"
	"github.com/ratebucket/ratebucket/store"
)

// TestPromtextAgrees feeds the same events to this Observer and to
// internal/promtext, the dependency-free writer behind `ratebucket demo
// --serve`'s /metrics, and checks with Prometheus's own parser that the
// hand-written exposition says exactly what client_golang gathers: names,
// types, help, labels, escaping, buckets and values.
func TestPromtextAgrees(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg, promobserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text promtext.Registry
	ctx := context.Background()
	for _, o := range []store.Observer{obs, &text} {
		d := store.Decision{Op: store.OpTake, Store: "redis", Policy: "login", Route: "POST /login", Cost: 1}
		for i, out := range []store.Outcome{store.OutcomeAllowed, store.OutcomeAllowed, store.OutcomeDenied, store.OutcomeShadowDenied, store.OutcomeError} {
			d.Outcome, d.Timed, d.Latency = out, i != 1, time.Duration(i)*700*time.Microsecond
			o.ObserveDecision(ctx, d)
		}
		o.ObserveDecision(ctx, store.Decision{Op: store.OpTake, Outcome: store.OutcomeDenied, Store: "memory", Route: "GET /q\"uote\\d\n", Timed: true, Latency: 3 * time.Microsecond})
		o.ObserveBreaker(store.BreakerChange{Store: "redis", From: store.BreakerClosed, To: store.BreakerOpen})
		o.ObserveBreaker(store.BreakerChange{Store: "redis", From: store.BreakerOpen, To: store.BreakerHalfOpen})
		o.ObserveDenyCacheHit(ctx, store.DenyCacheHit{Store: "redis", Policy: "login", Route: "POST /login"})
		for _, n := range []int{1, 5, 64, 70} {
			o.ObservePipelineBatch(store.PipelineBatch{Store: "redis", Size: n})
		}
	}
	var out strings.Builder
	if _, err := text.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(out.String())); err != nil {
		t.Fatalf("promtext and client_golang disagree: %v\npromtext wrote:\n%s", err, out.String())
	}
}
