package redisstore_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestGroupKeySlots: keys made by store.GroupKey with one group share a
// Redis Cluster slot, whatever the group and the names hold (braces, '%',
// nothing) and whatever prefix New accepts (none with braces), so a
// multi-limit take over them is legal on a Cluster.
func TestGroupKeySlots(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.StringMatching(`[a-z:]{0,8}`).Draw(t, "prefix")
		group := rapid.String().Draw(t, "group")
		a, b := rapid.String().Draw(t, "a"), rapid.String().Draw(t, "b")
		ka, kb := prefix+store.GroupKey(group, a), prefix+store.GroupKey(group, b)
		if redisstore.Slot(ka) != redisstore.Slot(kb) {
			t.Fatalf("%q (slot %d) and %q (slot %d) are in one group but not one slot", ka, redisstore.Slot(ka), kb, redisstore.Slot(kb))
		}
		if a != b && ka == kb {
			t.Fatalf("names %q and %q share the key %q", a, b, ka)
		}
	})
}
