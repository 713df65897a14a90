package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// tb is what take needs of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// take calls s.Take and fails the test on an error.
func take(t tb, s *memstore.Store, key string, p algo.Policy, cost int64) algo.Result {
	t.Helper()
	res, err := s.Take(context.Background(), store.Request{Key: key, Policy: p, Cost: cost})
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, cost, err)
	}
	return res
}

// TestMaxKeysOverflow pins the policy at MaxKeys: stored buckets are never
// evicted while refilling, new keys share one overflow bucket, and room
// comes back once stored buckets are full again.
func TestMaxKeysOverflow(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 4})
	p := algo.PerSecond(1).Burst(2)
	for i := range 4 {
		take(t, s, fmt.Sprint("old", i), p, 2) // four empty buckets
	}
	steps := []struct {
		name string
		key  string
		cost int64
		want algo.Result
	}{
		{"stored bucket keeps its deficit", "old0", 1, algo.Result{Allowed: false, RetryAfter: time.Second, ResetAfter: 2 * time.Second}},
		{"peek on a new key needs no room", "new0", 0, algo.Result{Allowed: true, Remaining: 2}},
		{"first new key takes from overflow", "new1", 1, algo.Result{Allowed: true, Remaining: 1, ResetAfter: time.Second}},
		{"second new key shares it", "new2", 1, algo.Result{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Second}},
		{"overflow bucket is empty", "new3", 1, algo.Result{Allowed: false, RetryAfter: time.Second, ResetAfter: 2 * time.Second}},
		{"another policy has its own overflow", "new4", 3, algo.Result{Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}},
	}
	for i, st := range steps {
		pol := p
		if st.cost == 3 {
			pol = algo.PerSecond(1).Burst(3)
		}
		if got := take(t, s, st.key, pol, st.cost); got != st.want {
			t.Fatalf("step %d (%s): Take(%q, %d) = %+v, want %+v", i, st.name, st.key, st.cost, got, st.want)
		}
	}
	if n := s.Len(); n != 4 {
		t.Fatalf("Len = %d, want 4: overflowed keys must not be stored", n)
	}

	clk.Add(2 * time.Second) // every stored bucket is full again
	if got := take(t, s, "new5", p, 1); got.Remaining != 1 {
		t.Fatalf("after the old buckets refilled, new key got %+v, want its own bucket", got)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d after the sweep, want 1", n)
	}
}

// TestMaxKeysDropsIdleFirst: at MaxKeys, a new key gets its own bucket as
// soon as some stored bucket is full again; buckets still refilling stay.
func TestMaxKeysDropsIdleFirst(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 3})
	p := algo.PerSecond(1).Burst(4)
	take(t, s, "quick", p, 1) // full again after 1s
	take(t, s, "slow1", p, 4) // after 4s
	take(t, s, "slow2", p, 4)
	clk.Add(time.Second)
	if got := take(t, s, "new", p, 1); got.Remaining != 3 {
		t.Fatalf("new key got %+v, want its own bucket with 3 left", got)
	}
	for _, key := range []string{"slow1", "slow2"} {
		if got := take(t, s, key, p, 0); got.Remaining != 1 {
			t.Fatalf("%s has %d tokens after 1s, want 1: a refilling bucket was evicted", key, got.Remaining)
		}
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 (slow1, slow2, new)", n)
	}
}

// TestSweepFreesIdleKeys rotates through many keys; idle buckets are swept
// out, so Len stays near the number of live ones.
func TestSweepFreesIdleKeys(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1})
	p := algo.PerSecond(10).Burst(10) // refills in 1s
	peak := 0
	for i := range 10_000 {
		take(t, s, fmt.Sprint("k", i), p, 5)
		clk.Add(time.Millisecond) // about 1000 keys live at a time
		peak = max(peak, s.Len())
	}
	if peak > 2500 {
		t.Fatalf("Len peaked at %d with about 1000 live buckets: sweeping does not keep up", peak)
	}
	clk.Add(time.Second)
	for i := range 2000 { // grow past the threshold: the sweep drops the rest
		take(t, s, fmt.Sprint("late", i), p, 5)
	}
	if n := s.Len(); n > 2000 {
		t.Fatalf("Len = %d, want at most the 2000 live buckets", n)
	}
}

// sweptAlgorithms are the algorithms the sweep differential runs on: a
// window's IdleAt decides its sweeping just as the bucket's does.
var sweptAlgorithms = []algo.Algorithm{algo.TokenBucket{}}

// TestSweepNeverChangesADecision compares a store that sweeps from 4
// buckets per shard with a map that never forgets, on random traffic.
func TestSweepNeverChangesADecision(t *testing.T) {
	for _, alg := range sweptAlgorithms {
		t.Run(alg.Name(), func(t *testing.T) {
			if sweeps := sweepDifferential(t, alg); sweeps == 0 {
				t.Fatal("no case swept: the property was not exercised")
			}
		})
	}
}

// sweepDifferential checks the property for alg and returns how many
// Takes shrank the store by more than their own key.
func sweepDifferential(t *testing.T, alg algo.Algorithm) (sweeps int) {
	rapid.Check(t, func(t *rapid.T) {
		clk := storetest.NewClock()
		// One shard: the per-store hash seed must not change what rapid
		// replays.
		s, err := memstore.NewSweeping(memstore.Config{Clock: clk, Shards: 1, Algorithm: alg}, 4)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p := algo.PerSecond(float64(rapid.Int64Range(1, 5).Draw(t, "rate"))).Burst(rapid.Int64Range(1, 5).Draw(t, "burst"))
		ref := map[string]algo.State{}
		nkeys := rapid.IntRange(1, 40).Draw(t, "keys")
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			step := rapid.OneOf(rapid.Int64Range(0, 20), rapid.Int64Range(0, 400)).Draw(t, "ms")
			clk.Add(time.Duration(step) * time.Millisecond)
			key := fmt.Sprint(rapid.IntRange(0, nkeys-1).Draw(t, "key"))
			cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
			before := s.Len()
			got := take(t, s, key, p, cost)
			if s.Len() < before-1 { // more than this key's own deletion
				sweeps++
			}
			var want algo.Result
			ref[key], want, err = alg.Take(p, ref[key], clk.Now().UnixMicro(), cost)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Take(%q, %d) = %+v, never-forgetting reference %+v", key, cost, got, want)
			}
		}
	})
	return sweeps
}

// TestTakeMultiOverflow: in a full store, new keys of one multi-take that
// share a policy share the overflow bucket, applied in order.
func TestTakeMultiOverflow(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 1, MaxKeys: 1})
	p := algo.PerSecond(1).Burst(3)
	take(t, s, "old", p, 1)
	reqs := []store.Request{{Key: "a", Policy: p, Cost: 2}, {Key: "b", Policy: p, Cost: 1}}
	res, err := s.TakeMulti(context.Background(), reqs)
	if err != nil || !res.Allowed || res.Results[1].Remaining != 0 {
		t.Fatalf("TakeMulti = %+v, %v; want admitted, the second seeing the first's charge", res, err)
	}
	if got := take(t, s, "c", p, 1); got.Allowed {
		t.Fatalf("overflow bucket should be empty, got %+v", got)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
}
