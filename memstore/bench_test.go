package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// benchPolicy never runs dry or refills to full during a benchmark, so every
// Take after the first finds its bucket and is admitted.
var benchPolicy = algo.PerSecond(1).Burst(1_000_000_000)

// benchKeys returns n distinct keys, each already holding a bucket in s.
func benchKeys(b *testing.B, s *memstore.Store, prefix string, n int) []string {
	b.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
		take(b, s, keys[i], benchPolicy, 1)
	}
	return keys
}

// BenchmarkTake measures Take on the real clock: one hot key, 100k distinct
// keys in turn, and goroutines on disjoint key sets (run with -cpu 1,2,4
// to see the scaling).
func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	b.Run("hot key", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		keys := benchKeys(b, s, "hot", 1)
		b.ReportAllocs()
		for b.Loop() {
			s.Take(ctx, store.Request{Key: keys[0], Policy: benchPolicy, Cost: 1})
		}
	})
	b.Run("100k keys", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		keys := benchKeys(b, s, "k", 100_000)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Take(ctx, store.Request{Key: keys[i], Policy: benchPolicy, Cost: 1})
			if i++; i == len(keys) {
				i = 0
			}
		}
		if n := s.Len(); n != len(keys) {
			b.Fatalf("Len = %d, want %d: keys did not really vary", n, len(keys))
		}
	})
	b.Run("parallel distinct keys", func(b *testing.B) {
		s := newStore(b, memstore.Config{})
		const perG = 1024
		keys := benchKeys(b, s, "p", 64*perG) // up to 64 goroutines
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1)-1) % 64
			mine, i := keys[g*perG:(g+1)*perG], 0
			for pb.Next() {
				s.Take(ctx, store.Request{Key: mine[i], Policy: benchPolicy, Cost: 1})
				if i++; i == perG {
					i = 0
				}
			}
		})
	})
}

// BenchmarkTakeMulti measures a two-bucket take (a per-user and a global
// limit), on existing buckets.
func BenchmarkTakeMulti(b *testing.B) {
	s := newStore(b, memstore.Config{})
	ctx := context.Background()
	reqs := []store.Request{{Key: "user:1", Policy: benchPolicy, Cost: 1}, {Key: "global", Policy: benchPolicy, Cost: 1}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.TakeMulti(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}
