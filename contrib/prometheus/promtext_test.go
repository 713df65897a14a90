package promobserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/promtext"
)

// TestPromtextAgrees feeds the same events to this Observer and to
// observe/promtext, the dependency-free writer behind `ratebucket demo
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
	for _, o := range []observe.Observer{obs, &text} {
		d := observe.Decision{Op: observe.OpTake, Store: "redis", Policy: "login", Route: "POST /login", Cost: 1}
		for i, out := range []observe.Outcome{observe.OutcomeAllowed, observe.OutcomeAllowed, observe.OutcomeDenied, observe.OutcomeShadowDenied, observe.OutcomeError} {
			d.Outcome, d.Timed, d.Latency = out, i != 1, time.Duration(i)*700*time.Microsecond
			o.ObserveDecision(ctx, d)
		}
		o.ObserveDecision(ctx, observe.Decision{Op: observe.OpTake, Outcome: observe.OutcomeDenied, Store: "memory", Route: "GET /q\"uote\\d\n", Timed: true, Latency: 3 * time.Microsecond})
		o.ObserveBreaker(observe.BreakerChange{Store: "redis", From: observe.BreakerClosed, To: observe.BreakerOpen})
		o.ObserveBreaker(observe.BreakerChange{Store: "redis", From: observe.BreakerOpen, To: observe.BreakerHalfOpen})
		o.ObserveDenyCacheHit(ctx, observe.DenyCacheHit{Store: "redis", Policy: "login", Route: "POST /login"})
		for _, n := range []int{1, 5, 64, 70} {
			o.ObservePipelineBatch(observe.PipelineBatch{Store: "redis", Size: n})
		}
		o.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Taken: 25, Local: 2})
		o.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Returned: 9, Local: 14})
		o.ObserveLeaseBatch(observe.LeaseBatch{Store: "other \"leases\"", Lost: 3})
	}
	var out strings.Builder
	if _, err := text.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(out.String())); err != nil {
		t.Fatalf("promtext and client_golang disagree: %v\npromtext wrote:\n%s", err, out.String())
	}
}
