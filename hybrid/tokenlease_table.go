package hybrid

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ratebucket/ratebucket/algo"
)

// Where Leases keeps its keys: leaseShards shards, chosen by the low bits
// of the key's hash, each with its own mutex. A shard keeps its entries
// (lease, 48 bytes) in chunks of leaseChunk that never move, so a *lease
// stays valid while the shard's lock is released for a primary call, and
// finds them through an open-addressing index of 4-byte slots: an 8-bit
// fragment of the key's hash above the entry's number (+1; 0 is an empty
// slot), linearly probed from the slot named by the hash's top bits.
//
// Why (issue 29): a sync.Map of *lease cost 254 bytes per key, a 128-byte
// lease and 126 of map nodes. Here a key costs its entry (48 B), its index
// slot (4 B over a load of 7/16 to 7/8: 4.6 to 9 B) and its share of its
// chunk's free entries, of the chunk list and of the shards (about 4 B):
// 58.7 B at 10,000 keys (BenchmarkLeasedKeyHeap, index 6.6 B). The index
// is rebuilt from the entries, their keys hashed again, when it doubles
// (more than 7/8 full), and shifts slots back on removal (no tombstones);
// entries freed by a sweep are reused, and a sweep that leaves fewer than a
// quarter of a shard's entries in use moves them to new chunks (compact).
const (
	leaseShards = 64 // a power of two
	// leaseChunk is the entries of a chunk: 384 bytes, a size class. (A
	// chunk of more than 512 bytes with pointers has an 8-byte header: 16
	// entries, 768 bytes, took 896.)
	leaseChunk = 8
	// maxLeaseKey is the longest key leased (its length takes 15 bits);
	// longer keys are passed through.
	maxLeaseKey = 1<<15 - 1
	// refBits is how many bits of an index slot number its entry: at
	// most 1<<refBits − 2 entries per shard.
	refBits = 24
	refMask = 1<<refBits - 1
)

// leaseShard is one lock and the entries whose keys hash to it. Every
// field, and every field of its entries, is guarded by mu. An entry is
// busy while a goroutine that holds it has released mu for a primary call
// (a TakeAtMost or a Refund): the others wait on cond until it is not, so
// a key's takes stay serialized, and a busy entry is never removed.
type leaseShard struct {
	mu     sync.Mutex
	cond   sync.Cond // L is &mu; signalled when an entry stops being busy
	idx    []uint32  // the index: fragment<<refBits | entry number+1, or 0
	shift  uint      // 64 − log2(len(idx)): a hash's home slot is h >> shift
	used   int       // index slots in use: entries held
	chunks []*[leaseChunk]lease
	next   uint32 // entries handed out since the last compact, used or free
	free   uint32 // the first free entry's number+1 (the list runs through left), or 0
	// waiting counts the callers of wait in cond.Wait, who hold an
	// entry's pointer and number across it: compact moves no entry then.
	waiting int
	// base, in ticks (see Leases.qs), is the time the entries' times are
	// relative to; rebase moves it.
	base int64
	_    [64]byte
}

// init readies sh: cond's lock, and an index of 8 slots.
func (sh *leaseShard) init() {
	sh.cond.L = &sh.mu
	sh.idx, sh.shift = make([]uint32, 8), 64-3
}

// at returns entry j of sh.
func (sh *leaseShard) at(j uint32) *lease { return &sh.chunks[j/leaseChunk][j%leaseChunk] }

// fragOf returns the bits of h kept in an index slot (above the shard's
// bits, below the home slot's).
func fragOf(h uint64) uint32 { return uint32(h>>8) & 0xff }

// find returns key's entry and its index slot, or nil. h is key's hash.
func (sh *leaseShard) find(h uint64, key string) (*lease, int) {
	f, m := fragOf(h), len(sh.idx)-1
	for i := int(h >> sh.shift); ; i = (i + 1) & m {
		s := sh.idx[i]
		if s == 0 {
			return nil, 0
		}
		if s>>refBits == f {
			if e := sh.at(s&refMask - 1); e.is(key) {
				return e, i
			}
		}
	}
}

// insert adds an entry for key, which sh must not hold, and returns it,
// or nil when the shard holds all the entries it can number.
func (sh *leaseShard) insert(l *Leases, h uint64, key string) *lease {
	if sh.used+1 > len(sh.idx)-len(sh.idx)/8 {
		sh.resize(l, 2*len(sh.idx))
	}
	var j uint32
	switch {
	case sh.free != 0:
		j = sh.free - 1
		sh.free = uint32(sh.at(j).left)
	case sh.next == refMask-1:
		return nil
	default:
		if sh.next%leaseChunk == 0 {
			sh.chunks = append(sh.chunks, new([leaseChunk]lease))
		}
		j = sh.next
		sh.next++
	}
	e := sh.at(j)
	*e = lease{key: unsafe.Pointer(unsafe.StringData(key)), klen: uint16(len(key)), win: longAgo, t0: longAgo, paused: noPause}
	sh.place(h, j)
	sh.used++
	return e
}

