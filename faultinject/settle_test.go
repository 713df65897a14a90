package faultinject

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store"
)

// TestSettleLostReply: a settle whose reply the network delays past the
// timeout (the script ran: the hold is closed in Redis, the extra charged)
// cannot be answered by the local share, which holds nothing of Redis's
// hold: it fails with hybrid.ErrOpen, charging nothing locally. Once Redis
// answers again, settling the same hold is algo.ErrHoldSettled, never a
// second charge, and the bucket shows the one settle's debt.
func TestSettleLostReply(t *testing.T) {
	e := newEnvCache(t, hybrid.LocalFallback, true)
	e.warm(t)
	ctx := context.Background()
	p := algo.PerHour(60).Burst(100) // a token a minute
	h, res, err := e.f.Hold(ctx, store.Request{Key: "llm", Policy: p, Cost: 10}, time.Hour)
	if err != nil || !res.Allowed {
		t.Fatalf("Hold = %+v %+v, %v", h, res, err)
	}
	e.toxic(t, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":2000}}`)
	if _, err := e.f.Settle(ctx, "llm", p, h, 150); !errors.Is(err, hybrid.ErrOpen) {
		t.Fatalf("settle with its reply lost: %v, want hybrid.ErrOpen", err)
	}
	healToxics(t, e)
	n := recoverCalls(t, e)
	if _, err := e.f.Settle(ctx, "llm", p, h, 150); !errors.Is(err, algo.ErrHoldSettled) {
		t.Fatalf("the same settle once Redis answers: %v, want algo.ErrHoldSettled (the lost reply's settle ran)", err)
	}
	if res, err := e.f.Take(ctx, store.Request{Key: "llm", Policy: p, Cost: 1}); err != nil || res.Allowed || res.RetryAfter < 50*time.Minute {
		t.Fatalf("after the settle of 150 on a bucket of 100: %+v, %v; want denied for about 51 minutes of debt", res, err)
	}
	t.Logf("settle with a lost reply: recovered in %d calls", n)
}
