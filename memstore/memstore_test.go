package memstore_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// newStore builds a memstore for a test, closed at cleanup.
func newStore(t testing.TB, cfg memstore.Config) *memstore.Store {
	t.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatalf("memstore.New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		return newStore(t, memstore.Config{Clock: clk})
	})
}
