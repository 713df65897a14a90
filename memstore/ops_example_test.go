package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// Refund gives a request's tokens back when it should not count: here an
// upload of cost 3 that failed. The bucket is as if the upload had never
// been charged, and a refund never raises it above its capacity.
func ExampleStore_Refund() {
	s, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := algo.PerMinute(10).Burst(10)
	res, _ := s.Take(ctx, store.Request{Key: "uploads:42", Policy: p, Cost: 3})
	fmt.Println("charged, remaining", res.Remaining)
	res, _ = s.Refund(ctx, store.Request{Key: "uploads:42", Policy: p, Cost: 3}) // the upload failed
	fmt.Println("refunded, remaining", res.Remaining)
	res, _ = s.Refund(ctx, store.Request{Key: "uploads:42", Policy: p, Cost: 5}) // nothing was charged: spills
	fmt.Println("refunded again, remaining", res.Remaining)
	// Output:
	// charged, remaining 7
	// refunded, remaining 10
	// refunded again, remaining 10
}

// TakeAtMost grants a batch what the bucket holds, up to n; granting
// nothing is a denial with the exact wait for one token.
func ExampleStore_TakeAtMost() {
	s, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := algo.PerSecond(10).Burst(25)
	for range 3 {
		n, res, _ := s.TakeAtMost(ctx, store.Request{Key: "batch:nightly", Policy: p, Cost: 10})
		fmt.Printf("granted %d, remaining %d, retry after %v\n", n, res.Remaining, res.RetryAfter)
	}
	n, res, _ := s.TakeAtMost(ctx, store.Request{Key: "batch:nightly", Policy: p, Cost: 10})
	fmt.Printf("granted %d, retry after %v\n", n, res.RetryAfter)
	// Output:
	// granted 10, remaining 15, retry after 0s
	// granted 10, remaining 5, retry after 0s
	// granted 5, remaining 0, retry after 0s
	// granted 0, retry after 100ms
}

// Reserve admits a request the bucket cannot admit now but can within the
// caller's wait, with the exact delay after which it may proceed;
// reservations queue in order, and one cancelled while it is the latest
// gives its tokens back exactly.
func ExampleStore_Reserve() {
	s, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := algo.PerSecond(2).Burst(2) // a token every 500ms
	for range 4 {
		r, _ := s.Reserve(ctx, store.Request{Key: "feed:42", Policy: p, Cost: 1}, time.Second)
		fmt.Printf("allowed=%v delay=%v retry-after=%v\n", r.Allowed, r.Delay, r.RetryAfter)
	}
	last, _ := s.Reserve(ctx, store.Request{Key: "feed:7", Policy: p, Cost: 2}, time.Second) // another key: at once
	fmt.Println("feed:7 delay", last.Delay)
	r, _ := s.Reserve(ctx, store.Request{Key: "feed:7", Policy: p, Cost: 1}, time.Second)
	ok, res, _ := s.CancelReservation(ctx, "feed:7", p, r.Ticket) // the client left
	fmt.Printf("cancelled %v, next token in %v\n", ok, res.ResetAfter)
	// Output:
	// allowed=true delay=0s retry-after=0s
	// allowed=true delay=0s retry-after=0s
	// allowed=true delay=500ms retry-after=0s
	// allowed=true delay=1s retry-after=0s
	// feed:7 delay 0s
	// cancelled true, next token in 1s
}

// A memstore keeps concurrency leases too: at most Limit in flight per
// key, each released when its work ends or expiring after its TTL.
func ExampleStore_AcquireLease() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 2, TTL: time.Minute}, ratebucket.ConcurrencyConfig{Prefix: "reports:"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	a, _ := lim.Acquire(ctx, "user:42")
	b, _ := lim.Acquire(ctx, "user:42")
	c, _ := lim.Acquire(ctx, "user:42")
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, "retry after", c.RetryAfter)
	released, _ := lim.Release(ctx, a)
	again, _ := lim.Release(ctx, a)
	fmt.Println("released", released, "twice", again)
	clk.Add(time.Minute) // b's holder crashed: its lease expires
	d, _ := lim.Acquire(ctx, "user:42")
	e, _ := lim.Acquire(ctx, "user:42")
	fmt.Println(d.Allowed, e.Allowed, "remaining", e.Remaining)
	// Output:
	// true true false retry after 1m0s
	// released true twice false
	// true true remaining 0
}
