package redisstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestMaxKeyLen: a key over MaxKeyLen is refused before Redis is called
// (no EVALSHA runs, nothing is written), on Take and TakeMulti; a key at
// the bound is stored, and its Redis key (prefix and all) costs a bounded
// MEMORY USAGE.
func TestMaxKeyLen(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	p := algo.PerHour(1).Burst(5)
	s := newStore(t, rdb, redisstore.Config{Pipeline: redisstore.PipelineConfig{Disabled: true}})
	long := strings.Repeat("k", store.DefaultMaxKeyLen+1)
	before := calls(t, rdb, "evalsha") + calls(t, rdb, "eval")
	if res, err := s.Take(ctxT(t), store.Request{Key: long, Policy: p, Cost: 1}); !errors.Is(err, store.ErrKeyTooLong) {
		t.Fatalf("Take on a %d-byte key = %+v, %v; want store.ErrKeyTooLong", len(long), res, err)
	}
	if _, err := s.Take(ctxT(t), store.Request{Key: strings.Repeat("m", 1<<20), Policy: p, Cost: 1}); !errors.Is(err, store.ErrKeyTooLong) {
		t.Fatalf("Take on a 1 MB key: %v; want store.ErrKeyTooLong", err)
	}
	if _, err := s.TakeMulti(ctxT(t), []store.Request{{Key: "a", Policy: p, Cost: 1}, {Key: long, Policy: p, Cost: 1}}); !errors.Is(err, store.ErrKeyTooLong) {
		t.Fatalf("TakeMulti with a %d-byte key: %v; want store.ErrKeyTooLong", len(long), err)
	}
	if ran := calls(t, rdb, "evalsha") + calls(t, rdb, "eval") - before; ran != 0 {
		t.Fatalf("the script ran %d times for refused keys, want 0", ran)
	}
	if n, err := rdb.DBSize(ctxT(t)).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d, %v; want 0 (nothing written)", n, err)
	}

	key := long[:store.DefaultMaxKeyLen]
	if res, err := s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("Take on a %d-byte key = %+v, %v; want admitted", len(key), res, err)
	}
	usage, err := rdb.MemoryUsage(ctxT(t), s.Key(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// 72 bytes at a 20-byte key (TestMemoryPerKey); the key's bytes on top,
	// rounded up by the allocator.
	if limit := int64(len(s.Key(key)) + 96); usage > limit {
		t.Fatalf("MEMORY USAGE of a bucket with a %d-byte Redis key = %d, want at most %d", len(s.Key(key)), usage, limit)
	}
	t.Logf("MEMORY USAGE of a bucket with a %d-byte Redis key: %d bytes", len(s.Key(key)), usage)

	unbounded := newStore(t, rdb, redisstore.Config{MaxKeyLen: -1})
	if _, err := unbounded.Take(ctxT(t), store.Request{Key: long, Policy: p, Cost: 1}); err != nil {
		t.Fatalf("Take on a %d-byte key with MaxKeyLen -1: %v", len(long), err)
	}
}
