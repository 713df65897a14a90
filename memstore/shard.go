package memstore

import (
	"sync"
	"sync/atomic"

	"github.com/ratebucket/ratebucket/algo"
)

// minSweep is the size below which a shard never sweeps: a sweep of a
// small table would cost more than the memory it frees. Tests lower it.
const minSweep = 1024

// shard is one lock and the keys that hash to it: token buckets in b, or,
// under another algorithm, states in w (table.go), and lease keys in
// leases (lease.go). All fields are guarded by mu, but a bucket's value,
// which the lock-free Take (fast.go) also updates under its slot's own
// lock: a holder of mu waits for a slot to be free before it reads or
// moves it (see slot).
//
// Measured (issue 19; bench/, DistinctKeys over 100k keys; old and new
// binaries alternated; figures in the commit that made it): with the
// map[uint64]*entry that this replaced, a bucket cost 88 B of heap and a
// Take 814 instructions; see table for what changed and why.
type shard struct {
	mu      shardLock
	b       table[bucket] // token buckets (Store.tb)
	w       table[wide]   // states under another algorithm (!Store.tb)
	closed  bool
	next    int   // a new key at this size triggers room's sweep check
	soonest int64 // no bucket or lease key is idle before this (a lower bound, µs)
	credit  int   // at the limit, refusals left before another sweep
	floor   int   // minSweep, or less in tests

	leases map[string]*leaseKey  // lease keys (lease.go); nil until the first
	lpeak  int                   // largest len(leases) since the map was made
	holds  map[string]algo.Hold  // records of open holds (settle.go); nil until the first
	hpeak  int                   // largest len(holds) since the map was made
	lost   map[string]int64      // idle times of buckets under no policy number (policychange.go)
	pols   map[algo.Policy]int64 // a cache of policy numbers (policychange.go)
	_      [64]byte
}

func (sh *shard) init(limit, floor int, tb bool, fast *atomic.Bool) {
	sh.mu.fast = fast
	if tb {
		sh.b.init(minSlots)
	} else {
		sh.w.init(minSlots)
	}
	sh.floor = floor
	sh.next = min(limit, floor)
}

// close drops every key. A closed shard's tables have one empty slot, so
// that a lookup needs no check of closed: it finds nothing, and the path
// that handles a new key checks closed.
func (sh *shard) close() {
	retire(sh.b.slots)
	retire(sh.w.slots)
	sh.b.n, sh.b.peak, sh.w.n, sh.w.peak = 0, 0, 0, 0
	sh.b.init(1)
	sh.w.init(1)
	sh.leases, sh.lost, sh.holds, sh.closed = nil, nil, nil, true
}

// shardLock is a shard's mutex, and a flag that says it is held: a
// lock-free Take (fast.go) that finds the flag set, before or after it
// locks its slot, leaves the slot alone and takes the mutex instead. So
// every holder of the mutex sees only slots that no Take changes, once
// each slot it reads or moves is free (slot.free).
//
// The flag is set only while the Store's lock-free Takes are on (fast,
// shared by all shards; see Store.lockedOnly): setting and clearing it
// are two more locked instructions per holding, which a Store whose Takes
// all take the mutex (an observed one) does not pay.
type shardLock struct {
	mu   sync.Mutex
	held atomic.Bool
	fast *atomic.Bool
}

// Lock locks the mutex and, while lock-free Takes are on, sets the flag.
func (l *shardLock) Lock() {
	l.mu.Lock()
	if l.fast.Load() {
		l.held.Store(true)
	}
}

// Unlock clears the flag if it is set and unlocks the mutex.
func (l *shardLock) Unlock() {
	if l.held.Load() {
		l.held.Store(false)
	}
	l.mu.Unlock()
}

// size returns the number of keys held: buckets, lease keys and hold
// records.
func (sh *shard) size() int { return sh.b.n + sh.w.n + len(sh.leases) + len(sh.holds) }

// put stores st as the token bucket of key (whose hash is h), idle from
// idle: in sl, the key's slot, or if sl is nil in a new slot.
func (sh *shard) put(h uint64, key string, sl *slot[bucket], st algo.State, idle int64) {
	if sl == nil {
		sh.b.insert(h, key, pack(st))
	} else {
		if sl.v.policy() == 0 && st.Prev != 0 {
			delete(sh.lost, key)
		}
		sl.v = pack(st)
	}
	if st.Prev == 0 { // no policy number to derive idle from: keep it apart
		if sh.lost == nil {
			sh.lost = make(map[string]int64)
		}
		sh.lost[key] = idle
	}
	sh.soonest = min(sh.soonest, idle)
}

// drop removes the token bucket in slot sl, of key.
func (sh *shard) drop(key string, sl *slot[bucket]) {
	if sl.v.policy() == 0 {
		delete(sh.lost, key)
	}
	sh.b.remove(sl)
}

// putWide stores st as the state of key under another algorithm than the
// token bucket, idle from idle: in sl, the key's slot, or a new one.
func (sh *shard) putWide(h uint64, key string, sl *slot[wide], st algo.State, idle int64) {
	if sl == nil {
		sh.w.insert(h, key, wide{st, idle})
	} else {
		sl.v = wide{st, idle}
	}
	sh.soonest = min(sh.soonest, idle)
}

// room reports whether the shard, holding at most limit keys, may store
// one more at time now. It sweeps first when the shard has grown to its
// threshold and some key may be idle; at the limit, it sweeps at most
// once per n/16 refusals so that a flood of new keys costs O(1) each.
// A sweep moves slots: slot pointers taken before room are stale after.
func (sh *shard) room(now int64, limit int, pols *policies) bool {
	n := sh.size()
	if n < sh.next {
		return true
	}
	if now >= sh.soonest && (n < limit || sh.credit <= 0) {
		sh.sweep(now, pols)
		if n >= limit {
			sh.credit = n / 16
		}
		n = sh.size()
	}
	if n < limit {
		sh.next = min(limit, max(sh.floor, 2*n))
		return true
	}
	sh.credit--
	return false
}

// sweep deletes every key idle at now, and shrinks what has shrunk below
// a quarter of its peak. A token bucket's idle time is derived from its
// state and its policy, which its policy number names.
func (sh *shard) sweep(now int64, pols *policies) {
	tab := *pols.tab.Load()
	soonest := sh.b.sweep(sh.floor, func(sl *slot[bucket]) int64 {
		st := sl.v.state()
		if st.Prev == 0 || st.Prev > int64(len(tab)) {
			key := keyOf(sl)
			at := sh.lost[key]
			if at <= now {
				delete(sh.lost, key)
			}
			return at
		}
		return algo.TokenBucket{}.IdleAt(tab[st.Prev-1], st)
	}, now)
	soonest = min(soonest, sh.w.sweep(sh.floor, func(sl *slot[wide]) int64 { return sl.v.idle }, now))
	for key, lk := range sh.leases {
		if lk.idle <= now {
			delete(sh.leases, key)
		} else {
			soonest = min(soonest, lk.idle)
		}
	}
	if sh.lpeak > sh.floor && len(sh.leases) < sh.lpeak/4 {
		m := make(map[string]*leaseKey, 2*len(sh.leases))
		for key, lk := range sh.leases {
			m[key] = lk
		}
		sh.leases, sh.lpeak = m, len(m)
	}
	sh.soonest = min(soonest, sh.sweepHolds(now))
}
