package keyhash

import (
	"hash/maphash"
	"strings"
	"testing"
)

// TestString: the hash is maphash.String under the seed for keys of up to
// 128 bytes, and spreads longer ones too.
func TestString(t *testing.T) {
	s := New()
	seen := map[uint64]bool{}
	for n := 1; n <= 300; n++ {
		key := strings.Repeat("k", n)
		h := s.String(key)
		if want := maphash.String(s.ms, key); n <= 128 && h != want {
			t.Fatalf("hash of %d bytes: %#x, maphash.String %#x", n, h, want)
		}
		seen[h>>32] = true
	}
	if len(seen) != 300 {
		t.Fatalf("%d distinct top halves of 300 hashes", len(seen))
	}
}
