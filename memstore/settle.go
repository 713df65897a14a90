package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Holds (store.Store's Hold and Settle): the hold's take is algo's, on the
// key's bucket under its shard lock, and the record of an open hold lives
// in the same shard, in a map keyed by the bucket's key and the hold's id.
// A record counts as a key against MaxKeys and is swept once its deadline
// has passed, so the memory of holds is bounded as the buckets' is.

// holdKey is the key of the record of the hold id on key.
func holdKey(key, id string) string { return key + "\x00" + id }

// Hold takes r.Cost tokens from the bucket at key as an estimate and keeps
// the record of the open hold: see store.Store. A shard that is full
// (MaxKeys) with nothing idle refuses the hold, charging nothing, with a
// RetryAfter of when its earliest entry becomes idle, between 1µs and ttl:
// a hold without its record could not be settled.
func (s *Store) Hold(ctx context.Context, req store.Request, ttl time.Duration) (algo.Hold, algo.Result, error) {
	key, p := req.Key, req.Policy
	sh, h, e, now, err := s.lock(ctx, key)
	if err != nil {
		return algo.Hold{}, algo.Result{}, err
	}
	ttlus := ttl.Microseconds()
	if ttl%time.Microsecond != 0 {
		ttlus = -1 // not a whole number of µs: algo refuses it
	}
	if _, _, _, err := (algo.TokenBucket{}).Hold(p, algo.State{}, now, req.Cost, ttlus); err != nil {
		sh.mu.Unlock()
		return algo.Hold{}, algo.Result{}, fmt.Errorf("memstore: %w", err)
	}
	need := 1 // the record, and a new bucket's slot
	if e == nil {
		need = 2
	}
	if !sh.room(now, s.perShard-need+1, s.pols) {
		wait := min(max(sh.soonest-now, 1), ttlus)
		sh.mu.Unlock()
		return algo.Hold{}, algo.Result{RetryAfter: time.Duration(wait) * time.Microsecond}, nil
	}
	e = sh.b.find(h, key) // room may have moved the slots
	st, hold, res, err := algo.TokenBucket{}.Hold(p, s.load(sh, e, p, now), now, req.Cost, ttlus)
	if err != nil {
		sh.mu.Unlock()
		return algo.Hold{}, algo.Result{}, fmt.Errorf("memstore: %w", err)
	}
	if res.Allowed {
		hold.ID = store.NewLeaseID()
		if sh.holds == nil {
			sh.holds = make(map[string]algo.Hold)
		}
		sh.holds[holdKey(key, hold.ID)] = hold
		sh.hpeak = max(sh.hpeak, len(sh.holds))
		sh.soonest = min(sh.soonest, hold.Deadline+1)
	}
	if res.Allowed && req.Cost > 0 || rebased(e, st) {
		s.keep(sh, h, key, e, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now)
	} else {
		sh.mu.Unlock()
	}
	return hold, res, nil
}

// Settle closes the open hold h on key at the actual cost: see
// store.Store. The bucket is written as by a Refund or a Take; the record
// is deleted.
func (s *Store) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error) {
	sh, hk, e, now, err := s.lock(ctx, key)
	if err != nil {
		return algo.Settlement{}, err
	}
	st, res, err := algo.TokenBucket{}.Settle(p, s.load(sh, e, p, now), now, h, actual)
	rk := holdKey(key, h.ID)
	rec, open := sh.holds[rk]
	switch {
	case err == nil && !open:
		err = algo.ErrHoldSettled
	case err == nil && rec != h:
		err = algo.ErrInvalidHold
	}
	if err != nil {
		sh.mu.Unlock()
		return algo.Settlement{}, fmt.Errorf("memstore: %w", err)
	}
	delete(sh.holds, rk)
	if e == nil && st.Level == 0 && !rebased(e, st) {
		sh.mu.Unlock()
		return res, nil
	}
	s.keep(sh, hk, key, e, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now)
	return res, nil
}

// sweepHolds deletes the records of holds past their deadline at now, and
// returns the earliest time another may be swept.
func (sh *shard) sweepHolds(now int64) int64 {
	soonest := int64(1<<63 - 1)
	for k, h := range sh.holds {
		if h.Deadline < now {
			delete(sh.holds, k)
		} else {
			soonest = min(soonest, h.Deadline+1)
		}
	}
	if sh.hpeak > sh.floor && len(sh.holds) < sh.hpeak/4 {
		m := make(map[string]algo.Hold, 2*len(sh.holds))
		for k, h := range sh.holds {
			m[k] = h
		}
		sh.holds, sh.hpeak = m, len(m)
	}
	return soonest
}
