package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// TestHammerServerClock: four clients (four "instances", each its own
// connection pool) with 64 goroutines between them hammer one key on the
// server clock. Over the interval measured by Redis TIME before and after,
// the admitted count obeys the law exactly (≤ capacity + ⌊rate·elapsed⌋).
// Since demand exceeds the rate, admitted plus the tokens left at the end
// falls short of the law only by the slack: the refill spilled from the
// full bucket between TIME and the first script call, and the last partly
// refilled token; 5% of the bound plus 2 tokens covers it on a loaded
// machine (only a stall of the whole test process longer than the 1s fill
// time would spill more).
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
	admin := srv.Client()
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
			// Until 80 tokens beyond the burst were admitted (about 400ms
			// of refill), or 3s at most; neither bound measures anything.
			for admitted.Load() < p.Capacity()+80 && time.Now().Before(stop) {
				res, err := s.Take(context.Background(), "hot", p, 1)
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
	before, err := admin.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	stop = time.Now().Add(3 * time.Second)
	close(start)
	wg.Wait()
	// Inspect reads Redis TIME too, in the script, and says what is left.
	end, err := stores[0].Inspect(ctxT(t), "hot", p)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := end.Now.Sub(before).Microseconds()
	bound := p.Capacity() + p.Rate().Tokens*elapsed/p.Rate().Period.Microseconds()
	slack := bound/20 + 2
	got := admitted.Load()
	t.Logf("%d calls in %v (Redis TIME): admitted %d, %d left, law %d, floor %d",
		got+denied.Load(), time.Duration(elapsed)*time.Microsecond, got, end.Tokens, bound, bound-slack)
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
