package memstore

import (
	"math"
	"sync"

	"github.com/ratebucket/ratebucket/algo"
)

// minSweep is the size below which a shard never sweeps: a sweep of a
// small map would cost more than the memory it frees. Tests lower it.
const minSweep = 1024

// entry is one bucket: its key, its state and the time (µs) from which it
// is idle, kept so that a sweep need not know the bucket's policy. A lease
// key's entry (lease.go) has its leases in ls and the same idle time: its
// last lease's expiry.
type entry struct {
	key  string
	s    algo.State
	idle int64
	next *entry    // the next bucket whose key has the same hash (rare)
	ls   *leaseSet // a lease key's leases (lease.go); nil for a bucket
}

// shard is one lock and the buckets whose keys hash to it. All fields are
// guarded by mu; m is nil once the store is closed.
//
// The map is keyed by the key's maphash, the one that chose the shard, so
// a Take hashes its key once (a map[string] would hash it again). Measured
// against map[string]*entry (bench/, pinned to one core, old and new
// binaries alternated, n=6): 100k distinct keys 138 -> 120 ns, hot key
// 67 -> 62 ns, for 88 instead of 67 bytes of heap per bucket. Distinct keys
// whose 64-bit hashes collide share a map slot and chain through
// entry.next.
type shard struct {
	mu      sync.Mutex
	m       map[uint64]*entry // by pointer: a Take updates its bucket in place, with one map lookup
	n       int               // buckets held: len(m) plus the chained ones
	next    int               // a new key at this size triggers room's sweep check
	peak    int               // largest size since m was made
	soonest int64             // no bucket is idle before this (a lower bound, µs)
	credit  int               // at the limit, refusals left before another sweep
	floor   int               // minSweep, or less in tests

	pols map[algo.Policy]int64 // a cache of policy numbers (policychange.go)
	_    [64]byte
}

func (sh *shard) init(limit, floor int) {
	sh.m = make(map[uint64]*entry)
	sh.floor = floor
	sh.next = min(limit, floor)
}

// get returns the bucket of key, whose hash is h, or nil.
func (sh *shard) get(h uint64, key string) *entry {
	e := sh.m[h]
	for e != nil && e.key != key {
		e = e.next
	}
	return e
}

// set stores a bucket: in place when e is the key's entry, else as a new
// entry.
func (sh *shard) set(h uint64, key string, e *entry, s algo.State, idle int64) {
	if e != nil {
		e.s, e.idle = s, idle
	} else {
		sh.m[h] = &entry{key: key, s: s, idle: idle, next: sh.m[h]}
		sh.n++
		sh.peak = max(sh.peak, sh.n)
	}
	sh.soonest = min(sh.soonest, idle)
}

// del removes e, the bucket of a key whose hash is h.
func (sh *shard) del(h uint64, e *entry) {
	head := sh.m[h]
	switch {
	case head == e && e.next == nil:
		delete(sh.m, h)
	case head == e:
		sh.m[h] = e.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	sh.n--
}

// room reports whether the shard, holding at most limit buckets, may store
// one more at time now. It sweeps first when the shard has grown to its
// threshold and some bucket may be idle; at the limit, it sweeps at most
// once per n/16 refusals so that a flood of new keys costs O(1) each.
func (sh *shard) room(now int64, limit int) bool {
	n := sh.n
	if n < sh.next {
		return true
	}
	if now >= sh.soonest && (n < limit || sh.credit <= 0) {
		sh.sweep(now)
		if n >= limit {
			sh.credit = n / 16
		}
		n = sh.n
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
	for h, e := range sh.m {
		if e.next == nil { // the usual slot: one bucket
			if e.idle <= now {
				delete(sh.m, h)
				sh.n--
			} else {
				soonest = min(soonest, e.idle)
			}
			continue
		}
		var live *entry // the chain's buckets still refilling
		for e != nil {
			next := e.next
			if e.idle <= now {
				sh.n--
			} else {
				e.next, live = live, e
				soonest = min(soonest, e.idle)
			}
			e = next
		}
		if live == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = live
		}
	}
	sh.soonest = soonest
	if sh.peak > sh.floor && sh.n < sh.peak/4 {
		m := make(map[uint64]*entry, 2*len(sh.m))
		for h, e := range sh.m {
			m[h] = e
		}
		sh.m, sh.peak = m, sh.n
	}
}
