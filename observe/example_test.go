package observe_test

import (
	"context"
	"fmt"

	"github.com/benbjohnson/clock"
	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// Wrap reports every decision of a store to an Observer; the entry point
// names the call with WithLabels. Here the Observer prints; in production
// it is a metrics adapter (contrib/prometheus, contrib/otel), and
// httplimit, grpclimit and the rls server set the labels.
func ExampleWrap() {
	ms, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer ms.Close()
	printer := observe.Funcs{Decision: func(_ context.Context, d observe.Decision) {
		fmt.Printf("%s %s policy=%q route=%q store=%s cost=%d\n", d.Op, d.Outcome, d.Policy, d.Route, d.Store, d.Cost)
	}}
	s := observe.Wrap(ms, "memory", printer)

	p := algo.PerMinute(5).Burst(1)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "POST /login", Policy: "login"})
	s.Take(ctx, store.Request{Key: "login:alice", Policy: p, Cost: 1})
	s.Take(ctx, store.Request{Key: "login:alice", Policy: p, Cost: 1})
	s.Take(context.Background(), store.Request{Key: "login:bob", Policy: p, Cost: 1}) // no labels
	// Output:
	// take allowed policy="login" route="POST /login" store=memory cost=1
	// take denied policy="login" route="POST /login" store=memory cost=1
	// take allowed policy="" route="" store=memory cost=1
}

// A redisstore observed: its decisions reach obs. This Example is not run
// (it needs a Redis server); it holds the package doc's fragment verbatim,
// so that it compiles.
func ExampleWrap_redis() {
	rs, _ := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), redisstore.Config{})
	var obs observe.Observer = observe.Funcs{}

	s := observe.Wrap(rs, "redis", obs) // obs: any Observer

	fmt.Println(s.Take(context.Background(), store.Request{Key: "alice", Policy: algo.PerSecond(2).Burst(100), Cost: 1}))
}
