package grpclimit_test

import (
	"context"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestObserverLabels checks, through a real gRPC server and client, that
// the interceptors report through the observer contract: each decision of
// an observed store carries the full method as its route and the rule's
// name as its policy, unary and stream alike, and a denial is a denial.
func TestObserverLabels(t *testing.T) {
	ms, err := memstore.New(memstore.Config{Clock: storetest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	rec := &observetest.Recorder{}
	e := start(t, grpclimit.Config{
		Store:  observe.Wrap(ms, "memory", rec),
		Policy: algo.PerMinute(1).Burst(1),
		Key:    grpclimit.Identity,
		Methods: map[string]grpclimit.Rule{
			"/grpc.health.v1.Health/Watch": {Name: "watch", Policy: algo.PerMinute(1).Burst(5)},
		},
	}, options{})
	ctx := t.Context()
	e.check(t, ctx, "alice")
	e.check(t, ctx, "alice")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := e.health.Watch(as(wctx, "alice"), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		route, policy string
		out           observe.Outcome
	}
	wants := []want{
		{checkMethod, "default", observe.OutcomeAllowed},
		{checkMethod, "default", observe.OutcomeDenied},
		{"/grpc.health.v1.Health/Watch", "watch", observe.OutcomeAllowed},
	}
	ds := rec.Take()
	if len(ds) != len(wants) {
		t.Fatalf("%d decisions %+v, want %d", len(ds), ds, len(wants))
	}
	for i, w := range wants {
		if d := ds[i]; d.Route != w.route || d.Policy != w.policy || d.Outcome != w.out || d.Store != "memory" {
			t.Errorf("decision %d: route %q policy %q %v store %q, want %q %q %v memory", i, d.Route, d.Policy, d.Outcome, d.Store, w.route, w.policy, w.out)
		}
	}
}
