package ratebucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// Reserve admits a request that must wait a short, exact delay instead of
// refusing it; a request that will not proceed cancels its reservation.
func ExampleLimiter_Reserve() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(2).Burst(2), ratebucket.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		r, _ := lim.Reserve(ctx, "uploads", 1, time.Second)
		fmt.Printf("allowed=%v delay=%v\n", r.Allowed, r.Delay)
		if r.Delay > 0 {
			ok, _, _ := r.Cancel(ctx) // the client went away
			fmt.Println("cancelled, tokens back:", ok)
		}
	}
	r, _ := lim.Reserve(ctx, "uploads", 2, 500*time.Millisecond)
	fmt.Printf("2 more within 500ms: allowed=%v retry after %v\n", r.Allowed, r.RetryAfter)
	// Output:
	// allowed=true delay=0s
	// allowed=true delay=0s
	// allowed=true delay=500ms
	// cancelled, tokens back: true
	// 2 more within 500ms: allowed=false retry after 500ms
}

// Refund gives a failed request's tokens back; TakeAtMost grants a batch
// what the bucket holds.
func ExampleLimiter_Refund() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerMinute(10).Burst(10), ratebucket.Config{Prefix: "login:", Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, _ := lim.Allow(ctx, "alice")
	fmt.Println("attempt: remaining", res.Remaining)
	res, _ = lim.Refund(ctx, "alice", 1) // the login succeeded: only failures count
	fmt.Println("refunded: remaining", res.Remaining)
	n, _, _ := lim.TakeAtMost(ctx, "alice", 25)
	fmt.Println("batch of 25: granted", n)
	// Output:
	// attempt: remaining 9
	// refunded: remaining 10
	// batch of 25: granted 10
}

// TakeAtMost grants a batch what the bucket holds instead of refusing it
// whole; when nothing is left, the denial says when one token will be.
func ExampleLimiter_TakeAtMost() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(10).Burst(100), ratebucket.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, batch := range []int64{60, 60, 60} {
		n, res, _ := lim.TakeAtMost(ctx, "import-job", batch)
		fmt.Printf("asked %d, granted %d, retry after %v\n", batch, n, res.RetryAfter)
	}
	// Output:
	// asked 60, granted 60, retry after 0s
	// asked 60, granted 40, retry after 0s
	// asked 60, granted 0, retry after 100ms
}

// Wait holds a reserved request until its time; a caller that gives up
// first has its reservation cancelled, and the tokens come back.
func ExampleReservation_Wait() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(1).Burst(1), ratebucket.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lim.Take(ctx, "k", 1) // empties the bucket
	r, _ := lim.Reserve(ctx, "k", 1, 5*time.Second)
	fmt.Println("admitted:", r.Allowed, "delay:", r.Delay)

	gone, leave := context.WithCancel(ctx)
	done := make(chan error)
	go func() { _, err := r.Wait(gone); done <- err }()
	leave() // the client hangs up before its second
	fmt.Println("wait:", <-done)
	again, _ := lim.Reserve(ctx, "k", 1, 5*time.Second)
	fmt.Println("the next one waits", again.Delay, "again: the token came back")
	// Output:
	// admitted: true delay: 1s
	// wait: context canceled
	// the next one waits 1s again: the token came back
}
