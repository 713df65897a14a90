package redisstore

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

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
		case r == ring && hashTag(k) != hashTag(first):
			return fmt.Errorf("redisstore: keys %q and %q do not share a hash tag, so a Ring may shard them apart: %w; make them with store.GroupKey and one group",
				first, k, store.ErrNotTogether)
		}
	}
	return nil
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag modulo 16384, as the Redis Cluster specification defines.
func Slot(key string) int { return int(crc16(hashTag(key)) % 16384) }

// hashTag returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the first "}" after it, when that is not
// empty; otherwise the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
