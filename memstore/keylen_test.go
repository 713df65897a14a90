package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestMaxKeyLen: a key longer than MaxKeyLen is refused with
// store.ErrKeyTooLong and stores nothing; a key at the bound works; a
// negative MaxKeyLen lifts the bound.
func TestMaxKeyLen(t *testing.T) {
	p := algo.PerSecond(1).Burst(5)
	ctx := context.Background()
	tests := []struct {
		name   string
		maxLen int
		keyLen int
		want   error
	}{
		{"default bound", 0, store.DefaultMaxKeyLen, nil},
		{"one byte over the default", 0, store.DefaultMaxKeyLen + 1, store.ErrKeyTooLong},
		{"a megabyte", 0, 1 << 20, store.ErrKeyTooLong},
		{"configured bound", 16, 16, nil},
		{"over the configured bound", 16, 17, store.ErrKeyTooLong},
		{"no bound", -1, 1 << 20, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, memstore.Config{MaxKeyLen: tc.maxLen})
			key := strings.Repeat("k", tc.keyLen)
			res, err := s.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1})
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("Take on a %d-byte key (MaxKeyLen %d) = %+v, %v; want %v", tc.keyLen, tc.maxLen, res, err, tc.want)
			}
			mr, err := s.TakeMulti(ctx, []store.Request{{Key: "a", Policy: p, Cost: 1}, {Key: key, Policy: p, Cost: 1}})
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("TakeMulti with a %d-byte key = %+v, %v; want %v", tc.keyLen, mr, err, tc.want)
			}
			wantLen := 2
			if tc.want != nil {
				wantLen = 0 // nothing stored, not even the valid key "a"
			}
			if n := s.Len(); n != wantLen {
				t.Fatalf("store holds %d buckets, want %d", n, wantLen)
			}
		})
	}
}

// TestMemoryAtMaxKeyLen: the heap held per bucket whose key is as long as
// allowed stays bounded by the key plus a fixed overhead (88 bytes
// measured for short keys, BENCHMARKS.md), so MaxKeys × (MaxKeyLen + a
// few hundred bytes) bounds the whole store; and a stream of refused
// megabyte keys stores nothing.
func TestMemoryAtMaxKeyLen(t *testing.T) {
	const n = 20000
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk})
	p := algo.PerHour(1).Burst(5)
	pad := strings.Repeat("x", store.DefaultMaxKeyLen-9)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range n {
		take(t, s, fmt.Sprintf("%08d:%s", i, pad), p, 1) // a fresh key string, held by the store alone
	}
	after := heap()
	perBucket := (float64(after) - float64(before)) / n
	// The key's bytes plus the bucket (about 88 bytes for short keys,
	// BENCHMARKS.md) and the map's share; 160 bytes of overhead is ample.
	if limit := float64(store.DefaultMaxKeyLen + 160); perBucket > limit {
		t.Fatalf("%.0f bytes of heap per bucket at %d-byte keys, want at most %.0f", perBucket, store.DefaultMaxKeyLen, limit)
	}
	t.Logf("%.0f bytes of heap per bucket at %d-byte keys", perBucket, store.DefaultMaxKeyLen)
	if s.Len() != n {
		t.Fatalf("Len = %d, want %d", s.Len(), n)
	}

	huge := strings.Repeat("h", 1<<20)
	before = heap()
	for i := range 100 {
		if _, err := s.Take(context.Background(), store.Request{Key: huge + fmt.Sprint(i), Policy: p, Cost: 1}); !errors.Is(err, store.ErrKeyTooLong) {
			t.Fatalf("Take on a 1 MB key: %v, want store.ErrKeyTooLong", err)
		}
	}
	if grew := int64(heap()) - int64(before); grew > 1<<20 {
		t.Fatalf("100 refused 1 MB keys grew the heap by %d bytes", grew)
	}
	if s.Len() != n {
		t.Fatalf("Len = %d after refused keys, want %d", s.Len(), n)
	}
}
