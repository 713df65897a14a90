package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// acquire calls s.AcquireLease and fails the test on an error.
func acquire(t tb, s *memstore.Store, key string, p algo.LeasePolicy, id string) algo.LeaseResult {
	t.Helper()
	res, err := s.AcquireLease(context.Background(), key, p, id)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", key, id, err)
	}
	return res
}

// release calls s.ReleaseLease and fails the test on an error.
func release(t tb, s *memstore.Store, key, id string) bool {
	t.Helper()
	ok, err := s.ReleaseLease(context.Background(), key, id)
	if err != nil {
		t.Fatalf("ReleaseLease(%q, %q): %v", key, id, err)
	}
	return ok
}

// TestLeaseKeyForgotten: a key holds memory only while it has live leases:
// it is deleted when its last lease is released, and swept once its last
// lease has expired.
func TestLeaseKeyForgotten(t *testing.T) {
	clk := storetest.NewClock()
	s, err := memstore.NewSweeping(memstore.Config{Clock: clk, Shards: 1}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := algo.LeasePolicy{Limit: 3, TTL: time.Second}
	acquire(t, s, "k", p, "a")
	acquire(t, s, "k", p, "b")
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d with one key holding leases, want 1", n)
	}
	release(t, s, "k", "a")
	release(t, s, "k", "b")
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after the last release, want 0", n)
	}
	for i := range 4 { // crashed holders: never released
		acquire(t, s, fmt.Sprint("crashed", i), p, "x")
	}
	clk.Add(p.TTL)
	acquire(t, s, "new", p, "y") // the shard has grown to 4: it sweeps
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d after the crashed leases expired, want 1", n)
	}
}

// TestLeaseMaxKeys: at MaxKeys (buckets and lease keys together), a new
// lease key is denied until a stored key is idle; stored keys go on.
func TestLeaseMaxKeys(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 3})
	p := algo.LeasePolicy{Limit: 2, TTL: 10 * time.Second}
	acquire(t, s, "a", p, "1")
	clk.Add(time.Second)
	acquire(t, s, "b", p, "1")
	take(t, s, "bucket", algo.PerSecond(1).Burst(60), 60) // full again in 60s
	want := algo.LeaseResult{Limit: 2, RetryAfter: 9 * time.Second}
	if got := acquire(t, s, "new", p, "1"); got != want {
		t.Fatalf("new key in a full store = %+v, want %+v: denied until a's lease expires", got, want)
	}
	if got := acquire(t, s, "a", p, "2"); !got.Allowed {
		t.Fatalf("stored key in a full store = %+v, want admitted", got)
	}
	if ok := release(t, s, "new", "1"); ok {
		t.Fatal("released a lease the full store never granted")
	}
	release(t, s, "b", "1") // b holds nothing now: its entry goes
	if got := acquire(t, s, "new", p, "1"); !got.Allowed || got.Remaining != 1 {
		t.Fatalf("new key after b's release = %+v, want its own lease set", got)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 (a, new, bucket)", n)
	}
}

