package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Holds (store.Store's Hold and Settle): each is one call of the
// token-bucket script, the Lua twin of algo.TokenBucket's Hold and Settle.
// The record of an open hold is a string key in the bucket's Cluster slot
// (holdKey), holding the estimate, the deadline and the policy, and
// expiring at the deadline; Settle checks and deletes it in the same call
// that changes the bucket, so a hold settles once.

// holdKey returns the key of hold id's record on bucket: the name of the
// bucket's policy registry (in its slot on a Cluster, on its shard on a
// Ring), then ":h:", the id, ":" and the bucket's key.
func holdKey(registry, id, bucket string) string { return registry + ":h:" + id + ":" + bucket }

// Hold takes req.Cost tokens from the bucket at req.Key as an estimate, in
// one atomic script call that also writes the record of the open hold: see
// store.Store. The deadline is on the clock the bucket uses (Redis's, by
// default). A ttl outside [1µs, algo.MaxHoldTTL] is algo.ErrInvalidHold,
// refused before Redis is called; the other errors are Take's.
func (s *Store) Hold(ctx context.Context, req store.Request, ttl time.Duration) (algo.Hold, algo.Result, error) {
	ttlus := ttl.Microseconds()
	if ttl%time.Microsecond != 0 || ttlus < 1 || ttl > algo.MaxHoldTTL {
		return algo.Hold{}, algo.Result{}, fmt.Errorf("redisstore: key %.64q: ttl %v: %w", req.Key, ttl, algo.ErrInvalidHold)
	}
	in := inspected{hold: algo.Hold{ID: store.NewLeaseID(), Deadline: ttlus}}
	reqs := [1]store.Request{{Key: req.Key, Policy: req.Policy, Cost: req.Cost}}
	var res [1]algo.Result
	if err := s.run(ctx, opHold, reqs[:], res[:], &in); err != nil {
		return algo.Hold{}, algo.Result{}, err
	}
	if !res[0].Allowed {
		return algo.Hold{}, res[0], nil
	}
	in.hold.Estimate, in.hold.Policy = req.Cost, req.Policy
	return in.hold, res[0], nil
}

// Settle closes the hold h on key at the actual cost, in one atomic script
// call: see store.Store. Bad input (algo's checks of the hold, the policy
// and the actual cost) is refused before Redis is called; a hold past its
// deadline, settled or unknown, or whose record differs from h, is refused
// by the script, which then writes nothing.
func (s *Store) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error) {
	if err := store.CheckKey(key, s.maxKey); err != nil {
		return algo.Settlement{}, fmt.Errorf("redisstore: key %.64q: %w", key, err)
	}
	// algo's own checks, on a full bucket at the hold's deadline.
	if _, _, err := (algo.TokenBucket{}).Settle(p, algo.State{}, min(max(h.Deadline, 0), algo.MaxTime), h, actual); err != nil {
		return algo.Settlement{}, fmt.Errorf("redisstore: key %.64q: %w", key, err)
	}
	if h.ID == "" || len(h.ID) > algo.MaxLeaseIDLen {
		return algo.Settlement{}, fmt.Errorf("redisstore: key %.64q: hold id %.64q: %w", key, h.ID, algo.ErrInvalidHold)
	}
	in := inspected{hold: h, actual: actual}
	reqs := [1]store.Request{{Key: key, Policy: p}}
	var res [1]algo.Result
	if err := s.run(ctx, opSettle, reqs[:], res[:], &in); err != nil {
		return algo.Settlement{}, err
	}
	switch in.status {
	case 0:
		return algo.Settlement{Result: res[0], Uncharged: in.left}, nil
	case 1:
		return algo.Settlement{}, fmt.Errorf("redisstore: key %.64q: %w", key, algo.ErrHoldSettled)
	case 2:
		return algo.Settlement{}, fmt.Errorf("redisstore: key %.64q: %w", key, algo.ErrHoldExpired)
	case 3:
		return algo.Settlement{}, fmt.Errorf("redisstore: key %.64q: %w", key, algo.ErrInvalidHold)
	}
	return algo.Settlement{}, fmt.Errorf("redisstore: script replied settle status %d", in.status)
}
