package hybrid

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/internal/keyhash"
)

// boundCache is a fixed-size map from key to bound, split into shards that
// each hold at most perShard entries behind their own mutex. When a shard is
// full, a CLOCK hand (second chance) picks the victim: a dead or idle entry
// (one that can no longer deny anything) first, else the first entry not
// looked up since the hand last passed it. Evicting only loses the savings
// an entry would have brought, never correctness: a key without an entry is
// sent to the primary.
type boundCache struct {
	seed   keyhash.Seed
	mask   uint64
	shards []cacheShard
}

type cacheShard struct {
	mu        sync.Mutex
	idx       map[string]int32
	slots     []slot
	hand      int
	cap       int
	evictions int64
	_         [64]byte // keep shards' mutexes on separate cache lines
}

type slot struct {
	key  string
	b    bound
	ref  bool // looked up since the hand last passed
	live bool
}

// newBoundCache returns a cache of at most size entries over shards shards
// (rounded up to a power of two; size is spread evenly, at least 1 each).
func newBoundCache(size, shards int) *boundCache {
	n := 1
	for n < shards {
		n <<= 1
	}
	per := max(1, (size+n-1)/n)
	c := &boundCache{seed: keyhash.New(), mask: uint64(n - 1), shards: make([]cacheShard, n)}
	for i := range c.shards {
		c.shards[i].idx = make(map[string]int32)
		c.shards[i].cap = per
	}
	return c
}

func (c *boundCache) shard(key string) *cacheShard {
	return &c.shards[c.seed.String(key)&c.mask]
}

// get returns the bound kept for key.
func (c *boundCache) get(key string) (bound, bool) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.idx[key]
	if !ok {
		return bound{}, false
	}
	s.slots[i].ref = true
	return s.slots[i].b, true
}

// put keeps b for key unless the entry there was learnt from a later call
// (answers of concurrent calls may arrive out of order; the one started last
// saw the most), or b's call started before the latest forget (compared
// under the lock, so that a forget's drop cannot come between the check
// and the put). A key without an entry gets one only if insert is true.
// now and margin let eviction recognise idle entries.
func (c *boundCache) put(key string, b bound, now time.Time, margin int64, insert bool, forgot *atomic.Uint64) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.seq <= forgot.Load() {
		return
	}
	if i, ok := s.idx[key]; ok {
		if b.seq > s.slots[i].b.seq {
			s.slots[i].b = b
		}
		return
	}
	if !insert {
		return
	}
	if len(s.slots) < s.cap {
		s.idx[key] = int32(len(s.slots))
		s.slots = append(s.slots, slot{key: key, b: b, live: true})
		return
	}
	// Two turns of the hand always find a victim: the first clears every
	// ref bit it passes.
	for {
		v := &s.slots[s.hand]
		if v.live && v.ref && !idle(&v.b, now, margin) {
			v.ref = false
			s.hand = (s.hand + 1) % len(s.slots)
			continue
		}
		if v.live {
			delete(s.idx, v.key)
			s.evictions++
		}
		*v = slot{key: key, b: b, live: true}
		s.idx[key] = int32(s.hand)
		s.hand = (s.hand + 1) % len(s.slots)
		return
	}
}

// drop forgets key, if kept.
func (c *boundCache) drop(key string) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.idx[key]; ok {
		delete(s.idx, key)
		s.slots[i] = slot{}
	}
}

// update applies f to key's bound, if kept, under the shard's lock.
func (c *boundCache) update(key string, f func(b *bound)) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.idx[key]; ok {
		f(&s.slots[i].b)
	}
}

// dropLocal forgets every bound charged locally.
func (c *boundCache) dropLocal() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for j := range s.slots {
			if v := &s.slots[j]; v.live && v.b.local {
				delete(s.idx, v.key)
				*v = slot{}
			}
		}
		s.mu.Unlock()
	}
}

// clear forgets every key.
func (c *boundCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.idx)
		s.slots, s.hand = s.slots[:0], 0
		s.mu.Unlock()
	}
}

// stats returns the number of entries and evictions so far.
func (c *boundCache) stats() (entries int, evictions int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		entries += len(s.idx)
		evictions += s.evictions
		s.mu.Unlock()
	}
	return entries, evictions
}

// idle reports whether b can no longer deny any request at now.
func idle(b *bound, now time.Time, margin int64) bool {
	_, eff := b.elapsed(now, margin)
	return eff >= b.IdleAfter()
}
