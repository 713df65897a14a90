package memstore

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/ratebucket/ratebucket/algo"
)

// table is a shard's buckets: an open-addressing hash table of its own,
// with linear probing and no separate object per bucket. Each slot holds
// a pointer to its key's bytes, a meta word (the top 32 bits of the key's
// hash above the key's length) and the value inline; for the token bucket
// (V = bucket) a slot is 32 bytes, two to a cache line.
//
// Why not a Go map (bench/HISTORY.md, "Where the time goes"): with
// map[uint64]*entry a bucket cost 88 B (a 64-byte entry plus ~24 B of
// map slot) and a Take on an existing key spent half its time in the map
// lookup and the dependent load of the separately allocated entry. A map
// holding the state inline (map[uint64][2]int64, 35 B) returns values by
// copy, so an update needs a second probe (51 ns against 38 in a scratch
// benchmark). This table returns a pointer to the slot: one probe, the
// key, the hash fragment and the state in the same cache line, updated in
// place. The slot index is the hash's top bits (the low ones chose the
// shard), so a slot's home is known from its meta word alone, which lets
// deletion shift the following slots back (no tombstones, probes stay
// short) and growth re-insert without rehashing keys. Keys are compared
// byte for byte whenever the meta word matches (equal pointers
// short-circuit), so two distinct keys never share a bucket.
//
// The table doubles when it would be more than 7/8 full, so it is between
// 7/16 and 7/8 full: 37 to 73 B per token bucket, 42 B at bench/'s 100k
// keys over 8 or 64 shards (12.5k or 1.6k keys in 16k or 2k slots).
// A sweep that leaves it under a quarter of its peak shrinks it.
type table[V any] struct {
	slots []slot[V]
	shift uint // 64 − log2(len(slots)): a hash's home slot is h >> shift
	n     int  // slots in use
	peak  int  // the largest n since the table last shrank
	// view is slots and shift for the lock-free Take (fast.go), which
	// reads them without the shard's lock: set by init, after which a
	// resize has marked every used slot of the old array moved.
	view atomic.Pointer[view[V]]
}

// view is a table's array as the lock-free Take reads it.
type view[V any] struct {
	slots []slot[V]
	shift uint
}

// slot is one key's entry in a table. meta is 0 in an empty slot, never
// in a used one (keys are not empty).
//
// meta is also the slot's lock (fast.go): its bit locked (bit 31, above
// the key's length) is set, with a compare-and-swap, by a Take that
// updates the slot without the shard's lock, and cleared when it is done.
// meta is therefore read and written atomically everywhere; key and v are
// written only by a holder of the shard's lock, or by the holder of the
// slot's bit. A holder of the shard's lock waits for the bit to clear
// (free) before it reads v or moves the slot.
type slot[V any] struct {
	key  unsafe.Pointer // the key's bytes (nil when empty)
	meta uint64         // the key's hash's top 32 bits << 32 | its length; bit 31: locked
	v    V
}

// locked is the bit of a slot's meta word that a lock-free Take holds;
// moved, a meta word no key has, marks a used slot of an array that a
// resize or a close left behind: its lock never clears.
const (
	locked uint64 = 1 << 31
	moved         = locked
)

// load returns sl's meta word, with its locked bit.
func (sl *slot[V]) load() uint64 { return atomic.LoadUint64(&sl.meta) }

// free waits until no lock-free Take holds sl and returns its meta word
// (without the locked bit, which is then clear). Only a holder of the
// shard's lock calls it; a Take holds the bit for a few dozen
// nanoseconds, or yields it at once when it finds the shard's lock held.
func (sl *slot[V]) free() uint64 {
	for spins := 0; ; spins++ {
		if m := sl.load(); m&locked == 0 {
			return m
		}
		if spins == 0 && hook != nil {
			hook("free: waiting")
		}
		if spins >= 64 {
			runtime.Gosched() // its holder may have been descheduled
		}
	}
}

// set writes sl's meta word: by a holder of the shard's lock, once sl is
// free, or by the lock-free Take that holds sl, to unlock it.
func (sl *slot[V]) set(m uint64) { atomic.StoreUint64(&sl.meta, m) }

// minSlots is the size of a new table.
const minSlots = 8

// maxKeyBytes is the longest key a table holds: its length must fit in the
// low 31 bits of the meta word, below the locked bit. (Store clamps
// MaxKeyLen to it.)
const maxKeyBytes = 1<<31 - 1

// metaOf returns the meta word of key, whose hash is h.
func metaOf(h uint64, key string) uint64 { return h&^(1<<32-1) | uint64(len(key)) }

