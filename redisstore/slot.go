package redisstore

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/internal/clusterslot"
	"github.com/ratebucket/ratebucket/store"
)

// router says how the client spreads keys, for the multi-key check.
type router int

const (
	single  router = iota // one server: any keys go together
	cluster               // Redis Cluster: keys must share a hash slot
	ring                  // Ring: keys must share a hash tag
)

func routerOf(c redis.UniversalClient) router {
	switch c.(type) {
	case *redis.ClusterClient:
		return cluster
	case *redis.Ring:
		return ring
	}
	return single
}

// sameSlot returns an error matching store.ErrNotTogether when the keys of
// reqs (after prefix) cannot run in one script on this client.
func (r router) sameSlot(prefix string, reqs []store.Request) error {
	if r == single || len(reqs) < 2 {
		return nil
	}
	first := prefix + reqs[0].Key
	for i := 1; i < len(reqs); i++ {
		k := prefix + reqs[i].Key
		switch {
		case r == cluster && Slot(k) != Slot(first):
			return fmt.Errorf("redisstore: keys %q (slot %d) and %q (slot %d) are in different cluster slots: %w; make them with store.GroupKey and one group (a hash tag such as {user:42})",
				first, Slot(first), k, Slot(k), store.ErrNotTogether)
		case r == ring && clusterslot.HashTag(k) != clusterslot.HashTag(first):
			return fmt.Errorf("redisstore: keys %q and %q do not share a hash tag, so a Ring may shard them apart: %w; make them with store.GroupKey and one group",
				first, k, store.ErrNotTogether)
		}
	}
	return nil
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag modulo 16384, as the Redis Cluster specification defines.
func Slot(key string) int { return clusterslot.Of(key) }

// registries names the policy registry (WIRE.md, "Policy changes") of
// each bucket: a hash that a script call may touch with the bucket, so on
// Redis Cluster one per hash slot, in that slot. Its name is "pol:",
// the prefix, then on a cluster a hash tag chosen for the slot.
type registries struct {
	one regName // a single server's registry, or each Ring shard's (one name)
	// A cluster's, by slot, each named on the first call that needs it:
	// a store touches the slots of its keys only, and naming all 16,384 up
	// front cost a new store 32k allocations (1.5 MB) before its first call.
	slots []atomic.Pointer[regName]
	base  string
}

// regName is a registry's name, and the same as bytes for the script
// call's argument (written), made once so that a call allocates none.
type regName struct {
	s string
	b []byte
}

func newRegistries(r router, prefix string) registries {
	base := "pol:" + prefix
	if r == cluster {
		return registries{base: base, slots: make([]atomic.Pointer[regName], clusterslot.Count)}
	}
	return registries{one: regName{base, []byte(base)}}
}

// key returns the registry of the bucket at Redis key bucket, and its name
// as bytes.
func (rg *registries) key(bucket string) (string, []byte) {
	if rg.slots == nil {
		return rg.one.s, rg.one.b
	}
	sl := Slot(bucket)
	n := rg.slots[sl].Load()
	if n == nil {
		// Two first calls may both name it: the same name, either kept.
		s := rg.base + "{" + slotTags()[sl] + "}"
		n = &regName{s, []byte(s)}
		rg.slots[sl].Store(n)
	}
	return n.s, n.b
}

// slotTags returns, for each cluster slot, the shortest base-36 number
// (the first found, counting up) whose CRC16 lands in it: a hash tag that
// puts a key in that slot. About 170,000 checksums, computed once.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, clusterslot.Count)
	for i, left := int64(0), clusterslot.Count; left > 0; i++ {
		tag := strconv.FormatInt(i, 36)
		if sl := clusterslot.Of(tag); tags[sl] == "" {
			tags[sl] = tag
			left--
		}
	}
	return tags
})
