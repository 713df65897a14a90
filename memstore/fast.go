package memstore

import (
	"sync/atomic"
	"unsafe"

	"github.com/ratebucket/ratebucket/algo"
)

// takeFast is Take on a key whose bucket exists and was written under p,
// without the shard's lock: it locks the key's slot alone (the locked bit
// of its meta word, see slot) and updates the bucket in place. It reports
// false, having changed nothing, whenever the shard's lock is held (at
// the start, or once the slot is locked: the holder may be moving slots),
// the key is not found, its slot is locked by another Take, the bucket was
// written under another policy, the call is invalid, or the bucket is full
// again (which removes the key): the caller then takes the shard's lock
// and does it all there, at the same now.
//
// Why (bench/HISTORY.md, "Where the time goes"): from two goroutines over 100k keys, a
// Take under the shard's lock paid for two cache lines moving between
// cores, the lock's and the bucket's; without the lock writes at all
// (a scratch build, racy) the parallel Take went from 92 to 53 ns. A Take
// here writes only the slot's line, which it had to write anyway: the
// shard's lines (its flag, its table's view) are read, and stay shared
// while nothing takes the lock.
func (s *Store) takeFast(sh *shard, h uint64, key string, p algo.Policy, now, cost int64, res *algo.Result) bool {
	if !s.fast.Load() || sh.mu.held.Load() {
		return false
	}
	v := sh.b.view.Load()
	if hook != nil {
		hook("fast: view read")
	}
	meta := metaOf(h, key)
	base, mask := unsafe.Pointer(unsafe.SliceData(v.slots)), uint64(len(v.slots)-1)
	var sl *slot[bucket]
	for i, n := h>>(v.shift&63), uint64(0); ; i, n = i+1, n+1 {
		if n > mask {
			return false // every slot probed: a retired array, all moved
		}
		sl = (*slot[bucket])(unsafe.Add(base, uintptr(i&mask)*unsafe.Sizeof(slot[bucket]{})))
		m := sl.load()
		if m == meta {
			if !atomic.CompareAndSwapUint64(&sl.meta, meta, meta|locked) {
				return false // locked by another Take, or changed
			}
			break
		}
		if m == 0 || m&^locked == meta || m == moved {
			return false // not here; locked by another Take; a retired array
		}
	}
	// The slot is ours. A holder of the shard's lock may have come first:
	// it may be moving slots, this one too, so leave the slot as it is
	// now (unlock it only if its meta word is still ours: the holder may
	// have rewritten it). So does a Take that finds lock-free Takes turned
	// off (lockedOnly): its holders no longer set the flag.
	if sh.mu.held.Load() || !s.fast.Load() {
		atomic.CompareAndSwapUint64(&sl.meta, meta|locked, meta)
		if hook != nil {
			hook("fast: left to the lock")
		}
		return false
	}
	// From here on no holder of the shard's lock touches the slot before
	// it is unlocked (it waits for it to be free).
	if hook != nil {
		hook("fast: passed the lock's check")
	}
	if sl.key != unsafe.Pointer(unsafe.StringData(key)) && keyOf(sl) != key {
		sl.set(meta) // another key with the same meta word
		return false
	}
	prev := sl.v.state()
	if !s.pols.is(prev.Prev, p) {
		sl.set(meta)
		return false
	}
	st, err := algo.TokenBucket{}.TakeTo(res, p, prev, now, cost)
	if err != nil || (st.Level == 0 && st.Stamp <= now) {
		sl.set(meta) // the error, or the removal, is the locked path's
		return false
	}
	sl.v = pack(st)
	sl.set(meta)
	return true
}

// lockedOnly turns the lock-free Take off for good, for s and the views
// that share its shards: once it returns, no Take holds a slot without
// its shard's lock, and the shards' holders stop setting their flag.
// CountTakes calls it, since an observed Take counts under the shard's
// lock, and the flag's two locked instructions per holding cost an
// observed hot-key Take 16% (bench/HISTORY.md, "Observing").
func (s *Store) lockedOnly() {
	if !s.fast.Swap(false) {
		return
	}
	// A Take that locked a slot after the Swap sees fast off and leaves
	// it; one that had passed its checks before holds its slot until it
	// is done: wait for every slot to be free.
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j := range sh.b.slots {
			sh.b.slots[j].free()
		}
		sh.mu.Unlock()
	}
}

// hook, when tests set it, is called at the named points of the
// lock-free Take, of table.remove and of slot.free, so that a test can hold one
// goroutine there while another changes the table: the interleavings a
// stress test would hit once in millions of runs, made on purpose. It is
// nil outside tests.
var hook func(at string)
