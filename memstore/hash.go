package memstore

import (
	"hash/maphash"
	"unsafe"
)

// memhash is the runtime's hash of memory, AES-based where the CPU has
// AES instructions: the function behind hash/maphash.String, which
// reaches it through three calls and a seed check (41 instructions per
// Take on a 20-byte key under callgrind, against memhash's 29). The
// runtime keeps it linkable for packages that call it directly (see
// go.dev/issue/67401).
//
//go:linkname memhash runtime.memhash
//go:noescape
func memhash(p unsafe.Pointer, h, s uintptr) uintptr

// hash returns key's hash under seed, the value of the maphash seed ms
// (maphash.String(ms, "")): on 64-bit platforms memhash, called directly,
// which is what maphash.String(ms, key) returns for keys of up to 128
// bytes (longer ones it hashes in chunks). On 32-bit platforms memhash
// returns 32 bits, too few for the table's meta word, so maphash.String
// hashes there.
func hash(seed uint64, ms maphash.Seed, key string) uint64 {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		return maphash.String(ms, key)
	}
	return uint64(memhash(unsafe.Pointer(unsafe.StringData(key)), uintptr(seed), uintptr(len(key))))
}

// hash returns key's hash under the Store's seed.
func (s *Store) hash(key string) uint64 { return hash(s.hseed, s.seed, key) }
