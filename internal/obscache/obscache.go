// Package obscache keeps a value for each label set of the observer
// contract: the decision tallies of observe.DecisionCounts, and the
// instruments of the observer adapters (contrib/prometheus, contrib/otel)
// for their other events, so that an event costs a map read and no
// allocation: resolving labels in the metrics library at every event
// (CounterVec.WithLabelValues, a new attribute set) would cost several
// times a memstore Take.
package obscache

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Key is a label set of the observer contract. Every field comes from
// configuration, so the number of keys is bounded.
type Key struct {
	Policy, Route, Store string
}

// Cache maps keys to the values New makes, once per key. Reads take no lock:
// the map is replaced, never changed, when a key is added. The zero value is
// ready to use: its values start as V's zero value.
//
// In front of the map sits a small table indexed by the strings' addresses:
// label values come from configuration, so each event of one label set
// carries the very same strings, and finding them there costs a few
// multiplications and comparisons instead of hashing three strings. A key
// whose strings live elsewhere (built anew for each call) is still found,
// in the map; the table keeps the first keys that claim each of its slots.
type Cache[V any] struct {
	// New makes the value of a key the first time it is asked for; nil
	// makes new(V).
	New func(Key) *V

	fast [fastSlots]atomic.Pointer[entry[V]]
	m    atomic.Pointer[map[Key]*V]
	mu   sync.Mutex // serialises additions
}

const (
	fastBits  = 6
	fastSlots = 1 << fastBits
)

type entry[V any] struct {
	k Key // holds the strings, so their addresses cannot be reused
	v *V
}

// slot returns the table slot of k's strings' addresses and lengths: one
// multiplication. Empty strings at other addresses may land elsewhere,
// which only costs a lookup in the map.
func slot(k Key) int {
	h := (addr(k.Policy) ^ addr(k.Route)<<1 ^ addr(k.Store)<<2) * 0x9e3779b97f4a7c15
	return int(h >> (64 - fastBits))
}

func addr(s string) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.StringData(s)))) + uint64(len(s))
}

// same reports whether a and b are the same strings: of one length at one
// address, so equal (a string's bytes never change).
func same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// Get returns k's value, making it on first use. It is safe for
// simultaneous use, and allocates nothing once k's value is made.
func (c *Cache[V]) Get(k Key) *V {
	f := &c.fast[slot(k)]
	if e := f.Load(); e != nil && same(e.k.Policy, k.Policy) && same(e.k.Route, k.Route) && same(e.k.Store, k.Store) {
		return e.v
	}
	v := c.get(k)
	if f.Load() == nil {
		f.CompareAndSwap(nil, &entry[V]{k, v}) // at most fastSlots allocations, ever
	}
	return v
}

// get finds or makes k's value in the map.
func (c *Cache[V]) get(k Key) *V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	m := make(map[Key]*V, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	var v *V
	if c.New != nil {
		v = c.New(k)
	} else {
		v = new(V)
	}
	m[k] = v
	c.m.Store(&m)
	return v
}

// Range calls f with each key made so far and its value, in no order. It
// takes no lock: keys added meanwhile may be missed.
func (c *Cache[V]) Range(f func(Key, *V)) {
	if m := c.m.Load(); m != nil {
		for k, v := range *m {
			f(k, v)
		}
	}
}
