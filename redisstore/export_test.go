package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// PipelineState reports how many calls are queued and how many writers
// run, in all lanes, so tests can tell "sent" from "queued" without
// timing.
func PipelineState(s *Store) (queued, writers int) {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	queued, writers = len(s.pipe.one.q), s.pipe.one.writers
	if ls := s.pipe.lanes.Load(); ls != nil {
		for _, l := range *ls {
			queued, writers = queued+len(l.q), writers+l.writers
		}
	}
	return queued, writers
}

// AgeLanes makes every lane of s look d older: its last batch d earlier.
func AgeLanes(s *Store, d time.Duration) {
	if ls := s.pipe.lanes.Load(); ls != nil {
		for _, l := range *ls {
			l.used.Add(-int64(d))
		}
	}
}

// AddLane adds a lane for node to s, as its first call to node would.
func AddLane(s *Store, node *redis.Client) { s.pipe.addLane(node) }

// PipelineLanes returns how many lanes of a cluster's masters (or a
// Ring's shards) s keeps.
func PipelineLanes(s *Store) int {
	if ls := s.pipe.lanes.Load(); ls != nil {
		return len(*ls)
	}
	return 0
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

// Ints reads a script's reply, the integers packed in one string.
func Ints(reply string) ([]int64, error) { return ints(nil, reply) }

// RunInts runs the bucket script with keys and args, as another runtime
// does, and returns its integers.
func RunInts(ctx context.Context, rdb redis.Scripter, keys []string, args ...any) ([]int64, error) {
	reply, err := Script().Run(ctx, rdb, keys, args...).Text()
	if err != nil {
		return nil, err
	}
	return Ints(reply)
}
