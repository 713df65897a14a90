package grpclimit_test

import (
	"context"
	"sync"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// decisions records the decisions an observed store reports.
type decisions struct {
	store.ObserverFuncs
	mu sync.Mutex
	ds []store.Decision
}

func (r *decisions) ObserveDecision(_ context.Context, d store.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

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
	rec := &decisions{}
	e := start(t, grpclimit.Config{
		Store:  store.Observe(ms, "memory", rec),
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
		out           store.Outcome
	}
	wants := []want{
		{checkMethod, "default", store.OutcomeAllowed},
		{checkMethod, "default", store.OutcomeDenied},
		{"/grpc.health.v1.Health/Watch", "watch", store.OutcomeAllowed},
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.ds) != len(wants) {
		t.Fatalf("%d decisions %+v, want %d", len(rec.ds), rec.ds, len(wants))
	}
	for i, w := range wants {
		if d := rec.ds[i]; d.Route != w.route || d.Policy != w.policy || d.Outcome != w.out || d.Store != "memory" {
			t.Errorf("decision %d: route %q policy %q %v store %q, want %q %q %v memory", i, d.Route, d.Policy, d.Outcome, d.Store, w.route, w.policy, w.out)
		}
	}
}
