package grpclimit_test

import (
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
)

// TestQuotaPolicyWindowIsThePeriod: a calendar quota's ratelimit-policy
// w is the seconds of the period that holds the call, as httplimit's
// RateLimit-Policy says it (31 days in January, 28 in February 2026),
// not the w=1 of a fill time a quota does not have.
func TestQuotaPolicyWindowIsThePeriod(t *testing.T) {
	e := start(t, grpclimit.Config{Policy: algo.Quota(3, algo.Month, 0)}, options{})
	e.clk.Set(time.Date(2026, time.January, 31, 23, 0, 0, 0, time.UTC))
	md, err := e.check(t, t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	wantMD(t, md, map[string]string{grpclimit.MDPolicy: `"default";q=3;w=2678400`, grpclimit.MDRemaining: "2"})
	e.clk.Add(2 * time.Hour)
	md, err = e.check(t, t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	wantMD(t, md, map[string]string{grpclimit.MDPolicy: `"default";q=3;w=2419200`, grpclimit.MDRemaining: "2"})
}
