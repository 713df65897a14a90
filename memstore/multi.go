package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// pending is one request's outcome, computed but not yet stored.
type pending struct {
	st   algo.State
	idle int64
	had  bool // the key had a bucket
	over bool // served from the overflow bucket
	conv bool // its bucket was converted to another policy: keep base even uncharged
	base algo.State
}

// TakeMulti applies every request atomically: if all buckets admit, all are
// charged; otherwise none is, and each Result is what its bucket alone
// would answer. It implements store.Store. (A denying bucket keeps its
// refilled state and later stamp, uncharged, as after a denied Take; the
// others are left exactly as they were.)
//
// A key named twice is refused with store.ErrDuplicateKey; an empty key or
// a bad policy or cost anywhere in reqs is an error and charges nothing. An
// empty reqs is allowed, with no Results. The shards involved are locked in
// index order, so concurrent multi-takes cannot deadlock. New keys in one
// call may overshoot a shard's MaxKeys bound by at most len(reqs)-1.
func (s *Store) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	if err := store.CheckRequests(reqs, s.maxKey); err != nil {
		return store.MultiResult{}, fmt.Errorf("memstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.MultiResult{}, err
	}
	res := store.MultiResult{Allowed: true, Denied: -1, Results: make([]algo.Result, len(reqs))}
	if len(reqs) == 0 {
		sh := &s.shards[0]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if sh.closed {
			return store.MultiResult{}, store.ErrClosed
		}
		return res, nil
	}
	now := s.now()

	// Scratch space on the stack for the usual few requests.
	var hashBuf, orderBuf [8]uint64
	var pendBuf [8]pending
	hs, order := hashBuf[:0], orderBuf[:0]
	var pend []pending
	for _, r := range reqs {
		h := s.hash(r.Key)
		hs, order = append(hs, h), append(order, h&s.mask)
	}
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	overLocked := false
	defer func() {
		if overLocked {
			s.over.mu.Unlock()
		}
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()
	// Close closes the shards in index order under each lock, so if the
	// lowest shard held is still open, so are the others.
	if s.shards[order[0]].closed {
		return store.MultiResult{}, store.ErrClosed
	}

	if len(reqs) <= len(pendBuf) {
		pend = pendBuf[:len(reqs)]
	} else {
		pend = make([]pending, len(reqs))
	}
	// A slot is found again when the request is stored: room may sweep,
	// and the puts move slots.
	for i, r := range reqs {
		sh := &s.shards[hs[i]&s.mask]
		var prev algo.State
		had, conv := false, false
		if s.tb {
			sl := sh.b.find(hs[i], r.Key)
			prev = s.load(sh, sl, r.Policy, now)
			had, conv = sl != nil, rebased(sl, prev)
		} else if sl := sh.w.find(hs[i], r.Key); sl != nil {
			prev, had = sl.v.st, true
		}
		st, rr, idle, err := s.take(r.Policy, prev, now, r.Cost)
		if err != nil {
			return store.MultiResult{}, fmt.Errorf("memstore: request %d: %w", i, err)
		}
		pd := pending{st: st, idle: idle, had: had, conv: conv, base: prev}
		if !had && pd.idle > now && !sh.room(now, s.perShard, s.pols) {
			if !overLocked {
				s.over.mu.Lock()
				overLocked = true
			}
			base := s.over.m[r.Policy]
			for j := range i { // an earlier request in this call may share the bucket
				if pend[j].over && reqs[j].Policy == r.Policy {
					base = pend[j].st
				}
			}
			if st, rr, err = s.alg.Take(r.Policy, base, now, r.Cost); err != nil {
				return store.MultiResult{}, fmt.Errorf("memstore: request %d: %w", i, err)
			}
			pd = pending{st: st, idle: s.alg.IdleAt(r.Policy, st), over: true}
		}
		pend[i], res.Results[i] = pd, rr
		if !rr.Allowed {
			res.Allowed = false
			if res.Denied < 0 || rr.RetryAfter > res.RetryAfter {
				res.Denied, res.RetryAfter = i, rr.RetryAfter
			}
		}
	}
	for i, pd := range pend {
		if !res.Allowed && res.Results[i].Allowed {
			if pd.conv { // uncharged, but converted to the call's policy
				r := reqs[i]
				s.store(&s.shards[hs[i]&s.mask], hs[i], r.Key, pd.base, s.alg.IdleAt(r.Policy, pd.base), now)
			}
			continue // would be charged: keep the bucket as it was
		}
		// Allowed: charge. Denied: the bucket keeps its refill and stamp,
		// uncharged, as a single Take would.
		r, sh := reqs[i], &s.shards[hs[i]&s.mask]
		switch {
		case pd.over && pd.idle <= now:
			delete(s.over.m, r.Policy)
		case pd.over:
			s.over.m[r.Policy] = pd.st
		default:
			s.store(sh, hs[i], r.Key, pd.st, pd.idle, now)
		}
	}
	return res, nil
}

// store keeps st, idle from idle, as the state of key (whose hash is h) in
// sh, locked, under either algorithm: in the key's slot or a new one, or
// deleting the key's slot if idle has passed. It makes no room (a new key
// goes in even at MaxKeys).
func (s *Store) store(sh *shard, h uint64, key string, st algo.State, idle, now int64) {
	if s.tb {
		sl := sh.b.find(h, key)
		switch {
		case idle > now:
			sh.put(h, key, sl, st, idle)
		case sl != nil:
			sh.drop(key, sl)
		}
		return
	}
	sl := sh.w.find(h, key)
	switch {
	case idle > now:
		sh.putWide(h, key, sl, st, idle)
	case sl != nil:
		sh.w.remove(sl)
	}
}

// overflow holds the buckets shared by new keys that arrive at a full
// shard, one per policy.
type overflow struct {
	mu sync.Mutex
	m  map[algo.Policy]algo.State
}

// take applies a request to the overflow bucket for p.
func (o *overflow) take(alg algo.Algorithm, p algo.Policy, now, cost int64) (algo.Result, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st, res, err := alg.Take(p, o.m[p], now, cost)
	if err != nil {
		return algo.Result{}, fmt.Errorf("memstore: %w", err)
	}
	if alg.IdleAt(p, st) <= now {
		delete(o.m, p)
	} else {
		o.m[p] = st
	}
	return res, nil
}
