package ratebucket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// The front door: a burst of 3, then 1 per second, for each key.
func Example() {
	ctx := context.Background()
	ms, _ := memstore.New(memstore.Config{})
	lim, _ := ratebucket.NewLimiter(ms, algo.PerSecond(1).Burst(3), ratebucket.Config{})
	res, err := lim.Allow(ctx, "alice")
	if err == nil && !res.Allowed {
		// refuse, and tell the client to come back after res.RetryAfter
	}
	fmt.Println(res.Allowed, res.Remaining, err)
	// Output: true 2 <nil>
}

// A Limiter over the in-process store: a burst of 3, then 1 per second.
// The mock clock makes the output deterministic; real code passes nothing
// and gets the real clock.
func ExampleLimiter() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(1).Burst(3), ratebucket.Config{Prefix: "api:", Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		res, _ := lim.Allow(ctx, "alice")
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	clk.Add(1500 * time.Millisecond)
	res, _ := lim.Allow(ctx, "alice")
	fmt.Printf("1.5s later: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	res, _ = lim.Allow(ctx, "bob")
	fmt.Printf("bob has his own bucket: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=1s
	// 1.5s later: allowed=true remaining=0
	// bob has his own bucket: allowed=true remaining=2
}

// Wait blocks until the request is admitted. Here the bucket has a token,
// so it returns at once; with a deadline too close, it would return
// ratebucket.ErrWouldExceedDeadline at once instead of sleeping in vain.
func ExampleLimiter_Wait() {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerMinute(10).Burst(1), ratebucket.Config{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := lim.Wait(ctx, "job", 1)
	fmt.Println(res.Allowed, err)
	res, err = lim.Wait(ctx, "job", 1) // the next token is 6s away
	fmt.Println(res.Allowed, errors.Is(err, ratebucket.ErrWouldExceedDeadline), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true <nil>
	// false true true
}
