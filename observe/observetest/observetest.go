// Package observetest holds what the tests of code that reports to the
// observer contract share: a [Recorder] of the decisions it receives, and
// a [Counter] that keeps the counts observe.Wrap gives a DecisionCounter.
package observetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/ratebucket/ratebucket/observe"
)

// Recorder is an observe.Observer that keeps the decisions it receives and
// ignores the other events. It is safe for simultaneous use; the zero
// value is ready.
type Recorder struct {
	observe.Funcs
	mu sync.Mutex
	ds []observe.Decision
}

// ObserveDecision keeps d.
func (r *Recorder) ObserveDecision(_ context.Context, d observe.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

// Take returns the decisions received since the last Take, in order.
func (r *Recorder) Take() []observe.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.ds
	r.ds = nil
	return ds
}

// Counter is an observe.DecisionCounter that keeps the counts Wrap gives
// it and, as a Recorder, the decisions it receives. It is safe for
// simultaneous use; the zero value is ready.
type Counter struct {
	Recorder
	cmu    sync.Mutex
	counts []*observe.DecisionCounts
}

// CountDecisions keeps dc.
func (c *Counter) CountDecisions(dc *observe.DecisionCounts) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.counts = append(c.counts, dc)
}

// Stores returns how many counts CountDecisions was given: one per store
// observed for c.
func (c *Counter) Stores() int {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return len(c.counts)
}

// Tallies returns the counts summed by store, policy and route; it panics
// if observe.SumTallies answers a label set twice.
func (c *Counter) Tallies() map[[3]string][len(observe.Tally{}.N)]uint64 {
	c.cmu.Lock()
	counts := c.counts
	c.cmu.Unlock()
	out := map[[3]string][len(observe.Tally{}.N)]uint64{}
	for _, t := range observe.SumTallies(counts...) {
		k := [3]string{t.Store, t.Policy, t.Route}
		if _, dup := out[k]; dup {
			panic(fmt.Sprintf("SumTallies: %+v twice", t))
		}
		out[k] = t.N
	}
	return out
}
