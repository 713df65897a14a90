package algo_test

import (
	"fmt"
	"math"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// A bucket of 3 refilled at 2 per second: a burst of 3, then a denial that
// says exactly how long to wait, then admission at that instant.
func Example() {
	p := algo.PerSecond(2).Burst(3)
	var (
		tb  algo.TokenBucket
		s   algo.State // the zero State: a key with no history, a full bucket
		res algo.Result
		err error
	)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := 1; i <= 4; i++ {
		if s, res, err = tb.Take(p, s, now, 1); err != nil {
			panic(err)
		}
		fmt.Printf("take %d: allowed=%v remaining=%d retry after %v\n", i, res.Allowed, res.Remaining, res.RetryAfter)
	}
	wait := res.RetryAfter
	now += wait.Microseconds()
	s, res, _ = tb.Take(p, s, now, 1)
	fmt.Printf("at +%v: allowed=%v, full again after %v\n", wait, res.Allowed, res.ResetAfter)
	// Output:
	// take 1: allowed=true remaining=2 retry after 0s
	// take 2: allowed=true remaining=1 retry after 0s
	// take 3: allowed=true remaining=0 retry after 0s
	// take 4: allowed=false remaining=0 retry after 500ms
	// at +500ms: allowed=true, full again after 1.5s
}

// PerMinute(200) refills a token every 300ms; with a burst of 10 an empty
// bucket is full again 3s later. Invalid policies are errors, not limiters
// jammed open.
func ExamplePerMinute() {
	p, err := algo.NewPolicy(10, algo.PerMinute(200))
	if err != nil {
		panic(err)
	}
	fmt.Println(p, "fills in", p.FillTime())

	s, res, _ := algo.TokenBucket{}.Take(p, algo.State{}, 0, 10)
	fmt.Println("burst of 10:", res.Allowed)
	_, res, _ = algo.TokenBucket{}.Take(p, s, 0, 2)
	fmt.Println("2 more: allowed", res.Allowed, "retry after", res.RetryAfter)

	_, err = algo.NewPolicy(10, algo.PerMinute(0))
	fmt.Println(err)
	// Output:
	// burst 10, 200/1m0s fills in 3s
	// burst of 10: true
	// 2 more: allowed false retry after 600ms
	// algo: invalid policy: rate 0/1m0s: tokens must be at least 1
}

// The boundary spike: a client fires everything it may 1ms before a window
// boundary and again at the boundary. The fixed window admits twice its
// limit in that millisecond; the sliding window and the token bucket admit
// the limit once.
func ExampleFixedWindow() {
	p := algo.PerMinute(100).Burst(100) // windows of 1 minute
	boundary := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC).UnixMicro()
	for _, a := range []algo.Algorithm{algo.FixedWindow{}, algo.SlidingWindow{}, algo.TokenBucket{}} {
		var s algo.State
		admitted := int64(0)
		for _, at := range []int64{boundary - 1000, boundary} {
			for { // requests of 1 until one is denied
				next, res, _ := a.Take(p, s, at, 1)
				s = next
				if !res.Allowed {
					break
				}
				admitted++
			}
		}
		fmt.Printf("%-13s admitted %d in 1ms\n", a.Name(), admitted)
	}
	// Output:
	// fixedwindow   admitted 200 in 1ms
	// slidingwindow admitted 100 in 1ms
	// tokenbucket   admitted 100 in 1ms
}

// The sliding window weighs the previous window by how much of it still
// overlaps the last W: 30s into a minute, half of the previous window's 100
// still counts.
func ExampleSlidingWindow() {
	p := algo.PerMinute(100).Burst(100)
	start := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC).UnixMicro()
	s, _, _ := algo.SlidingWindow{}.Take(p, algo.State{}, start-1, 100) // the previous window, full
	_, res, _ := algo.SlidingWindow{}.Take(p, s, start+30_000_000, 0)
	fmt.Println("remaining 30s into the next window:", res.Remaining)
	// Output:
	// remaining 30s into the next window: 50
}

// Rates read as they are said, fractions included, and stay exact: half a
// token a second is one every 2 s (reported per minute, the first period
// that holds whole tokens). A rate no ratio of whole numbers gives is
// refused, never rounded.
func ExamplePerSecond_fraction() {
	p := algo.PerSecond(0.5).Burst(3)
	fmt.Println(p, "| same as Every(2s):", p == algo.Every(2*time.Second).Burst(3))
	fmt.Println(algo.PerSecond(math.Pi).Burst(3).Validate())
	// Output:
	// burst 3, 30/1m0s | same as Every(2s): true
	// algo: invalid policy: rate 3.141592653589793/1s is not a whole number of tokens per whole microseconds: write it as algo.Per(tokens, period)
}
