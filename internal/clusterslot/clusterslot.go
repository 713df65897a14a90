// Package clusterslot computes the Redis Cluster hash slot of a key, as
// the Redis Cluster specification defines it: CRC16 (XMODEM) of the key's
// hash tag, modulo 16384. One definition for redisstore (which exports it
// as redisstore.Slot) and sim (whose sharded stores route keys as a
// Cluster client does, without importing go-redis).
//
// A hash tag is the text between a key's first "{" and the first "}"
// after it, when that is not empty; otherwise the whole key is hashed:
//
//	Of("{user:42}:burst") == Of("user:42") // both hash "user:42"
package clusterslot

import "strings"

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Of returns the hash slot of key, in [0, Count).
func Of(key string) int { return int(crc16(HashTag(key)) % Count) }

// HashTag returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the first "}" after it, when that is not
// empty; otherwise the whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0).
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
