package store_test

import (
	"context"
	"fmt"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// Observe reports every decision of a store to an Observer; the entry point
// names the call with WithLabels. Here the Observer prints; in production
// it is a metrics adapter (contrib/prometheus, contrib/otel), and
// httplimit, grpclimit and the rls server set the labels.
func ExampleObserve() {
	ms, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer ms.Close()
	printer := store.ObserverFuncs{Decision: func(_ context.Context, d store.Decision) {
		fmt.Printf("%s %s policy=%q route=%q store=%s cost=%d\n", d.Op, d.Outcome, d.Policy, d.Route, d.Store, d.Cost)
	}}
	s := store.Observe(ms, "memory", printer)

	p := algo.PerMinute(5).Burst(1)
	ctx := store.WithLabels(context.Background(), store.Labels{Route: "POST /login", Policy: "login"})
	s.Take(ctx, store.Request{Key: "login:alice", Policy: p, Cost: 1})
	s.Take(ctx, store.Request{Key: "login:alice", Policy: p, Cost: 1})
	s.Take(context.Background(), store.Request{Key: "login:bob", Policy: p, Cost: 1}) // no labels
	// Output:
	// take allowed policy="login" route="POST /login" store=memory cost=1
	// take denied policy="login" route="POST /login" store=memory cost=1
	// take allowed policy="" route="" store=memory cost=1
}
