// Package obstest holds what the tests and benchmarks of the observer
// contract share across modules: a Recorder of events, and the CPU time
// of the calling thread.
package obstest

import (
	"context"
	"sync"

	"github.com/ratebucket/ratebucket/store"
)

// Recorder is a store.Observer that keeps the decisions it receives and
// ignores the other events. It is safe for simultaneous use; the zero
// value is ready.
type Recorder struct {
	store.ObserverFuncs
	mu sync.Mutex
	ds []store.Decision
}

// ObserveDecision keeps d.
func (r *Recorder) ObserveDecision(_ context.Context, d store.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

// Take returns the decisions received since the last Take, in order.
func (r *Recorder) Take() []store.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.ds
	r.ds = nil
	return ds
}