// TestLeaseBounded runs random acquires, releases and clock moves over
// more keys than MaxKeys allows, against algo's functions with nothing
// forgotten. Every answer is the reference's, except that a new key may
// be denied at a full store; that happens only when every stored key is in
// use, and the store never holds more than MaxKeys keys.
func TestLeaseBounded(t *testing.T) {
	refused := 0
	rapid.Check(t, func(t *rapid.T) {
		const maxKeys = 6
		clk := storetest.NewClock()
		s, err := memstore.NewSweeping(memstore.Config{Clock: clk, Shards: 1, MaxKeys: maxKeys}, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p := algo.LeasePolicy{Limit: rapid.Int64Range(1, 3).Draw(t, "limit"), TTL: time.Second}
		ref := map[string]algo.Leases{}
		nkeys := rapid.IntRange(1, 16).Draw(t, "keys")
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			clk.Add(time.Duration(rapid.Int64Range(0, 100).Draw(t, "ms")) * time.Millisecond)
			now := clk.Now().UnixMicro()
			key := fmt.Sprint(rapid.IntRange(0, nkeys-1).Draw(t, "key"))
			id := fmt.Sprint(rapid.IntRange(0, 3).Draw(t, "id"))
			if rapid.IntRange(0, 2).Draw(t, "release") == 0 {
				var want bool
				if ref[key], want, err = ref[key].Release(now, id); err != nil {
					t.Fatal(err)
				}
				if got := release(t, s, key, id); got != want {
					t.Fatalf("ReleaseLease(%q, %q) = %v, reference %v", key, id, got, want)
				}
			} else {
				next, want, err := p.Acquire(clone(ref[key]), now, id)
				if err != nil {
					t.Fatal(err)
				}
				got := acquire(t, s, key, p, id)
				if got != want {
					inUse := 0
					for _, l := range ref {
						if l.Live(now) > 0 {
							inUse++
						}
					}
					if ref[key].Live(now) > 0 || inUse < maxKeys || got.Allowed || got.RetryAfter <= 0 || got.RetryAfter > p.TTL {
						t.Fatalf("AcquireLease(%q, %q) = %+v, reference %+v (%d keys in use)", key, id, got, want, inUse)
					}
					next = ref[key] // refused for room: nothing stored
					refused++
				}
				ref[key] = next
			}
			if n := s.Len(); n > maxKeys {
				t.Fatalf("Len = %d, MaxKeys %d", n, maxKeys)
			}
		}
	})
	if refused == 0 {
		t.Fatal("no acquire was refused for room: the bound was not exercised")
	}
	t.Logf("%d acquires refused for room", refused)
}

// clone copies l: the lease functions may reuse their argument's array.
func clone(l algo.Leases) algo.Leases { return append(algo.Leases(nil), l...) }

// TestLeaseAllocs: with ids made beforehand, acquire and release on a key
// that keeps other leases allocate nothing; on a key with none, the acquire
// allocates its entry, once.
func TestLeaseAllocs(t *testing.T) {
	s := newStore(t, memstore.Config{})
	p := algo.LeasePolicy{Limit: 8, TTL: time.Minute}
	ctx := context.Background()
	acquire(t, s, "busy", p, "stays")
	if n := testing.AllocsPerRun(1000, func() {
		s.AcquireLease(ctx, "busy", p, "x")
		s.ReleaseLease(ctx, "busy", "x")
	}); n != 0 {
		t.Errorf("acquire+release on a key holding another lease: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		s.AcquireLease(ctx, "idle", p, "x")
		s.ReleaseLease(ctx, "idle", "x")
	}); n != 1 {
		t.Errorf("acquire+release on a key with no leases: %v allocations, want 1 (its entry)", n)
	}
}

// BenchmarkLease measures an acquire and its release: on a key holding no
// other lease (the entry is made and dropped each time), on a key holding
// 15 others, and with a fresh id from store.NewLeaseID as a
// ConcurrencyLimiter makes.
func BenchmarkLease(b *testing.B) {
	ctx := context.Background()
	p := algo.LeasePolicy{Limit: 16, TTL: time.Minute}
	run := func(b *testing.B, key string, others int, id func() string) {
		s := newStore(b, memstore.Config{})
		for i := range others {
			acquire(b, s, key, p, fmt.Sprint("other", i))
		}
		b.ReportAllocs()
		for b.Loop() {
			x := id()
			if res, _ := s.AcquireLease(ctx, key, p, x); !res.Allowed {
				b.Fatal("denied")
			}
			s.ReleaseLease(ctx, key, x)
		}
	}
	fixed := func() string { return "lease-id-made-beforehand" }
	b.Run("idle key", func(b *testing.B) { run(b, "k", 0, fixed) })
	b.Run("15 held", func(b *testing.B) { run(b, "k", 15, fixed) })
	b.Run("idle key, NewLeaseID", func(b *testing.B) { run(b, "k", 0, store.NewLeaseID) })
}

// BenchmarkLeaseMemory reports the heap held per lease key holding one
// lease, besides the strings of its key and id (made beforehand).
func BenchmarkLeaseMemory(b *testing.B) {
	const keys = 100_000
	p := algo.LeasePolicy{Limit: 4, TTL: time.Hour}
	names, ids := make([]string, keys), make([]string, keys)
	for i := range names {
		names[i], ids[i] = fmt.Sprintf("key%07d", i), store.NewLeaseID()
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newStore(b, memstore.Config{})
		for i := range names {
			acquire(b, s, names[i], p, ids[i])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
		runtime.KeepAlive(s)
		s.Close()
	}
}
