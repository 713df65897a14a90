package obstest

import (
	"context"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Filled opens a store with open, closes it when tb ends, and gives each
// of keys a bucket under p (a take of 1 each) before returning it. The
// adapters' benchmarks give each of their rows a store of its own: an
// observed memstore counts its Takes under its shards' locks and turns
// its lock-free Take off for good, so a row must not share a store that
// another row observes.
func Filled[S interface {
	store.Store
	Close() error
}](tb testing.TB, open func() (S, error), keys []string, p algo.Policy) store.Store {
	tb.Helper()
	s, err := open()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	for _, k := range keys {
		if _, err := s.Take(context.Background(), store.Request{Key: k, Policy: p, Cost: 1}); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}
