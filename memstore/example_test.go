package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// Take from one key's bucket until it is empty, then wait for a token. The
// mock clock makes the output exact; the zero Config uses the real clock.
func Example() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := algo.PerSecond(2).Burst(3) // 3 at once, then one every 500ms
	for range 4 {
		res, _ := s.Take(ctx, store.Request{Key: "client-42", Policy: p, Cost: 1})
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	clk.Add(500 * time.Millisecond)
	res, _ := s.Take(ctx, store.Request{Key: "client-42", Policy: p, Cost: 1})
	fmt.Printf("after 500ms: allowed=%v\n", res.Allowed)
	fmt.Println("buckets:", s.Len())
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=500ms
	// after 500ms: allowed=true
	// buckets: 1
}

// TakeMulti charges several buckets atomically: a request passes a per-user
// and a global limit, or is charged to neither.
func ExampleStore_TakeMulti() {
	s, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	user, global := algo.PerMinute(10).Burst(2), algo.PerSecond(100).Burst(1000)
	for range 3 {
		res, _ := s.TakeMulti(context.Background(), []store.Request{
			{Key: "user:alice", Policy: user, Cost: 1},
			{Key: "global", Policy: global, Cost: 1},
		})
		fmt.Printf("allowed=%v denied-by=%d retry-after=%v\n", res.Allowed, res.Denied, res.RetryAfter)
	}
	res, _ := s.Take(context.Background(), store.Request{Key: "global", Policy: global, Cost: 0})
	fmt.Println("global remaining:", res.Remaining)
	// Output:
	// allowed=true denied-by=-1 retry-after=0s
	// allowed=true denied-by=-1 retry-after=0s
	// allowed=false denied-by=0 retry-after=6s
	// global remaining: 998
}
