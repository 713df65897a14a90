package benchkeys

import "testing"

// TestStretch checks that the stretches of procs goroutines cover the key
// set exactly once between them, each in order and round again.
func TestStretch(t *testing.T) {
	const n, procs = 10, 3
	seen := make([]int, n)
	for g := range procs {
		w := Stretch(g, procs, n)
		first := w.Next()
		seen[first]++
		for prev := first; ; {
			i := w.Next()
			if i == first {
				break
			}
			if i != prev+1 {
				t.Fatalf("goroutine %d: %d after %d, want the next index", g, i, prev)
			}
			seen[i]++
			prev = i
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("key %d visited by %d goroutines, want 1", i, c)
		}
	}
}

// TestFrom checks that a walk from an index goes round the whole set.
func TestFrom(t *testing.T) {
	w := From(12, 5)
	for _, want := range []int{2, 3, 4, 0, 1, 2} {
		if i := w.Next(); i != want {
			t.Fatalf("Next = %d, want %d", i, want)
		}
	}
}

// TestRandom checks that a random walk stays in [0, n), reaches every key
// and differs from another goroutine's.
func TestRandom(t *testing.T) {
	const n = 1000
	a, b := Random(0, n), Random(1, n)
	seen, same := make([]bool, n), 0
	for range 20 * n {
		i, j := a.Next(), b.Next()
		if i < 0 || i >= n {
			t.Fatalf("index %d outside [0, %d)", i, n)
		}
		seen[i] = true
		if i == j {
			same++
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("key %d never visited in %d steps", i, 20*n)
		}
	}
	if same > n/10 {
		t.Fatalf("two goroutines' walks agree on %d of %d steps", same, 20*n)
	}
}
