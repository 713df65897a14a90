package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// check fails t unless t's slots hold exactly want (key → value) and every
// key is reachable from its home: no empty slot between them.
func check[V comparable](t *testing.T, tab *table[V], want map[string]V) {
	t.Helper()
	if tab.n != len(want) {
		t.Fatalf("n = %d, want %d", tab.n, len(want))
	}
	m := uint64(len(tab.slots) - 1)
	used := 0
	for i := range tab.slots {
		sl := &tab.slots[i]
		if sl.meta == 0 {
			if sl.key != nil {
				t.Fatalf("empty slot %d keeps its key pointer", i)
			}
			continue
		}
		used++
		key := keyOf(sl)
		if v, ok := want[key]; !ok || v != sl.v {
			t.Fatalf("slot %d holds %q = %v, want %v (present %v)", i, key, sl.v, v, ok)
		}
		for j := sl.meta >> tab.shift; j&m != uint64(i); j++ {
			if tab.slots[j&m].meta == 0 {
				t.Fatalf("key %q at %d is cut off from its home %d by the empty slot %d", key, i, sl.meta>>tab.shift, j&m)
			}
		}
	}
	if used != tab.n {
		t.Fatalf("%d used slots, n = %d", used, tab.n)
	}
	if tab.n > len(tab.slots)-len(tab.slots)/8 {
		t.Fatalf("%d keys in %d slots: over 7/8 full", tab.n, len(tab.slots))
	}
}

// TestTableModel drives a table with random inserts, updates and removals
// against a map, with hashes drawn from a few values so that keys share
// homes, clusters wrap around the end of the array and whole hashes
// collide (the key comparison must tell such keys apart, also at equal
// length), through growth from 8 slots.
func TestTableModel(t *testing.T) {
	for _, hashes := range []int{1, 3, 64, 1 << 30} {
		t.Run(fmt.Sprint(hashes, " hashes"), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(hashes)))
			hashOf := map[string]uint64{}
			hash := func(key string) uint64 {
				h, ok := hashOf[key]
				if !ok {
					h = uint64(r.IntN(hashes)) * 0x9e3779b97f4a7c15
					if hashes <= 3 {
						h |= 1<<64 - 1<<58 // every home at the top end: clusters wrap
					}
					hashOf[key] = h
				}
				return h
			}
			var tab table[int64]
			tab.init(minSlots)
			want := map[string]int64{}
			for step := range 3000 {
				key := fmt.Sprintf("k%02d", r.IntN(200)) // equal lengths
				h := hash(key)
				sl := tab.find(h, key)
				v, ok := want[key]
				if (sl != nil) != ok || ok && sl.v != v {
					t.Fatalf("step %d: find(%q) = %v, want %v (%v)", step, key, sl, v, ok)
				}
				switch {
				case !ok:
					if got := tab.insert(h, key, int64(step)); keyOf(got) != key || got.v != int64(step) {
						t.Fatalf("insert returned %q = %d", keyOf(got), got.v)
					}
					want[key] = int64(step)
				case r.IntN(3) == 0:
					sl.v = int64(step)
					want[key] = int64(step)
				default:
					tab.remove(sl)
					delete(want, key)
				}
				check(t, &tab, want)
			}
		})
	}
}

// TestTableGrowShrink: the table doubles at 7/8 full; a sweep removes
// exactly the idle keys, reports the soonest of the others, and shrinks
// the array once under a quarter of its peak above the floor; the
// shrunk table still finds its keys.
func TestTableGrowShrink(t *testing.T) {
	var tab table[int64]
	tab.init(minSlots)
	want := map[string]int64{}
	hash := func(key string) uint64 { return uint64(len(want)+7) * 0x9e3779b97f4a7c15 }
	hashes := map[string]uint64{}
	for i := range 1000 {
		key := fmt.Sprint("key", i)
		if i == 7 && len(tab.slots) != 8 || i == 8 && len(tab.slots) != 16 {
			t.Fatalf("%d keys in %d slots", i, len(tab.slots))
		}
		hashes[key] = hash(key)
		tab.insert(hashes[key], key, int64(i))
		want[key] = int64(i)
	}
	check(t, &tab, want)
	if len(tab.slots) != 2048 || tab.peak != 1000 {
		t.Fatalf("1000 keys in %d slots, peak %d", len(tab.slots), tab.peak)
	}
	idle := func(sl *slot[int64]) int64 { return sl.v }
	if soonest := tab.sweep(100, idle, 799); soonest != 800 {
		t.Fatalf("sweep at 799: soonest %d, want 800", soonest)
	}
	for i := range 800 {
		delete(want, fmt.Sprint("key", i))
	}
	check(t, &tab, want)
	if len(tab.slots) != 512 || tab.peak != 200 {
		t.Fatalf("200 of a peak of 1000 keys: %d slots, peak %d; want 512 (twice what 200 need), 200", len(tab.slots), tab.peak)
	}
	for key, v := range want {
		if sl := tab.find(hashes[key], key); sl == nil || sl.v != v {
			t.Fatalf("after shrinking, find(%q) = %v", key, sl)
		}
	}
	tab.sweep(1000, idle, 900) // the peak (200) is below the floor: no shrink
	if len(tab.slots) != 512 || tab.n != 99 {
		t.Fatalf("under the floor: %d slots, n %d", len(tab.slots), tab.n)
	}
	if soonest := tab.sweep(0, idle, 2000); soonest != 1<<63-1 || tab.n != 0 || len(tab.slots) != minSlots {
		t.Fatalf("sweep of all: soonest %d, n %d, %d slots", soonest, tab.n, len(tab.slots))
	}
}