// place puts entry j, whose key's hash is h, in the first empty slot from
// its home on.
func (sh *leaseShard) place(h uint64, j uint32) {
	m := len(sh.idx) - 1
	i := int(h >> sh.shift)
	for sh.idx[i] != 0 {
		i = (i + 1) & m
	}
	sh.idx[i] = fragOf(h)<<refBits | (j + 1)
}

// resize rebuilds the index with size slots (a power of two) from the
// entries.
func (sh *leaseShard) resize(l *Leases, size int) {
	b := uint(0)
	for 1<<b < size {
		b++
	}
	sh.idx, sh.shift = make([]uint32, 1<<b), 64-b
	for j := range sh.next {
		if e := sh.at(j); e.key != nil {
			sh.place(l.hash(e.keyString()), j)
		}
	}
}

// remove frees the entry in index slot i and empties the slot, shifting
// back the slots after it whose probe passed through it, so that every key
// stays reachable from its home without tombstones.
func (sh *leaseShard) remove(l *Leases, i int) {
	j := sh.idx[i]&refMask - 1
	*sh.at(j) = lease{left: int64(sh.free)}
	sh.free = j + 1
	m := len(sh.idx) - 1
	for k := (i + 1) & m; sh.idx[k] != 0; k = (k + 1) & m {
		s := sh.idx[k]
		// s may fill the hole at i unless its home lies after i, on the
		// cyclic way from i to k.
		home := int(l.hash(sh.at(s&refMask-1).keyString()) >> sh.shift)
		if (k-home)&m >= (k-i)&m {
			sh.idx[i], i = s, k
		}
	}
	sh.idx[i] = 0
	sh.used--
}

// hold returns key's entry once no other goroutine holds it busy, made if
// add is set and there is room, or nil. Called with sh.mu held, which it
// may release while it waits.
func (sh *leaseShard) hold(l *Leases, h uint64, key string, add bool) *lease {
	for {
		e, _ := sh.find(h, key)
		if e == nil {
			if !add || key == "" || len(key) > maxLeaseKey {
				return nil
			}
			if l.n.Add(1) > int64(l.cfg.Keys) {
				l.n.Add(-1)
				return nil
			}
			if e = sh.insert(l, h, key); e == nil {
				l.n.Add(-1)
			}
			return e
		}
		if !e.busy() {
			return e
		}
		sh.cond.Wait() // the entry may be swept meanwhile: look again
	}
}

// wait waits until e, an entry of sh, is not busy, and reports whether it
// is still used (it may have been swept and freed meanwhile). Called with
// sh.mu held.
func (sh *leaseShard) wait(e *lease) bool {
	for e.busy() {
		sh.waiting++
		sh.cond.Wait()
		sh.waiting--
	}
	return e.key != nil
}

// compact moves the entries in use to new chunks, in order, and rebuilds
// the index to fit them, when they are fewer than a quarter of the
// entries handed out (and those more than 8 chunks): the memory of keys
// swept is given back, as a Go map never gives it. It moves nothing while
// an entry is busy or a caller of wait waits, since they hold entries'
// pointers; a caller of hold finds its key again after it waits. Called
// by sweep with sh.mu held.
func (sh *leaseShard) compact(l *Leases) {
	if sh.waiting > 0 || sh.next <= 8*leaseChunk || uint32(sh.used) >= sh.next/4 {
		return
	}
	for j := range sh.next {
		if sh.at(j).busy() {
			return
		}
	}
	old, n := sh.chunks, sh.next
	sh.chunks, sh.next, sh.free = nil, 0, 0
	for j := range n {
		if e := &old[j/leaseChunk][j%leaseChunk]; e.key != nil {
			if sh.next%leaseChunk == 0 {
				sh.chunks = append(sh.chunks, new([leaseChunk]lease))
			}
			*sh.at(sh.next) = *e
			sh.next++
		}
	}
	size := 8 // twice what the entries need, as after a doubling
	for 2*sh.used > size-size/8 {
		size *= 2
	}
	sh.resize(l, size)
}

// release makes e, held by the caller, not busy, waking who waits for it,
// and unlocks sh.
func (sh *leaseShard) release(e *lease) {
	e.idle(sh)
	sh.mu.Unlock()
}

