package httplimit

import (
	"context"
	"net/http"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/limitheader"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// answerStore answers every Take with one fixed Result: the store's
// answer of a fixture case, whatever the bucket.
type answerStore struct{ res algo.Result }

func (s answerStore) Take(context.Context, string, algo.Policy, int64) (algo.Result, error) {
	return s.res, nil
}

// fixtureHeaders are the fields the fixture pins, in the fixture's
// spelling; the middleware's RateLimit-Policy is not among them.
var fixtureHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "Retry-After"}

// TestHeaderFixture runs every case of the cross-module fixture
// (internal/testdata/ratelimit-headers.json) through the middleware, on
// its Clock, and checks each header is exactly the fixture's: the same
// cases pin grpclimit's metadata, rls's headers and the Node package.
func TestHeaderFixture(t *testing.T) {
	cases, err := limitheader.ReadCases("../internal/testdata/ratelimit-headers.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			clk := storetest.NewClock()
			clk.Set(c.Now())
			res := algo.Result{Allowed: c.Allowed, Remaining: c.Remaining, ResetAfter: c.ResetAfter(), RetryAfter: c.RetryAfter()}
			h := newMW(t, Config{
				Store:  answerStore{res},
				Clock:  clk,
				Limits: []Limit{{Name: c.Name, Policy: algo.PerSecond(1).Burst(c.Capacity)}},
			}).Handler(ok)
			w := do(h, "192.0.2.1:1")
			if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[c.Allowed]; w.Code != want {
				t.Errorf("status %d, want %d", w.Code, want)
			}
			for _, name := range fixtureHeaders {
				want, sent := c.Headers[name]
				got := w.Header().Values(name)
				switch {
				case !sent && len(got) > 0:
					t.Errorf("%s: %q, want none", name, got)
				case sent && (len(got) != 1 || got[0] != want):
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
		})
	}
}
