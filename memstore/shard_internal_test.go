package memstore

import (
	"slices"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
)

// TestShardCollisions drives a shard with keys whose hashes collide, which
// maphash makes too rare to meet by chance: each key keeps its own bucket
// through set, in-place updates, del from the head, middle and end of a
// chain, and sweeps that keep part of one.
func TestShardCollisions(t *testing.T) {
	var sh shard
	sh.init(100, 1)
	const h = 7
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		sh.set(h, k, sh.get(h, k), algo.State{Level: int64(i + 1)}, int64(10*(i+1)))
	}
	sh.set(h+1, "other", nil, algo.State{Level: 9}, 100)
	want := func(present ...string) {
		t.Helper()
		if sh.n != len(present)+1 {
			t.Fatalf("n = %d, want %d", sh.n, len(present)+1)
		}
		for i, k := range keys {
			e := sh.get(h, k)
			switch {
			case slices.Contains(present, k) && (e == nil || e.key != k || e.s.Level < int64(i+1)):
				t.Fatalf("get(%q) = %+v, want its own bucket", k, e)
			case !slices.Contains(present, k) && e != nil:
				t.Fatalf("get(%q) = %+v, want none", k, e)
			}
		}
		if e := sh.get(h+1, "other"); e == nil || e.s.Level != 9 {
			t.Fatalf("get(other) = %+v", e)
		}
	}
	want("a", "b", "c", "d")
	e := sh.get(h, "b")
	sh.set(h, "b", e, algo.State{Level: 20}, 20) // in place
	if sh.get(h, "b") != e || e.s.Level != 20 || sh.n != 5 {
		t.Fatalf("in-place update: %+v, n %d", sh.get(h, "b"), sh.n)
	}
	sh.del(h, sh.get(h, "d")) // the head: set prepends
	want("a", "b", "c")
	sh.del(h, sh.get(h, "b")) // the middle
	want("a", "c")
	sh.set(h, "d", nil, algo.State{Level: 4}, 40)
	sh.sweep(15) // a (idle 10) goes, c (30) and d (40) stay
	want("c", "d")
	sh.sweep(35)
	want("d")
	sh.del(h, sh.get(h, "d"))
	want()
	if _, ok := sh.m[h]; ok {
		t.Fatal("an empty chain keeps its map slot")
	}
}