// unlocked makes e busy and calls f, a primary call on e's behalf, with
// sh.mu released. Should f panic, e is made not busy and sh.mu is left
// unlocked, so that no key waits for it: the callers hold no defer.
func (sh *leaseShard) unlocked(e *lease, f func()) {
	e.hold()
	sh.mu.Unlock()
	done := false
	defer func() {
		sh.mu.Lock()
		if !done {
			e.idle(sh)
			sh.mu.Unlock()
		}
	}()
	f()
	done = true
}

// Ticks. An entry keeps its times as int32 ticks relative to its shard's
// base; a tick is 1 µs unless Lifetime is above 15 s (Leases.qs). A time
// is meaningful only within a few Lifetimes of now (a window's start, a
// batch's, a pause's end): rebase moves the base to now once now is 2^30
// ticks from it, and a time that no longer fits is kept as the nearest
// that does, which is at least 2^31 ticks, 140 Lifetimes, from now: as
// expired, as idle and as ended as it was.
const (
	longAgo int32 = math.MinInt32 + 1 // a time before any other
	noPause int32 = math.MinInt32     // paused: no pause
)

// ticks returns now in ticks, the shard's base moved if need be. Called
// with sh.mu held.
func (sh *leaseShard) ticks(l *Leases) int64 {
	t := l.cfg.Clock.Now().UnixMicro() >> l.qs // rounded down
	if d := t - sh.base; d >= 1<<30 || d <= -1<<30 {
		sh.rebase(t)
	}
	return t
}

// rebase makes base the shard's base, moving its entries' times.
func (sh *leaseShard) rebase(base int64) {
	for j := range sh.next {
		e := sh.at(j)
		if e.key == nil {
			continue
		}
		e.win, e.t0 = sh.rel(sh.abs(e.win), base), sh.rel(sh.abs(e.t0), base)
		if e.paused != noPause {
			e.paused = sh.rel(sh.abs(e.paused), base)
		}
	}
	sh.base = base
}

// abs returns the time in ticks of an entry's time v.
func (sh *leaseShard) abs(v int32) int64 { return sh.base + int64(v) }

// rel returns the time t (ticks) relative to base, clamped to what an
// entry keeps.
func (sh *leaseShard) rel(t, base int64) int32 {
	return int32(min(max(t-base, int64(longAgo)), math.MaxInt32))
}

// leasePolicies numbers the policies that batches are taken under, so
// that an entry keeps 2 bytes of one. Numbers are never reused: an entry's
// number names the one policy it was given for.
type leasePolicies struct {
	mu  sync.Mutex
	ids map[algo.Policy]uint16
	// tab[i-1] is policy i. Appended to under mu; a reader loads it
	// without a lock, and reads only numbers it was given, which are
	// below its length.
	tab atomic.Pointer[[]algo.Policy]
}

// of returns policy i, or the zero Policy for 0.
func (ps *leasePolicies) of(i uint16) algo.Policy {
	if i == 0 {
		return algo.Policy{}
	}
	return (*ps.tab.Load())[i-1]
}

// id returns p's number, given it if it has none, or 0 when all of
// 65,535 are given.
func (ps *leasePolicies) id(p algo.Policy) uint16 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if i, ok := ps.ids[p]; ok {
		return i
	}
	var tab []algo.Policy
	if t := ps.tab.Load(); t != nil {
		tab = *t
	}
	if len(tab) == math.MaxUint16 {
		return 0
	}
	if ps.ids == nil {
		ps.ids = make(map[algo.Policy]uint16)
	}
	tab = append(tab, p)
	ps.tab.Store(&tab)
	ps.ids[p] = uint16(len(tab))
	return uint16(len(tab))
}

// hash returns key's hash under l's seed (internal/keyhash, as memstore
// hashes).
func (l *Leases) hash(key string) uint64 { return l.seed.String(key) }

// shardOf returns the shard of the key whose hash is h.
func (l *Leases) shardOf(h uint64) *leaseShard { return &l.shards[h&(leaseShards-1)] }

// busyBit is the bit of lease.klen that says the entry is busy.
const busyBit = 1 << 15

// is reports whether e is key's entry.
func (e *lease) is(key string) bool {
	return int(e.klen&^busyBit) == len(key) && (e.key == unsafe.Pointer(unsafe.StringData(key)) || e.keyString() == key)
}

// keyString returns e's key.
func (e *lease) keyString() string { return unsafe.String((*byte)(e.key), int(e.klen&^busyBit)) }

// busy reports whether a goroutine holds e for a primary call.
func (e *lease) busy() bool { return e.klen&busyBit != 0 }

// hold marks e busy: the caller is about to release its shard's lock for
// a primary call on e's behalf.
func (e *lease) hold() { e.klen |= busyBit }

// idle marks e not busy, if it was, and wakes who waits on sh.
func (e *lease) idle(sh *leaseShard) {
	if e.busy() {
		e.klen &^= busyBit
		sh.cond.Broadcast()
	}
}
