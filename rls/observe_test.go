package rls_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestObserverLabels checks, through a real gRPC server and client, that
// the server reports through the observer contract: each decision of an
// observed store carries the domain as its route and the limit's name as
// its policy, and a shadow limit's refusal is shadow_denied, not denied.
func TestObserverLabels(t *testing.T) {
	cfg, err := rls.Parse("shop.yaml", []byte(`domain: shop
descriptors:
  - key: client
    rate_limit:
      name: per-client
      unit: minute
      requests_per_unit: 2
  - key: path
    shadow_mode: true
    rate_limit:
      name: per-path
      unit: minute
      requests_per_unit: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Config{Clock: storetest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	rec := &observetest.Recorder{}
	r := serve(t, cfg, rls.Options{Store: observe.Wrap(ms, "memory", rec)}, nil)
	for range 3 {
		r.ask(t, "shop", 0, desc("client=a"), desc("path=/cart"))
	}
	type want struct {
		policy string
		out    observe.Outcome
		cost   int64
	}
	wants := []want{
		{"per-client", observe.OutcomeAllowed, 1}, {"per-path", observe.OutcomeAllowed, 1},
		{"per-client", observe.OutcomeAllowed, 1}, {"per-path", observe.OutcomeShadowDenied, 1},
		// Refused by its enforced limit, the request only peeks at the
		// shadow one (cost 0).
		{"per-client", observe.OutcomeDenied, 1}, {"per-path", observe.OutcomeAllowed, 0},
	}
	ds := rec.Take()
	if len(ds) != len(wants) {
		t.Fatalf("%d decisions %+v, want %d", len(ds), ds, len(wants))
	}
	for i, w := range wants {
		if d := ds[i]; d.Route != "shop" || d.Policy != w.policy || d.Outcome != w.out || d.Cost != w.cost {
			t.Errorf("decision %d: route %q policy %q %v cost %d, want shop %q %v %d", i, d.Route, d.Policy, d.Outcome, d.Cost, w.policy, w.out, w.cost)
		}
	}
}
