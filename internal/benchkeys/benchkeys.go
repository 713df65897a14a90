// Package benchkeys chooses which key each goroutine of a benchmark takes
// from next, the same way for memstore's benchmarks and for bench/'s
// comparison with the in-process peers: in order over a stretch of the
// key set of its own, or at random over the whole set.
package benchkeys

// Walk is the order in which one goroutine visits a key set of n keys,
// as indices. Its Next is a few instructions and is inlined, so it costs
// every implementation measured the same. The zero Walk is not usable;
// make one with Stretch, From or Random. A Walk is not safe for concurrent use:
// each goroutine has its own.
type Walk struct {
	i, lo, hi int
	n         uint64
	rnd       uint64 // the xorshift state of a random walk; 0 for a stretch
}

// Stretch returns the walk of goroutine g (counted from 0, taken modulo
// procs) of procs over its own stretch of n keys, the g-th of procs equal
// parts, in order and round again: no two goroutines visit one key.
func Stretch(g, procs, n int) Walk {
	g %= procs
	lo := g * n / procs
	return Walk{i: lo, lo: lo, hi: (g + 1) * n / procs}
}

// From returns a walk over all n keys in order from index start (taken
// modulo n), round again: goroutines started far apart in the set take
// each key one after another, as a hot set shared by all would be.
func From(start, n int) Walk { return Walk{i: start % n, hi: n} }

// Random returns a walk over all n keys (n < 2^32) in random order, by a
// xorshift generator seeded by g, so that each goroutine has a sequence
// of its own and every run the same ones.
func Random(g, n int) Walk {
	return Walk{n: uint64(n), rnd: uint64(g+1) * 0x9e3779b97f4a7c15}
}

// Next returns the index of the next key.
func (w *Walk) Next() int {
	if w.rnd != 0 {
		w.rnd ^= w.rnd << 13
		w.rnd ^= w.rnd >> 7
		w.rnd ^= w.rnd << 17
		return int((w.rnd >> 32) * w.n >> 32) // in [0, n), without a division
	}
	i := w.i
	if w.i++; w.i == w.hi {
		w.i = w.lo
	}
	return i
}
