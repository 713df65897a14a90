package store_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

func TestNewLeaseID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := store.NewLeaseID()
		if err := algo.CheckLeaseID(id); err != nil || seen[id] {
			t.Fatalf("NewLeaseID() = %q: %v, repeated: %v", id, err, seen[id])
		}
		seen[id] = true
	}
}
