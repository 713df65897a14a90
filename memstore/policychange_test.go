package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestPolicyChange: every operation on a bucket whose policy changes
// answers as algo.TokenBucket.Rebase and the operation say, under each
// rule.
func TestPolicyChange(t *testing.T) {
	for _, rule := range []algo.ChangeRule{algo.KeepTokens, algo.Proportional} {
		t.Run(rule.String(), func(t *testing.T) {
			storetest.RunPolicyChange(t, rule, func(t *testing.T, clk *storetest.Clock) store.Store {
				return newStore(t, memstore.Config{Clock: clk, OnPolicyChange: rule})
			})
		})
	}
}

// TestPolicyChangeBadRule: an unknown rule is a config error.
func TestPolicyChangeBadRule(t *testing.T) {
	if _, err := memstore.New(memstore.Config{OnPolicyChange: 7}); err == nil {
		t.Fatal("New accepted OnPolicyChange 7")
	}
}

// TestPolicyChangeTableFull: past memstore.MaxPolicies distinct policies,
// a bucket written under a further one is read as the next call's own
// policy, unconverted (the documented inexact case), while buckets under
// the first policies still convert exactly.
func TestPolicyChangeTableFull(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewMock()
	s := newStore(t, memstore.Config{Clock: clk, Shards: 4})
	first := algo.PerSecond(1).Burst(10)
	if _, err := s.Take(ctx, store.Request{Key: "first", Policy: first, Cost: 4}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < memstore.MaxPolicies; i++ {
		if _, err := s.Take(ctx, store.Request{Key: fmt.Sprint("k", i), Policy: algo.PerHour(1).Burst(int64(i)), Cost: 0}); err != nil {
			t.Fatal(err)
		}
	}
	beyond := algo.PerHour(2).Burst(10)
	if _, err := s.Take(ctx, store.Request{Key: "beyond", Policy: beyond, Cost: 4}); err != nil {
		t.Fatal(err)
	}
	raised := algo.PerSecond(1).Burst(100)
	if res, _ := s.Take(ctx, store.Request{Key: "first", Policy: raised, Cost: 0}); res.Remaining != 6 {
		t.Errorf("a tracked bucket raised to 100 holds %d tokens, want the 6 it kept", res.Remaining)
	}
	// beyond's deficit (4 of its tokens, 4·1800e6 units) read under raised
	// (unit 1e6) is more than the bucket: raised holds none.
	if res, _ := s.Take(ctx, store.Request{Key: "beyond", Policy: raised, Cost: 0}); res.Remaining != 0 {
		t.Errorf("an untracked bucket read under another policy holds %d tokens, want 0 (its deficit read unconverted)", res.Remaining)
	}
}

// A live limit raised at runtime: the bucket keeps the tokens it had and
// refills at the new rate from then on. With algo.Proportional it would
// keep the fraction of a full bucket instead.
func ExampleConfig_onPolicyChange() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk}) // OnPolicyChange: algo.KeepTokens
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	old := algo.PerSecond(1).Burst(10)
	res, _ := s.Take(ctx, store.Request{Key: "tenant-7", Policy: old, Cost: 8})
	fmt.Println("under the old limit:", res.Remaining, "of", old.Capacity())

	raised := algo.PerSecond(10).Burst(100)
	res, _ = s.Take(ctx, store.Request{Key: "tenant-7", Policy: raised, Cost: 0})
	fmt.Println("raised:", res.Remaining, "of", raised.Capacity())
	clk.Add(time.Second)
	res, _ = s.Take(ctx, store.Request{Key: "tenant-7", Policy: raised, Cost: 0})
	fmt.Println("a second later:", res.Remaining, "of", raised.Capacity())
	// Output:
	// under the old limit: 2 of 10
	// raised: 2 of 100
	// a second later: 12 of 100
}
