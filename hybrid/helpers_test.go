package hybrid_test

import (
	"context"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// unhurried is the Timeout of the Fallbacks whose primary is in memory
// and healthy. The default, 50ms, is real time: on a busy machine a
// goroutine can wait that long between the deadline's start and the
// primary's check of it, which counts as a failure and answers degraded.
const unhurried = time.Hour

// offsetClock shows another clock's time shifted by off: an instance whose
// clock is skewed.
type offsetClock struct {
	c   store.Clock
	off time.Duration
}

func (o *offsetClock) Now() time.Time { return o.c.Now().Add(o.off) }

// sharedBucket is what Redis with client clocks is: one state per key that
// several instances update, each with the time its own clock reads. It
// applies algo.TokenBucket, the reference every store is tested against.
type sharedBucket struct {
	mu     sync.Mutex
	states map[string]algo.State
}

// peek returns what a Take of cost at now would answer, changing nothing.
func (b *sharedBucket) peek(key string, p algo.Policy, now time.Time, cost int64) algo.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, res, _ := algo.TokenBucket{}.Take(p, b.states[key], now.UnixMicro(), cost)
	return res
}

// view returns the store instance that reads clk.
func (b *sharedBucket) view(clk store.Clock) store.Store { return &bucketView{b: b, clk: clk} }

type bucketView struct {
	store.Store // nil: only its own methods are for use
	b           *sharedBucket
	clk         store.Clock
}

func (v *bucketView) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	if key == "" {
		return algo.Result{}, store.ErrEmptyKey
	}
	v.b.mu.Lock()
	defer v.b.mu.Unlock()
	if v.b.states == nil {
		v.b.states = map[string]algo.State{}
	}
	s, res, err := algo.TokenBucket{}.Take(p, v.b.states[key], v.clk.Now().UnixMicro(), cost)
	if err == nil {
		v.b.states[key] = s
	}
	return res, err
}
