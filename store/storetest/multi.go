package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// testMulti checks TakeMulti.
func testMulti(t *testing.T, e *env) {
	t.Run("reference", func(t *testing.T) { testMultiReference(t, e) })
	t.Run("concurrent", func(t *testing.T) { testMultiConcurrent(t, e) })
	t.Run("duplicate key", func(t *testing.T) { testMultiDuplicate(t, e) })
	t.Run("bad input", func(t *testing.T) { testMultiBadInput(t, e) })
}

// testMultiReference: random multi-limit and single takes over a few keys
// match the reference applied all-or-nothing: when any bucket denies,
// nothing is charged and each Result is what that bucket alone answers.
func testMultiReference(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		keys := e.tagged(3)
		refs := []*ref{{p: genPolicy(t, "a ")}, {p: genPolicy(t, "b ")}, {p: genPolicy(t, "c ")}}
		n := rapid.IntRange(1, 25).Draw(t, "ops")
		for range n {
			e.clk.Add(genStep(t, refs[rapid.IntRange(0, 2).Draw(t, "step of")].p))
			if rapid.IntRange(0, 3).Draw(t, "single") == 0 {
				i := rapid.IntRange(0, 2).Draw(t, "key")
				e.check(t, keys[i], refs[i], genCost(t, refs[i].p))
				continue
			}
			idx := rapid.SliceOfNDistinct(rapid.IntRange(0, 2), 1, 3, rapid.ID[int]).Draw(t, "keys")
			reqs := make([]store.Request, len(idx))
			for j, i := range idx {
				reqs[j] = store.Request{Key: keys[i], Policy: refs[i].p, Cost: genCost(t, refs[i].p)}
			}
			checkMulti(t, e, refs, idx, reqs)
		}
	})
}

// expectMulti computes the answer the reference gives to reqs (on keys idx
// of refs) and the states to keep if it is allowed.
func expectMulti(t tb, e *env, refs []*ref, idx []int, reqs []store.Request) (store.MultiResult, []algo.State) {
	t.Helper()
	now := e.clk.Now().UnixMicro()
	want := store.MultiResult{Allowed: true, Denied: -1, Results: make([]algo.Result, len(reqs))}
	states := make([]algo.State, len(reqs))
	for j, i := range idx {
		s, res, err := algo.TokenBucket{}.Take(refs[i].p, refs[i].s, now, reqs[j].Cost)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		states[j], want.Results[j] = s, res
		if !res.Allowed {
			want.Allowed = false
			if want.Denied < 0 || res.RetryAfter > want.RetryAfter {
				want.Denied, want.RetryAfter = j, res.RetryAfter
			}
		}
	}
	return want, states
}

// sameMulti compares two answers; among denying buckets with the same
// longest retry-after, any may be named.
func sameMulti(got, want store.MultiResult) bool {
	if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter || len(got.Results) != len(want.Results) {
		return false
	}
	for j := range got.Results {
		if got.Results[j] != want.Results[j] {
			return false
		}
	}
	if want.Denied < 0 {
		return got.Denied == -1
	}
	return got.Denied >= 0 && got.Denied < len(got.Results) &&
		!got.Results[got.Denied].Allowed && got.Results[got.Denied].RetryAfter == want.RetryAfter
}

// testMultiConcurrent: goroutines take from keys a and b together while
// others take from a alone, at a frozen clock. Every charge must be whole:
// b lost exactly what the multi-takes admitted, a that plus the singles.
func testMultiConcurrent(t *testing.T, e *env) {
	const goroutines, attempts = 4, 20
	p := algo.PerSecond(1).Burst(60)
	keys := e.tagged(2)
	var multi, single atomic.Int64
	var wg sync.WaitGroup
	for g := range 2 * goroutines {
		wg.Go(func() {
			for range attempts {
				if g%2 == 0 {
					res, err := e.s.TakeMulti(context.Background(), []store.Request{{Key: keys[0], Policy: p, Cost: 1}, {Key: keys[1], Policy: p, Cost: 1}})
					if err != nil {
						t.Errorf("TakeMulti: %v", err)
						return
					}
					if res.Allowed {
						multi.Add(1)
					}
					continue
				}
				res, err := e.s.Take(context.Background(), store.Request{Key: keys[0], Policy: p, Cost: 1})
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if res.Allowed {
					single.Add(1)
				}
			}
		})
	}
	wg.Wait()
	a, b := e.take(t, keys[0], p, 0).Remaining, e.take(t, keys[1], p, 0).Remaining
	if b != p.Capacity()-multi.Load() || a != p.Capacity()-multi.Load()-single.Load() || a < 0 {
		t.Fatalf("%d multi and %d single takes admitted, but a has %d left and b %d (capacity %d)",
			multi.Load(), single.Load(), a, b, p.Capacity())
	}
	if multi.Load()+single.Load() != p.Capacity() {
		t.Fatalf("admitted %d from a at a frozen clock, want exactly its capacity %d", multi.Load()+single.Load(), p.Capacity())
	}
}

