package httplimit

import (
	"net/http"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/limitheader"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestHeaderFixture runs every case of the cross-module fixture
// (internal/testdata/ratelimit-headers.json) through the middleware, on
// its Clock, over a store giving the case's answer, and checks each
// header is exactly the fixture's: the same cases pin grpclimit's
// metadata, rls's headers and the Node package.
func TestHeaderFixture(t *testing.T) {
	cases, err := limitheader.ReadCases("../internal/testdata/ratelimit-headers.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			clk := storetest.NewClock()
			clk.Set(c.Now())
			h := newMW(t, Config{
				Store:  c.Store(),
				Clock:  clk,
				Limits: []Limit{{Name: c.Name, Policy: algo.PerSecond(1).Burst(c.Capacity)}},
			}).Handler(ok)
			w := do(h, "192.0.2.1:1")
			if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[c.Allowed]; w.Code != want {
				t.Errorf("status %d, want %d", w.Code, want)
			}
			for _, m := range c.Mismatches(w.Header().Values) {
				t.Error(m)
			}
		})
	}
}
