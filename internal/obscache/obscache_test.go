package obscache

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestGet checks that each key's value is made once, whatever the
// goroutines asking, and that Get allocates nothing once it is made.
func TestGet(t *testing.T) {
	var made atomic.Int64
	c := Cache[int]{New: func(Key) *int { made.Add(1); return new(int) }}
	keys := []Key{{"a", "r", "s"}, {"b", "r", "s"}, {"a", "", "s"}, {}}
	var wg sync.WaitGroup
	got := make([][]*int, 8)
	for g := range got {
		wg.Go(func() {
			for _, k := range keys {
				got[g] = append(got[g], c.Get(k))
			}
		})
	}
	wg.Wait()
	if made.Load() != int64(len(keys)) {
		t.Fatalf("%d values made for %d keys", made.Load(), len(keys))
	}
	for g := range got {
		for i := range keys {
			if got[g][i] != got[0][i] {
				t.Fatalf("goroutine %d got another value for %+v", g, keys[i])
			}
		}
	}
	if a := testing.AllocsPerRun(100, func() { c.Get(keys[1]) }); a != 0 {
		t.Fatalf("Get allocates %v times", a)
	}
}

// TestGetEqualStrings checks that keys of equal strings at other addresses
// get the same value as the first, through the map, and that a slot taken
// by one key leaves the others correct.
func TestGetEqualStrings(t *testing.T) {
	c := Cache[string]{New: func(k Key) *string { s := k.Policy + "|" + k.Route + "|" + k.Store; return &s }}
	built := func(s string) string { return string([]byte(s)) } // same bytes, another address
	for i := range 500 {
		p := "policy" + string(rune('a'+i%26))
		for _, k := range []Key{{p, "GET /", "redis"}, {built(p), built("GET /"), built("redis")}} {
			if got, want := *c.Get(k), k.Policy+"|"+k.Route+"|"+k.Store; got != want {
				t.Fatalf("Get(%+v) = %q, want %q", k, got, want)
			}
		}
	}
	if n := len(*c.m.Load()); n != 26 {
		t.Fatalf("%d values made, want 26", n)
	}
}

// TestRange checks that Range sees every key made, with its value, and
// that a zero Cache makes zero values.
func TestRange(t *testing.T) {
	var c Cache[int]
	c.Range(func(Key, *int) { t.Fatal("an empty cache ranged over a key") })
	*c.Get(Key{Policy: "a"}) = 1
	*c.Get(Key{Policy: "b", Store: "s"}) = 2
	got := map[Key]int{}
	c.Range(func(k Key, v *int) { got[k] = *v })
	if len(got) != 2 || got[Key{Policy: "a"}] != 1 || got[Key{Policy: "b", Store: "s"}] != 2 {
		t.Fatalf("Range saw %v", got)
	}
}