// testMultiDuplicate: a key named twice is refused with
// store.ErrDuplicateKey and charges nothing, or counts as the combined cost.
func testMultiDuplicate(t *testing.T, e *env) {
	p := algo.PerSecond(1).Burst(5)
	tests := []struct {
		name     string
		before   int64 // taken from the bucket first
		costs    [2]int64
		admitted bool // when treated as combined
	}{
		{"fits", 0, [2]int64{2, 1}, true},
		{"does not fit", 3, [2]int64{1, 2}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := e.tagged(1)[0]
			if tc.before > 0 {
				e.take(t, key, p, tc.before)
			}
			reqs := []store.Request{{Key: key, Policy: p, Cost: tc.costs[0]}, {Key: key, Policy: p, Cost: tc.costs[1]}}
			res, err := e.s.TakeMulti(context.Background(), reqs)
			left := p.Capacity() - tc.before
			switch {
			case errors.Is(err, store.ErrDuplicateKey):
			case err != nil:
				t.Fatalf("TakeMulti with a duplicate key: %v; want nil or an error matching store.ErrDuplicateKey", err)
			case res.Allowed != tc.admitted:
				t.Fatalf("TakeMulti with a duplicate key = %+v; want Allowed %v as one request of cost %d", res, tc.admitted, tc.costs[0]+tc.costs[1])
			case res.Allowed:
				left -= tc.costs[0] + tc.costs[1]
			}
			if got := e.take(t, key, p, 0); got.Remaining != left {
				t.Fatalf("after TakeMulti (%v): %d remaining, want %d", err, got.Remaining, left)
			}
		})
	}
}

// testMultiBadInput: bad input anywhere in the request, or a done context,
// is an error matching its sentinel and charges no bucket.
func testMultiBadInput(t *testing.T, e *env) {
	p := algo.PerSecond(1).Burst(5)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		bad  store.Request // Key "" is replaced by a fresh key unless empty is set
		want error
	}{
		{"empty key", context.Background(), store.Request{Key: "", Policy: p, Cost: 1}, store.ErrEmptyKey},
		{"key too long", context.Background(), store.Request{Policy: p, Cost: 1}, store.ErrKeyTooLong},
		{"invalid policy", context.Background(), store.Request{Policy: algo.PerSecond(0).Burst(1), Cost: 1}, algo.ErrInvalidPolicy},
		{"negative cost", context.Background(), store.Request{Policy: p, Cost: -1}, algo.ErrInvalidCost},
		{"cost above capacity", context.Background(), store.Request{Policy: p, Cost: 6}, algo.ErrCostExceedsCapacity},
		{"canceled", canceled, store.Request{Policy: p, Cost: 1}, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys := e.tagged(3)
			bad := tc.bad
			switch tc.want {
			case store.ErrEmptyKey:
			case store.ErrKeyTooLong:
				bad.Key = keys[1] + strings.Repeat("x", store.DefaultMaxKeyLen+1-len(keys[1]))
			default:
				bad.Key = keys[1]
			}
			reqs := []store.Request{{Key: keys[0], Policy: p, Cost: 1}, bad, {Key: keys[2], Policy: p, Cost: 1}}
			res, err := e.s.TakeMulti(tc.ctx, reqs)
			if !errors.Is(err, tc.want) {
				t.Fatalf("TakeMulti(%+v) = %+v, %v; want an error matching %v", reqs, res, err, tc.want)
			}
			e.full(t, keys[0], p)
			e.full(t, keys[2], p)
		})
	}
}
