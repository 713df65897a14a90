package redisstore

import (
	"context"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// PipelineState reports how many calls are queued and how many writers
// run, so tests can tell "sent" from "queued" without timing.
func PipelineState(s *Store) (queued, writers int) {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	return len(s.pipe.q), s.pipe.writers
}

// TakeNow is Take that also returns the time, in µs, the script decided at
// (Redis's TIME with the server clock), so tests can replay each call
// through algo.
func TakeNow(ctx context.Context, s *Store, key string, p algo.Policy, cost int64) (algo.Result, int64, error) {
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: cost}}
	var res [1]algo.Result
	var in inspected
	err := s.run(ctx, opTake, reqs[:], res[:], &in)
	return res[0], in.now, err
}

// MinLead is how many waiting calls start another writer (minLead).
const MinLead = minLead

// PipelineClosed reports whether Close has begun: the pipeline refuses new
// calls, and its writers send what is queued.
func PipelineClosed(s *Store) bool {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	return s.pipe.closed
}
