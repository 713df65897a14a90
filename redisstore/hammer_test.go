package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// TestHammerServerClock: four clients (four "instances", each its own
// connection pool) with 64 goroutines between them hammer one key on the
// server clock. The interval is measured by Redis TIME, from the script
// call that empties the bucket (its whole capacity in one take) to the end,
// and over it the admitted count obeys the law exactly (≤ capacity +
// ⌊rate·elapsed⌋). Since demand exceeds the rate, admitted plus the tokens
// left at the end falls short of the law only by the slack: the last
// partly refilled token, and refill spilled from a full bucket, which
// takes a stall of the whole test process longer than the 1s fill time
// (between the drain and the hammering, or during it). 5% of the bound
// plus 2 tokens covers it.
func TestHammerServerClock(t *testing.T) {
	srv := redistest.Start(t)
	p := algo.PerSecond(200).Burst(200) // from empty, a stall under 1s spills nothing
	const instances, goroutines = 4, 64
	prefix := redistest.Prefix(t)
	stores := make([]*redisstore.Store, instances)
	for i := range stores {
		rdb := redis.NewClient(srv.Options())
		t.Cleanup(func() { rdb.Close() })
		warm(t, rdb, goroutines/instances) // dial before the clock starts
		stores[i] = newStore(t, rdb, redisstore.Config{Prefix: prefix})
	}
	if _, err := stores[0].Inspect(ctxT(t), "hot", p); err != nil { // load the script
		t.Fatal(err)
	}

	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	var stop time.Time // bounds the run, measures nothing
	for g := range goroutines {
		s := stores[g%instances]
		wg.Go(func() {
			<-start
			// Until 80 refilled tokens were admitted (about 400ms of
			// refill), or 3s at most; neither bound measures anything.
			for admitted.Load() < 80 && time.Now().Before(stop) {
				res, err := s.Take(context.Background(), store.Request{Key: "hot", Policy: p, Cost: 1})
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	drain, before, err := redisstore.TakeNow(ctxT(t), stores[0], "hot", p, p.Capacity())
	if err != nil || !drain.Allowed || drain.Remaining != 0 {
		t.Fatalf("the take of the whole capacity = %+v, %v; want allowed, 0 remaining", drain, err)
	}
	stop = time.Now().Add(3 * time.Second)
	close(start)
	wg.Wait()
	// Inspect reads Redis TIME too, in the script, and says what is left.
	end, err := stores[0].Inspect(ctxT(t), "hot", p)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := end.Now.UnixMicro() - before
	bound := p.Capacity() + p.Rate().Tokens*elapsed/p.Rate().Period.Microseconds()
	slack := bound/20 + 2
	got := p.Capacity() + admitted.Load() // the drain, then the hammering
	t.Logf("%d calls in %v (Redis TIME): admitted %d, %d left, law %d, floor %d",
		1+admitted.Load()+denied.Load(), time.Duration(elapsed)*time.Microsecond, got, end.Tokens, bound, bound-slack)
	if denied.Load() == 0 {
		t.Fatalf("no call was denied: demand did not exceed the rate, so the test shows nothing")
	}
	if got > bound {
		t.Fatalf("admitted %d in %dµs: more than capacity + rate·elapsed = %d", got, elapsed, bound)
	}
	if got+end.Tokens < bound-slack {
		t.Fatalf("admitted %d and %d left after %dµs: fewer than the law %d minus the slack %d", got, end.Tokens, elapsed, bound, slack)
	}
}