// keyOf returns the key held in the used slot sl.
func keyOf[V any](sl *slot[V]) string {
	return *(*string)(unsafe.Pointer(&struct {
		p unsafe.Pointer
		n int
	}{sl.key, int(uint32(sl.load() &^ locked))}))
}

// init gives t a new empty array of size slots (rounded up to a power
// of two) and publishes it to the lock-free Take.
func (t *table[V]) init(size int) {
	t.alloc(size)
	t.publish()
}

// publish makes t's array the one the lock-free Take reads.
func (t *table[V]) publish() { t.view.Store(&view[V]{t.slots, t.shift}) }

// alloc gives t a new empty array of size slots, rounded up to a power of
// two, not yet published (see init).
func (t *table[V]) alloc(size int) {
	b := uint(0)
	for 1<<b < size {
		b++
	}
	t.slots, t.shift = make([]slot[V], 1<<b), 64-b
}

// retire marks every used slot of old moved, once each is free: a
// lock-free Take that read the old array finds nothing it can lock there,
// and takes the shard's lock instead.
func retire[V any](old []slot[V]) {
	for i := range old {
		if old[i].free() != 0 {
			old[i].set(moved)
		}
	}
}

// home returns the slot at which a probe for a key whose hash is h
// starts. Take checks it before calling find: when it holds the very
// bytes of the key (a caller that keeps its key strings, or a hot key),
// the same pointer and length are the same key, and find is not called.
func (t *table[V]) home(h uint64) *slot[V] {
	i := (h >> (t.shift & 63)) & uint64(len(t.slots)-1)
	return (*slot[V])(unsafe.Add(unsafe.Pointer(unsafe.SliceData(t.slots)), uintptr(i)*unsafe.Sizeof(slot[V]{})))
}

// holds reports whether the used slot sl holds key's very bytes (not
// only equal ones).
func (sl *slot[V]) holds(key string) bool {
	return sl.key == unsafe.Pointer(unsafe.StringData(key)) && uint32(sl.load()&^locked) == uint32(len(key))
}

// find returns key's slot, free (see slot), or nil. h is the key's hash.
//
// The loop compares only meta words; the key's bytes are compared once a
// meta word matches, and not at all when the slot points at the very
// bytes of key (a caller that keeps its key strings). The slots are
// indexed without bounds checks: i&m < len(t.slots).
func (t *table[V]) find(h uint64, key string) *slot[V] {
	meta := metaOf(h, key)
	kp := unsafe.Pointer(unsafe.StringData(key))
	base, m := unsafe.Pointer(unsafe.SliceData(t.slots)), uint64(len(t.slots)-1)
	for i := h >> (t.shift & 63); ; i++ {
		sl := (*slot[V])(unsafe.Add(base, uintptr(i&m)*unsafe.Sizeof(slot[V]{})))
		if mm := sl.load() &^ locked; mm == meta {
			if sl.key == kp || keyOf(sl) == key {
				sl.free()
				return sl
			}
		} else if mm == 0 {
			return nil
		}
	}
}

// insert adds key, which must not be in the table, with value v, growing
// the table first if it would be more than 7/8 full; it returns the slot,
// valid until the table next changes. h is the key's hash.
func (t *table[V]) insert(h uint64, key string, v V) *slot[V] {
	if t.n+1 > len(t.slots)-len(t.slots)/8 {
		t.resize(2 * len(t.slots))
	}
	t.n++
	t.peak = max(t.peak, t.n)
	return t.place(unsafe.Pointer(unsafe.StringData(key)), metaOf(h, key), v)
}

// place puts a key (its bytes, its meta word) and its value in the first
// empty slot from its home on and returns it. An empty slot is never
// locked: its meta word is published last.
func (t *table[V]) place(key unsafe.Pointer, meta uint64, v V) *slot[V] {
	m := uint64(len(t.slots) - 1)
	for i := meta >> t.shift; ; i++ {
		if sl := &t.slots[i&m]; sl.load() == 0 {
			sl.key, sl.v = key, v
			sl.set(meta)
			return sl
		}
	}
}

// resize moves every key to a new array of size slots (a power of two
// that holds them), and retires the old one.
func (t *table[V]) resize(size int) {
	old := t.slots
	t.alloc(size)
	for i := range old {
		if m := old[i].free(); m != 0 {
			t.place(old[i].key, m, old[i].v)
		}
	}
	retire(old)
	t.publish()
}

// index returns the position of the slot sl of t.
func (t *table[V]) index(sl *slot[V]) uint64 {
	return uint64((uintptr(unsafe.Pointer(sl)) - uintptr(unsafe.Pointer(&t.slots[0]))) / unsafe.Sizeof(*sl))
}

