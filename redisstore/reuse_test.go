package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestPipelineOwnReplies: calls and their arguments are reused, so a reply
// delivered to the wrong caller, or arguments overwritten by the next
// call, would show here. Many goroutines, each on buckets of its own with
// a capacity of its own, take and multi-take at once through one pipeline
// (with and without a context deadline, so some calls are watched by the
// alarm and some are not), and each checks every answer against its own
// running count.
func TestPipelineOwnReplies(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(), redisstore.Config{})
	const goroutines, rounds = 48, 60
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			capacity := int64(1000 + g)
			p := algo.PerHour(1).Burst(capacity) // no whole token refills during the test
			key, group := fmt.Sprint("own", g), fmt.Sprint("g", g)
			left, multiLeft := capacity, capacity
			for i := range rounds {
				ctx := context.Background()
				if i%3 == 1 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, patience)
					defer cancel()
				}
				cost := int64(1 + (g+i)%5)
				if i%4 == 3 {
					reqs := []store.Request{
						{Key: store.GroupKey(group, "a"), Policy: p, Cost: cost},
						{Key: store.GroupKey(group, "b"), Policy: p, Cost: cost},
					}
					res, err := s.TakeMulti(ctx, reqs)
					multiLeft -= cost
					if err != nil || !res.Allowed || res.Results[0].Remaining != multiLeft || res.Results[1].Remaining != multiLeft {
						t.Errorf("goroutine %d round %d: TakeMulti = %+v, %v; want both allowed with %d of %d left", g, i, res, err, multiLeft, capacity)
						return
					}
					continue
				}
				res, err := s.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
				left -= cost
				if err != nil || !res.Allowed || res.Remaining != left {
					t.Errorf("goroutine %d round %d: Take(%s, %d) = %+v, %v; want allowed with %d of %d left", g, i, key, cost, res, err, left, capacity)
					return
				}
			}
		})
	}
	wg.Wait()
}
