package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The operations around a take (store.Store, store.Store,
// store.Store): each is the token bucket's (algo.TokenBucket's Refund,
// TakeAtMost, Reserve, Cancel) applied under the key's shard lock, as Take
// is, and allocates nothing on a key that has a bucket. A Store configured
// with another Algorithm returns store.ErrUnsupported for them.

var ()

// errNotTokenBucket is returned by the operations only the token bucket has.
var errNotTokenBucket = fmt.Errorf("memstore: %w under an algorithm other than the token bucket", store.ErrUnsupported)

// lock checks key and ctx, then returns key's shard, locked, the key's
// hash and bucket's slot (nil if it has none) and the time; on an error nothing
// is locked. Each operation reads the bucket with s.load (policychange.go),
// which converts one written under another policy, and stores the
// converted bucket even when it would otherwise write nothing.
func (s *Store) lock(ctx context.Context, key string) (sh *shard, h uint64, e *slot[bucket], now int64, err error) {
	switch {
	case !s.tb:
		return nil, 0, nil, 0, errNotTokenBucket
	case key == "" || len(key) > s.maxKey:
		return nil, 0, nil, 0, fmt.Errorf("memstore: %w", store.CheckKey(key, s.maxKey))
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, nil, 0, err
	}
	now = s.now()
	h = s.hash(key)
	sh = &s.shards[h&s.mask]
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil, 0, nil, 0, store.ErrClosed
	}
	return sh, h, sh.b.find(h, key), now, nil
}

// Refund gives n tokens back to the bucket at key under p: see
// store.Store. A key with no bucket is full: a refund to it changes
// nothing and creates no bucket; nor does a refund of 0. A key whose Take
// was served from the overflow bucket (the store was full) has no bucket
// of its own, so its refund changes nothing either: the overflow bucket,
// shared by new keys, keeps the charge.
func (s *Store) Refund(ctx context.Context, req store.Request) (res algo.Result, err error) {
	key, p, n := req.Key, req.Policy, req.Cost
	sh, h, e, now, err := s.lock(ctx, key)
	if err != nil {
		return algo.Result{}, err
	}
	st, err := algo.TokenBucket{}.RefundTo(&res, p, s.load(sh, e, p, now), now, n)
	switch {
	case err != nil:
		sh.mu.Unlock()
		return algo.Result{}, fmt.Errorf("memstore: %w", err)
	case e == nil || n == 0 && !rebased(e, st):
		sh.mu.Unlock()
	default:
		s.keep(sh, h, key, e, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now)
	}
	return res, nil
}

// TakeAtMost takes as many whole tokens as the bucket at key under p
// holds, up to n, and returns how many it granted: see store.Store.
// A new key at a full store is served from the overflow bucket, as by Take.
func (s *Store) TakeAtMost(ctx context.Context, req store.Request) (granted int64, res algo.Result, err error) {
	key, p, n := req.Key, req.Policy, req.Cost
	sh, h, e, now, err := s.lock(ctx, key)
	if err != nil {
		return 0, algo.Result{}, err
	}
	st, granted, err := algo.TokenBucket{}.TakeAtMostTo(&res, p, s.load(sh, e, p, now), now, n)
	if err != nil {
		sh.mu.Unlock()
		return 0, algo.Result{}, fmt.Errorf("memstore: %w", err)
	}
	if !s.keep(sh, h, key, e, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now) {
		s.over.apply(p, now, func(st algo.State) algo.State {
			st, granted, _ = algo.TokenBucket{}.TakeAtMostTo(&res, p, st, now, n)
			return st
		})
	}
	return granted, res, nil
}

// Reserve reserves cost tokens from the bucket at key under p, admitted if
// they exist within maxWait: see store.Store. A new key at a full store
// is served from the overflow bucket, as by Take; its reservation cannot
// be cancelled (the key has no bucket of its own).
func (s *Store) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (res algo.Reservation, err error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	sh, h, e, now, err := s.lock(ctx, key)
	if err != nil {
		return algo.Reservation{}, err
	}
	wait := int64(maxWait / time.Microsecond)
	st, err := algo.TokenBucket{}.ReserveTo(&res, p, s.load(sh, e, p, now), now, cost, wait)
	if err != nil {
		sh.mu.Unlock()
		return algo.Reservation{}, fmt.Errorf("memstore: %w", err)
	}
	if !s.keep(sh, h, key, e, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now) {
		s.over.apply(p, now, func(st algo.State) algo.State {
			st, _ = algo.TokenBucket{}.ReserveTo(&res, p, st, now, cost, wait)
			res.Ticket = algo.Ticket{}
			return st
		})
	}
	return res, nil
}

// CancelReservation gives back the tokens of a reservation on key under p
// that is still the last in line, before its time: see store.Store. It
// writes only when it gives something back.
func (s *Store) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (ok bool, res algo.Result, err error) {
	sh, h, e, now, err := s.lock(ctx, key)
	if err != nil {
		return false, algo.Result{}, err
	}
	st, ok, err := algo.TokenBucket{}.CancelTo(&res, p, s.load(sh, e, p, now), now, t)
	switch {
	case err != nil:
		sh.mu.Unlock()
		return false, algo.Result{}, fmt.Errorf("memstore: %w", err)
	case e == nil || !ok && !rebased(e, st):
		sh.mu.Unlock()
	default:
		s.keep(sh, h, key, e, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now)
	}
	return ok, res, nil
}

// RefundMulti refunds every request atomically: see store.Store. The
// shards involved are locked in index order, as by TakeMulti; keys without
// a bucket, and refunds of 0, change nothing.
func (s *Store) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	if !s.tb {
		return nil, errNotTokenBucket
	}
	if err := store.CheckRequests(reqs, s.maxKey); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	results := make([]algo.Result, len(reqs))
	var hashBuf, orderBuf [8]uint64
	hs, order := hashBuf[:0], orderBuf[:0]
	for _, r := range reqs {
		h := s.hash(r.Key)
		hs, order = append(hs, h), append(order, h&s.mask)
	}
	order = append(order, 0) // an empty reqs still learns whether the store is closed
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()
	if s.shards[order[0]].closed { // Close closes the shards in index order
		return nil, store.ErrClosed
	}
	now := s.now()
	for i, r := range reqs {
		sh := &s.shards[hs[i]&s.mask]
		e := sh.b.find(hs[i], r.Key) // valid until the next put or drop in sh
		st, err := algo.TokenBucket{}.RefundTo(&results[i], r.Policy, s.load(sh, e, r.Policy, now), now, r.Cost)
		if err != nil { // checked above; cannot happen
			return nil, fmt.Errorf("memstore: request %d: %w", i, err)
		}
		if e == nil || r.Cost == 0 && !rebased(e, st) {
			continue
		}
		if idle := (algo.TokenBucket{}).IdleFrom(r.Policy, st, results[i].ResetAfter, now); idle <= now {
			sh.drop(r.Key, e)
		} else {
			sh.put(hs[i], r.Key, e, st, idle)
		}
	}
	return results, nil
}

// apply runs op on the overflow bucket for p at now and keeps its state.
func (o *overflow) apply(p algo.Policy, now int64, op func(algo.State) algo.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st := op(o.m[p]); (algo.TokenBucket{}).IdleAt(p, st) <= now {
		delete(o.m, p)
	} else {
		o.m[p] = st
	}
}
