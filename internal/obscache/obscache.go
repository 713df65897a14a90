// Package obscache keeps the instruments of each label set for the
// observer adapters (contrib/prometheus, contrib/otel, the demo's /metrics),
// so that an event costs a map read and no allocation: resolving labels in
// the metrics library at every event (CounterVec.WithLabelValues, a new
// attribute set) would cost several times a memstore Take.
package obscache

import (
	"sync"
	"sync/atomic"
)

// Key is a label set of the observer contract. Every field comes from
// configuration, so the number of keys is bounded.
type Key struct {
	Policy, Route, Store string
}

// Cache maps keys to the values New makes, once per key. Reads take no lock:
// the map is replaced, never changed, when a key is added. The zero value is
// not usable: set New.
type Cache[V any] struct {
	// New makes the value of a key the first time it is asked for.
	New func(Key) *V

	m  atomic.Pointer[map[Key]*V]
	mu sync.Mutex // serialises additions
}

// Get returns k's value, making it on first use. It is safe for
// simultaneous use.
func (c *Cache[V]) Get(k Key) *V {
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
	v := c.New(k)
	m[k] = v
	c.m.Store(&m)
	return v
}
