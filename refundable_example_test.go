package ratebucket_test

import (
	"context"
	"fmt"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// A limiter whose takes may be given back later, perhaps by another
// instance, is Refundable: a store that answers from what it learnt
// (hybrid.DenyCache) then never answers them from a bound that a refund it
// cannot see would make stale. httplimit marks the takes of its ChargeIf
// routes itself.
func ExampleConfig_refundable() {
	s, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerHour(5).Burst(5), ratebucket.Config{Prefix: "login:", Refundable: true})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, _ := lim.Take(ctx, "alice", 1)
	if loginSucceeded := true; loginSucceeded { // only failures count
		res, _ = lim.Refund(ctx, "alice", 1)
	}
	fmt.Println(res.Remaining)
	// Output: 5
}