// remove empties the used slot sl, shifting back the slots after it whose
// probe passed through it, so that every key stays reachable from its home
// without tombstones. Slots other than sl may move.
//
// Each slot is free before it is read or moved (see slot), and a moved
// key's meta word is written after its key and value: a lock-free Take
// finds a key at its old place or its new one, or not at all and then
// takes the shard's lock.
func (t *table[V]) remove(sl *slot[V]) {
	m := uint64(len(t.slots) - 1)
	i := t.index(sl)
	t.slots[i].free()
	for j := i; ; {
		j = (j + 1) & m
		next := &t.slots[j]
		nm := next.free()
		if nm == 0 {
			break
		}
		// next may fill the hole at i unless its home lies after i, on
		// the cyclic way from i to j.
		if (j-nm>>t.shift)&m >= (j-i)&m {
			t.slots[i].key, t.slots[i].v = next.key, next.v
			if hook != nil {
				hook("remove: slot copied")
			}
			t.slots[i].set(nm)
			i = j
		}
	}
	t.slots[i].set(0)
	t.slots[i].key, t.slots[i].v = nil, *new(V)
	t.n--
}

// sweep removes every slot whose idle time (µs, as idle reports it) is
// at most now and returns the least idle time of the others, or
// math.MaxInt64 for none; then, if the table has shrunk below a quarter of
// its peak and that peak is above floor, it moves to an array of twice
// the size its keys need (Go's maps never release memory; this table
// does). idle is called with each used slot, possibly twice with one; it
// must not change the table.
func (t *table[V]) sweep(floor int, idle func(*slot[V]) int64, now int64) int64 {
	soonest := int64(1<<63 - 1)
	if t.n > 0 {
		m := uint64(len(t.slots) - 1)
		// Start after an empty slot, so that no cluster of used slots
		// wraps around the scan's start: removing the slot at i shifts
		// back only slots of its own cluster, at i and after it, which
		// the scan has yet to see.
		start := uint64(0)
		for t.slots[start].load() != 0 {
			start++
		}
		for k := uint64(1); k <= m+1; {
			sl := &t.slots[(start+k)&m]
			if sl.free() == 0 {
				k++
				continue
			}
			if at := idle(sl); at > now {
				soonest = min(soonest, at)
				k++
				continue
			}
			t.remove(sl) // sl now holds the next slot of its cluster, if any: look again
		}
	}
	if t.peak > floor && t.n < t.peak/4 {
		t.resize(max(minSlots, sizeFor(2*t.n)))
		t.peak = t.n
	}
	return soonest
}

// sizeFor returns the power of two that holds n keys at most 7/8 full.
func sizeFor(n int) int {
	size := minSlots
	for n > size-size/8 {
		size *= 2
	}
	return size
}

// bucket is a token bucket's algo.State, packed in two words. Level and
// Stamp take 54 bits each: a token bucket's Level is at most 2·full ≤
// 2^53 (algo.MaxLevel; a debt of one full bucket), a calendar quota's is
// its count, at most its capacity; a Stamp is a time up to algo.MaxTime
// (2^53−1), or a calendar quota's period end, at most 33 days past it.
// Prev, the bucket's policy number (policychange.go, at most MaxPolicies
// = 2^16), takes the other 20 bits: its low 10 above the Level, its high
// 10 above the Stamp.
type bucket [2]uint64

const (
	fieldBits = 54
	fieldMask = 1<<fieldBits - 1
)

// pack returns st as a bucket. A Level beyond 54 bits (which no operation
// returns) is kept as the largest that fits: the token bucket reads every
// level above 2·full as 2·full.
func pack(st algo.State) bucket {
	lv := min(uint64(st.Level), fieldMask)
	return bucket{lv | uint64(st.Prev)<<fieldBits, uint64(st.Stamp)&fieldMask | uint64(st.Prev)>>(64-fieldBits)<<fieldBits}
}

// state returns the algo.State b holds.
func (b *bucket) state() algo.State {
	return algo.State{Level: int64(b[0] & fieldMask), Stamp: int64(b[1] & fieldMask), Prev: b.policy()}
}

// policy returns the bucket's policy number, its state's Prev.
func (b *bucket) policy() int64 {
	return int64(b[0]>>fieldBits | b[1]>>fieldBits<<(64-fieldBits))
}

// wide is a slot's value under an algorithm other than the token bucket
// (the windows, for the simulator): the whole State, whose Prev the
// sliding window uses, and the time from which it is idle, since its
// policy is not recorded.
type wide struct {
	st   algo.State
	idle int64
}
