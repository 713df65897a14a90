package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// leaseSalt is XORed into a key's hash to choose the shard of its lease
// set, so that a key's bucket and its leases do not share a lock.
const leaseSalt = 0x9e3779b97f4a7c15

// leaseSet is a lease key's state, with room for one lease inline, so that
// a key holding one lease (the common case) costs one allocation.
type leaseSet struct {
	l   algo.Leases
	one [1]algo.Lease
}

// leaseKey is a lease key's entry in its shard's map of leases (lease
// keys are rare: they live apart from the buckets' tables): its leases,
// and when its last lease expires.
type leaseKey struct {
	idle int64
	set  leaseSet
}

// AcquireLease asks for a lease with the given id on key under p, at the
// store's now; see store.Store. A new key arriving at a shard that is full
// (MaxKeys) with nothing idle is denied, with a RetryAfter of when the
// shard's earliest entry becomes idle, between 1µs and p.TTL: a lease set
// cannot be shared the way the overflow bucket is without letting a key
// exceed its limit. Errors are store.ErrEmptyKey, store.ErrKeyTooLong,
// algo.ErrInvalidLeaseID, algo.ErrInvalidLeasePolicy, store.ErrClosed or
// the context's, and change nothing.
func (s *Store) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	sh, e, now, err := s.lockLeases(ctx, key, id)
	if err != nil {
		return algo.LeaseResult{}, err
	}
	var le *leaseKey // a new key's entry, its state inline
	var l algo.Leases
	if e != nil {
		l = e.set.l
	} else {
		le = &leaseKey{}
		l = le.set.one[:0]
	}
	l, res, err := p.Acquire(l, now, id)
	if err != nil {
		sh.mu.Unlock()
		return algo.LeaseResult{}, fmt.Errorf("memstore: %w", err)
	}
	if wait, ok := s.keepLeases(sh, key, e, le, l, now); !ok {
		return algo.LeaseResult{Limit: p.Limit, RetryAfter: time.Duration(min(max(wait, 1), p.TTL.Microseconds())) * time.Microsecond}, nil
	}
	return res, nil
}

// ReleaseLease frees id's lease on key and reports whether it was live; see
// store.Store. A key left with no lease is forgotten at once. Errors are
// those of AcquireLease but the policy's.
func (s *Store) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	return s.changeLease(ctx, key, id, func(l algo.Leases, now int64) (algo.Leases, bool, error) {
		return l.Release(now, id)
	})
}

// RenewLease extends id's live lease on key to expire p.TTL from now, and
// reports whether it was live; see store.Store. Errors are those of
// AcquireLease.
func (s *Store) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	return s.changeLease(ctx, key, id, func(l algo.Leases, now int64) (algo.Leases, bool, error) {
		return p.Renew(l, now, id)
	})
}

// changeLease applies a release or a renewal (op) to key's leases. Neither
// adds a lease, so a key with no leases stays without an entry.
func (s *Store) changeLease(ctx context.Context, key, id string, op func(algo.Leases, int64) (algo.Leases, bool, error)) (bool, error) {
	sh, e, now, err := s.lockLeases(ctx, key, id)
	if err != nil {
		return false, err
	}
	var l algo.Leases
	if e != nil {
		l = e.set.l
	}
	l, ok, err := op(l, now)
	if err != nil {
		sh.mu.Unlock()
		return false, fmt.Errorf("memstore: %w", err)
	}
	if e == nil {
		sh.mu.Unlock()
		return ok, nil
	}
	s.keepLeases(sh, key, e, nil, l, now)
	return ok, nil
}

// lockLeases checks a lease call's key and id, then locks the shard of key's
// leases and returns it, the key's entry (nil if it holds no leases) and
// the time. On error nothing is locked.
func (s *Store) lockLeases(ctx context.Context, key, id string) (*shard, *leaseKey, int64, error) {
	if err := store.CheckLease(key, id, s.maxKey); err != nil {
		return nil, nil, 0, fmt.Errorf("memstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, 0, err
	}
	now := s.now()
	h := s.hash(key) ^ leaseSalt
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil, nil, 0, store.ErrClosed
	}
	return sh, sh.leases[key], now, nil
}

// keepLeases stores l as the leases of key and unlocks sh. The key's entry
// is e, or for a new key le, added only if the shard has room. A key left
// with no leases is deleted. It reports false, storing nothing, when a new
// key finds the shard full with nothing idle, and then the µs until the
// shard's earliest key is idle (at most: it may be less, or passed).
func (s *Store) keepLeases(sh *shard, key string, e, le *leaseKey, l algo.Leases, now int64) (int64, bool) {
	defer sh.mu.Unlock()
	switch {
	case len(l) == 0: // every lease expired or released
		if e != nil {
			delete(sh.leases, key)
		}
	case e != nil:
		e.set.keep(l)
		e.idle = l.IdleAt()
		sh.soonest = min(sh.soonest, e.idle)
	case !sh.room(now, s.perShard, s.pols):
		return sh.soonest - now, false
	default:
		le.set.keep(l)
		le.idle = l.IdleAt()
		if sh.leases == nil {
			sh.leases = make(map[string]*leaseKey)
		}
		sh.leases[key] = le
		sh.lpeak = max(sh.lpeak, len(sh.leases))
		sh.soonest = min(sh.soonest, le.idle)
	}
	return 0, true
}

// keep stores l. Once l fills less than a quarter of its array, it moves
// to a smaller one (inline, for one lease), so that a key's memory follows
// its live leases; the quarter keeps a key that goes between n and 2n
// leases from reallocating each time.
func (set *leaseSet) keep(l algo.Leases) {
	switch {
	case len(l) >= cap(l)/4:
	case len(l) == 1:
		set.one[0], l = l[0], set.one[:1]
	default:
		l = append(make(algo.Leases, 0, 2*len(l)), l...)
	}
	if cap(l) > 1 {
		set.one = [1]algo.Lease{} // not in use: drop its id
	}
	set.l = l
}
