// Package keyhash hashes keys for ratebucket's in-process tables
// (memstore's buckets, hybrid's token leases, DenyCache's shards): the
// result of hash/maphash.String under a random seed, reached in fewer
// instructions.
package keyhash

import (
	"hash/maphash"
	"unsafe"
)

// memhash is the runtime's hash of memory, AES-based where the CPU has
// AES instructions: the function behind hash/maphash.String, which
// reaches it through three calls and a seed check (41 instructions per
// memstore Take on a 20-byte key under callgrind, against memhash's 29).
// The runtime keeps it linkable for packages that call it directly (see
// go.dev/issue/67401).
//
//go:linkname memhash runtime.memhash
//go:noescape
func memhash(p unsafe.Pointer, h, s uintptr) uintptr

// Seed is a random hash seed. The zero Seed is not usable: make one with
// [New].
type Seed struct {
	ms maphash.Seed
	v  uint64 // the seed's own value, maphash.String(ms, "")
}

// New returns a new random Seed.
func New() Seed {
	ms := maphash.MakeSeed()
	return Seed{ms: ms, v: maphash.String(ms, "")}
}

// String returns key's hash under s: on 64-bit platforms memhash, called
// directly, which is what maphash.String returns for keys of up to 128
// bytes (longer ones it hashes in chunks). On 32-bit platforms memhash
// returns 32 bits, too few for the tables' meta words and index slots, so
// maphash.String hashes there.
func (s Seed) String(key string) uint64 {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		return maphash.String(s.ms, key)
	}
	return uint64(memhash(unsafe.Pointer(unsafe.StringData(key)), uintptr(s.v), uintptr(len(key))))
}
