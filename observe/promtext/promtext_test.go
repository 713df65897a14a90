package promtext

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/observe"
)

// feed sends one event of every kind, and label values that need
// escaping.
func feed(o observe.Observer) {
	ctx := context.Background()
	d := observe.Decision{Op: observe.OpTake, Store: "redis", Policy: "login", Route: "POST /login", Cost: 1}
	for _, e := range []struct {
		out     observe.Outcome
		latency time.Duration
	}{{observe.OutcomeAllowed, 3 * time.Microsecond}, {observe.OutcomeAllowed, 0}, {observe.OutcomeDenied, 700 * time.Microsecond},
		{observe.OutcomeShadowDenied, 0}, {observe.OutcomeError, 3 * time.Second}} {
		d.Outcome, d.Latency, d.Timed = e.out, e.latency, e.latency > 0
		o.ObserveDecision(ctx, d)
	}
	o.ObserveDecision(ctx, observe.Decision{Op: observe.OpTake, Outcome: observe.OutcomeAllowed, Store: "memory", Route: "GET /q\"uote\\d\n"})
	o.ObserveBreaker(observe.BreakerChange{Store: "redis", From: observe.BreakerClosed, To: observe.BreakerOpen, Err: errors.New("down")})
	o.ObserveDenyCacheHit(ctx, observe.DenyCacheHit{Store: "redis", Policy: "login", Route: "POST /login"})
	o.ObservePipelineBatch(observe.PipelineBatch{Store: "redis", Size: 1})
	o.ObservePipelineBatch(observe.PipelineBatch{Store: "redis", Size: 70})
	o.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Taken: 25, Local: 3})
	o.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Returned: 7, Local: 18})
	o.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Lost: 2})
}

// TestWriteTo checks the exposition of a few families line by line; the
// whole of it is checked against client_golang in contrib/prometheus.
func TestWriteTo(t *testing.T) {
	var r Registry
	var empty strings.Builder
	if n, err := r.WriteTo(&empty); n != 0 || err != nil {
		t.Fatalf("empty registry wrote %d bytes (%v)", n, err)
	}
	feed(&r)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if ct := w.Header().Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q", ct)
	}
	out := w.Body.String()
	for _, line := range []string{
		"# TYPE ratebucket_decisions_total counter",
		`ratebucket_decisions_total{policy="login",result="allowed",route="POST /login",store="redis"} 2`,
		`ratebucket_decisions_total{policy="login",result="shadow_denied",route="POST /login",store="redis"} 1`,
		`ratebucket_decisions_total{policy="",result="allowed",route="GET /q\"uote\\d\n",store="memory"} 1`,
		`ratebucket_breaker_state{state="open",store="redis"} 1`,
		`ratebucket_breaker_state{state="closed",store="redis"} 0`,
		`ratebucket_breaker_transitions_total{from="closed",store="redis",to="open"} 1`,
		`ratebucket_denycache_hits_total{policy="login",route="POST /login",store="redis"} 1`,
		"# TYPE ratebucket_lease_batches_total counter",
		`ratebucket_lease_batches_total{store="leases"} 1`,
		`ratebucket_lease_local_admissions_total{store="leases"} 21`,
		`ratebucket_lease_tokens_lost_total{store="leases"} 2`,
		`ratebucket_lease_tokens_returned_total{store="leases"} 7`,
		`ratebucket_pipeline_batch_size_bucket{store="redis",le="64"} 1`,
		`ratebucket_pipeline_batch_size_bucket{store="redis",le="128"} 2`,
		`ratebucket_pipeline_batch_size_sum{store="redis"} 71`,
		`ratebucket_store_latency_seconds_bucket{store="redis",le="2.5e-06"} 0`,
		`ratebucket_store_latency_seconds_bucket{store="redis",le="5e-06"} 1`,
		`ratebucket_store_latency_seconds_bucket{store="redis",le="+Inf"} 3`,
		`ratebucket_store_latency_seconds_count{store="redis"} 3`,
		`ratebucket_store_latency_seconds_count{store="memory"} 0`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no line %s in\n%s", line, out)
		}
	}
	if n, _ := r.WriteTo(&strings.Builder{}); n != int64(len(out)) {
		t.Errorf("WriteTo reports %d bytes, wrote %d", n, len(out))
	}
}
