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

// Bursts of 100 at 2/s AND 3 a month (10,000 in life), in one multi-limit
// take: while the quota has room both are charged; once it is spent,
// neither is, and the wait is exactly until the 1st at 00:00 UTC. A
// refused multi-take reports each limit as it would answer alone (the
// bucket would have admitted, so its Result counts the charge):
// Uncharged gives what it holds.
func Example_quota() {
	clk := clock.NewMock()
	clk.Set(time.Date(2028, 2, 29, 23, 59, 58, 0, time.UTC)) // a leap day
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	reqs := []store.Request{
		{Key: store.GroupKey("user:42", "burst"), Policy: algo.PerSecond(2).Burst(100), Cost: 1},
		{Key: store.GroupKey("user:42", "month"), Policy: algo.Quota(3, algo.Month, 0), Cost: 1},
	}
	for range 4 {
		res, _ := s.TakeMulti(ctx, reqs)
		burst := res.Results[0]
		if !res.Allowed {
			burst = algo.TokenBucket{}.Uncharged(reqs[0].Policy, burst, 1)
		}
		fmt.Printf("allowed=%v burst left %d, month left %d, retry after %v\n",
			res.Allowed, burst.Remaining, res.Results[1].Remaining, res.RetryAfter)
	}
	clk.Add(2 * time.Second) // March 1st, 00:00:00
	res, _ := s.TakeMulti(ctx, reqs)
	fmt.Printf("on March 1st: allowed=%v burst left %d, month left %d\n", res.Allowed, res.Results[0].Remaining, res.Results[1].Remaining)
	// Output:
	// allowed=true burst left 99, month left 2, retry after 0s
	// allowed=true burst left 98, month left 1, retry after 0s
	// allowed=true burst left 97, month left 0, retry after 0s
	// allowed=false burst left 97, month left 0, retry after 2s
	// on March 1st: allowed=true burst left 99, month left 2
}
