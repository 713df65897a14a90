package memstore

import (
	"math"
	"sync"

	"github.com/ratebucket/ratebucket/algo"
)

// minSweep is the size below which a shard never sweeps: a sweep of a
// small map would cost more than the memory it frees. Tests lower it.
const minSweep = 1024

// entry is one bucket: its state and the time (µs) from which it is idle,
// kept so that a sweep need not know the bucket's policy.
type entry struct {
	s    algo.State
	idle int64
}

// shard is one lock and the buckets whose keys hash to it. All fields are
// guarded by mu; m is nil once the store is closed.
type shard struct {
	mu      sync.Mutex
	m       map[string]*entry // by pointer: a Take updates its bucket in place, with one map lookup
	next    int               // a new key at this size triggers room's sweep check
	peak    int               // largest size since m was made
	soonest int64             // no bucket is idle before this (a lower bound, µs)
	credit  int               // at the limit, refusals left before another sweep
	floor   int               // minSweep, or less in tests
	_       [64]byte
}

func (sh *shard) init(limit, floor int) {
	sh.m = make(map[string]*entry)
	sh.floor = floor
	sh.next = min(limit, floor)
}

// set stores a bucket: in place when e is the key's entry, else as a new
// entry.
func (sh *shard) set(key string, e *entry, s algo.State, idle int64) {
	if e != nil {
		e.s, e.idle = s, idle
	} else {
		sh.m[key] = &entry{s: s, idle: idle}
		sh.peak = max(sh.peak, len(sh.m))
	}
	sh.soonest = min(sh.soonest, idle)
}

// room reports whether the shard, holding at most limit buckets, may store
// one more at time now. It sweeps first when the shard has grown to its
// threshold and some bucket may be idle; at the limit, it sweeps at most
// once per n/16 refusals so that a flood of new keys costs O(1) each.
func (sh *shard) room(now int64, limit int) bool {
	n := len(sh.m)
	if n < sh.next {
		return true
	}
	if now >= sh.soonest && (n < limit || sh.credit <= 0) {
		sh.sweep(now)
		if n >= limit {
			sh.credit = n / 16
		}
		n = len(sh.m)
	}
	if n < limit {
		sh.next = min(limit, max(sh.floor, 2*n))
		return true
	}
	sh.credit--
	return false
}

// sweep deletes every bucket idle at now, and rebuilds the map when it has
// shrunk below a quarter of its peak (Go maps never release buckets).
func (sh *shard) sweep(now int64) {
	soonest := int64(math.MaxInt64)
	for k, e := range sh.m {
		if e.idle <= now {
			delete(sh.m, k)
		} else {
			soonest = min(soonest, e.idle)
		}
	}
	sh.soonest = soonest
	if n := len(sh.m); sh.peak > sh.floor && n < sh.peak/4 {
		m := make(map[string]*entry, 2*n)
		for k, e := range sh.m {
			m[k] = e
		}
		sh.m, sh.peak = m, n
	}
}
