package bench

import (
	"fmt"
	"strings"
)

// KeyLen is the length of every benchmark key as stored, prefix included:
// "rl:user:123456789012" is 20 bytes, the reference article's layout.
const KeyLen = 20

// Keys returns n distinct keys such that prefix+key is exactly KeyLen bytes:
// "user:" and a zero-padded index, for an implementation that prepends
// prefix itself. The padding keeps every key the same length, so memory per
// key compares like with like.
func Keys(n int, prefix string) []string {
	// A prefix too long for n keys makes longer keys; the memory report
	// prints the length it measured.
	width := max(KeyLen-len(prefix)-len("user:"), len(fmt.Sprint(n-1)))
	keys := make([]string, n)
	var b strings.Builder
	for i := range keys {
		b.Reset()
		fmt.Fprintf(&b, "user:%0*d", width, i)
		keys[i] = b.String()
	}
	return keys
}
