package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// testQuotaUnsupported checks that the operations a calendar quota does
// not have (a partial grant, a reservation, its cancel) fail on every
// backend alike: with algo.ErrQuotaUnsupported, whose text the error
// carries, charging nothing.
func testQuotaUnsupported(t *testing.T, e *env) {
	ctx := context.Background()
	q := algo.Quota(10, algo.Day, 0)
	key := e.key()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, algo.ErrQuotaUnsupported) || !strings.HasSuffix(err.Error(), algo.ErrQuotaUnsupported.Error()) {
			t.Errorf("%s on a calendar quota: %v; want algo.ErrQuotaUnsupported (%q)", op, err, algo.ErrQuotaUnsupported)
		}
	}
	_, _, err := e.s.TakeAtMost(ctx, store.Request{Key: key, Policy: q, Cost: 1})
	check("TakeAtMost", err)
	_, err = e.s.Reserve(ctx, store.Request{Key: key, Policy: q, Cost: 1}, time.Second)
	check("Reserve", err)
	_, _, err = e.s.CancelReservation(ctx, key, q, algo.Ticket{At: e.clk.Now().UnixMicro() + 1, Units: 1})
	check("CancelReservation", err)
	if got := e.take(t, key, q, 10); !got.Allowed || got.Remaining != 0 {
		t.Errorf("after the refused calls, a take of the whole quota = %+v; want admitted with 0 left (nothing charged)", got)
	}
}