// TestPack: a bucket holds every State the token bucket and the calendar
// quota can return, at their bounds, and the policy numbers up to
// MaxPolicies.
func TestPack(t *testing.T) {
	for _, st := range []algo.State{
		{},
		{Level: 2 * algo.MaxLevel, Stamp: algo.MaxTime, Prev: MaxPolicies},
		{Level: 1, Stamp: algo.MaxTime + 33*86400e6, Prev: 1023},
		{Level: algo.MaxLevel, Stamp: 1, Prev: 1024},
		{Level: 12345, Stamp: 1 << 52, Prev: 1<<20 - 1},
	} {
		b := pack(st)
		if got := b.state(); got != st {
			t.Errorf("pack(%+v).state() = %+v", st, got)
		}
		if got := b.policy(); got != st.Prev {
			t.Errorf("pack(%+v).policy() = %d", st, got)
		}
	}
}

// TestShardSweep: a shard sweeps a token bucket by the idle time its
// policy gives, keeps one written under no policy number by the idle time
// kept apart for it, and sweeps lease keys; Close empties every table.
func TestShardSweep(t *testing.T) {
	clk := storetest.NewClock()
	s, err := newStore(Config{Clock: clk, Shards: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := algo.PerSecond(1).Burst(10)
	now := s.now()
	if _, err := s.Take(ctx, store.Request{Key: "a", Policy: p, Cost: 2}); err != nil { // idle 2 s from now
		t.Fatal(err)
	}
	sh := &s.shards[0]
	sh.put(7, "lost", nil, algo.State{Level: 1, Stamp: now}, now+5e6) // no policy number
	if _, err := s.AcquireLease(ctx, "l", algo.LeasePolicy{Limit: 1, TTL: 3 * time.Second}, "id"); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 || len(sh.lost) != 1 {
		t.Fatalf("Len %d, %d lost", s.Len(), len(sh.lost))
	}
	for _, step := range []struct {
		at   int64
		len  int
		next int64
	}{{1e6, 3, now + 2e6}, {2e6, 2, now + 3e6}, {3e6, 1, now + 5e6}, {5e6, 0, 1<<63 - 1}} {
		sh.sweep(now+step.at, s.pols)
		if s.Len() != step.len || sh.soonest != step.next {
			t.Fatalf("sweep at +%dµs: Len %d, soonest %d; want %d, %d", step.at, s.Len(), sh.soonest, step.len, step.next)
		}
	}
	if len(sh.lost) != 0 {
		t.Fatalf("%d lost idle times left", len(sh.lost))
	}
	s.Take(ctx, store.Request{Key: "a", Policy: p, Cost: 1})
	s.Close()
	if s.Len() != 0 || len(sh.b.slots) != 1 || !sh.closed {
		t.Fatalf("after Close: Len %d, %d slots", s.Len(), len(sh.b.slots))
	}
	if _, err := s.Take(ctx, store.Request{Key: "a", Policy: p, Cost: 1}); err == nil {
		t.Fatal("Take after Close: no error")
	}
}

// TestMaxKeyLenBound: a table holds keys of up to 2^32−1 bytes (their
// length's bits in the meta word), so MaxKeyLen is clamped to that, also
// when negative ("no bound").
func TestMaxKeyLenBound(t *testing.T) {
	for _, n := range []int{-1, 0, 16} {
		s, err := New(Config{MaxKeyLen: n})
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]int{-1: int(min(maxKeyBytes, uint64(^uint(0)>>1))), 0: 256, 16: 16}[n]
		if s.maxKey != want {
			t.Errorf("MaxKeyLen %d: longest key %d, want %d", n, s.maxKey, want)
		}
	}
}
