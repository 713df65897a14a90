package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// A client hammering an empty bucket is denied locally: the primary (here
// a memstore standing in for redisstore) hears only about the requests that
// could be admitted.
func ExampleNewDenyCache() {
	clk := storetest.NewClock()
	primary, _ := memstore.New(memstore.Config{Clock: clk})
	cache, _ := hybrid.NewDenyCache(primary, hybrid.DenyCacheConfig{Clock: clk})
	p := algo.PerSecond(2).Burst(3)
	for i := range 10 {
		res, _ := cache.Take(context.Background(), store.Request{Key: "abuser", Policy: p, Cost: 1})
		fmt.Printf("%d allowed=%v retry=%v\n", i, res.Allowed, res.RetryAfter)
		clk.Add(100 * time.Millisecond)
	}
	st := cache.Stats()
	fmt.Printf("primary calls %d, local denials %d\n", st.Calls, st.Denied)
	// Output:
	// 0 allowed=true retry=0s
	// 1 allowed=true retry=0s
	// 2 allowed=true retry=0s
	// 3 allowed=false retry=200ms
	// 4 allowed=false retry=100ms
	// 5 allowed=true retry=0s
	// 6 allowed=false retry=400ms
	// 7 allowed=false retry=300ms
	// 8 allowed=false retry=200ms
	// 9 allowed=false retry=100ms
	// primary calls 4, local denials 6
}

// downStore is a primary that always fails, as Redis does while it is
// unreachable.
type downStore struct{ store.Store } // nil: only Take is called

func (downStore) Take(context.Context, store.Request) (algo.Result, error) {
	return algo.Result{}, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// With the primary down, the breaker opens after five failures and this
// instance, one of four, limits each key to its quarter of the policy.
func ExampleNewFallback() {
	clk := storetest.NewClock()
	local, _ := memstore.New(memstore.Config{Clock: clk})
	f, _ := hybrid.NewFallback(store.Store(downStore{}), local, hybrid.FallbackConfig{
		Instances: 4, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		OnStateChange: func(from, to observe.BreakerState) { fmt.Println("breaker:", from, "->", to) },
	})
	p := algo.PerSecond(2).Burst(100)
	fmt.Println("share:", p.Share(4))
	admitted := 0
	for range 40 {
		if res, _ := f.Take(context.Background(), store.Request{Key: "user:42", Policy: p, Cost: 1}); res.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	// Output:
	// share: burst 25, 30/1m0s
	// breaker: closed -> open
	// admitted: 25
}

// A hot key shared by a fleet of two: after the first few requests, each
// primary call takes a batch, and the requests are admitted from it in
// process (here a memstore stands in for redisstore).
func ExampleNewLeases() {
	clk := storetest.NewClock()
	primary, _ := memstore.New(memstore.Config{Clock: clk})
	// SweepEvery -1: no goroutine, as the clock is a test's; a batch
	// whose Lifetime (100ms) ended is given back by the key's next call.
	leases, _ := hybrid.NewLeases(primary, hybrid.LeasesConfig{Instances: 2, Clock: clk, SweepEvery: -1})
	defer leases.Close()
	p := algo.PerSecond(1000).Burst(100) // a batch holds at most min(100, 1000·100ms)/2 = 50
	admitted := 0
	for range 400 { // 500 a second for 800ms, this instance's half
		res, _ := leases.Take(context.Background(), store.Request{Key: "global", Policy: p, Cost: 1})
		if res.Allowed {
			admitted++
		}
		clk.Add(2 * time.Millisecond)
	}
	st := leases.Stats()
	fmt.Printf("admitted %d of 400 with %d primary calls; %d from batches\n", admitted, st.Calls, st.Local)
	// Output:
	// admitted 400 of 400 with 15 primary calls; 397 from batches
}
