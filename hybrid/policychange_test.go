package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestDenyCachePolicyRaised: a key denied under a small policy, whose
// policy is then raised at runtime, is not denied by the cache's memory of
// the old policy: the first request under the new policy is the primary's
// to answer (as a twin store with the same calls answers it), and once the
// raised bucket refills the cache admits what it holds, at the exact
// RetryAfter, never later.
func TestDenyCachePolicyRaised(t *testing.T) {
	ctx := context.Background()
	clk := storetest.NewClock()
	c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
	twin := newMem(t, clk)
	small, raised := algo.PerMinute(1).Burst(2), algo.PerSecond(10).Burst(20)
	take := func(p algo.Policy, cost int64) algo.Result {
		t.Helper()
		got, err1 := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: cost})
		want, err2 := twin.Take(ctx, store.Request{Key: "k", Policy: p, Cost: cost})
		if err1 != nil || err2 != nil || got != want {
			t.Fatalf("Take(%v, %d) through the cache = %+v, %v; the twin says %+v, %v", p, cost, got, err1, want, err2)
		}
		return got
	}
	take(small, 2)
	for range 5 {
		if res := take(small, 1); res.Allowed {
			t.Fatalf("a third take under %v admitted: %+v", small, res)
		}
	}
	if c.Stats().Denied == 0 {
		t.Fatal("the cache denied nothing locally: the test proves nothing")
	}
	// Raised 100ms later: the bucket keeps the 1/600 token it refilled
	// (KeepTokens), and refills at 10 a second from then.
	clk.Add(100 * time.Millisecond)
	res := take(raised, 1)
	if res.Allowed || res.RetryAfter > 100*time.Millisecond {
		t.Fatalf("take under the raised %v = %+v: want a denial for less than one new token's 100ms", raised, res)
	}
	for range 3 { // the cache learnt the raised policy's denial: still exact
		take(raised, 1)
	}
	clk.Add(res.RetryAfter)
	if res := take(raised, 1); !res.Allowed {
		t.Fatalf("take under %v at its RetryAfter = %+v", raised, res)
	}
	clk.Add(time.Second) // ten tokens more under the raised rate
	if res := take(raised, 10); !res.Allowed {
		t.Fatalf("take of 10 a second later under %v = %+v", raised, res)
	}
}

// TestDenyCachePolicyChanges: random takes under two policies of one key,
// through a cache over a memstore and directly on a twin memstore with the
// same clock, give identical answers: the cache never answers a request
// under one policy from what it learnt under another, and its denials
// under either are exact.
func TestDenyCachePolicyChanges(t *testing.T) {
	ctx := context.Background()
	local, changes := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		clk := storetest.NewClock()
		c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
		twin := newMem(t, clk)
		pols := []algo.Policy{
			algo.PerSecond(float64(rapid.Int64Range(1, 5).Draw(rt, "rate a"))).Burst(rapid.Int64Range(1, 5).Draw(rt, "burst a")),
			algo.PerSecond(float64(rapid.Int64Range(1, 50).Draw(rt, "rate b"))).Burst(rapid.Int64Range(1, 50).Draw(rt, "burst b")),
		}
		var last algo.Policy
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			clk.Add(time.Duration(rapid.Int64Range(0, 300_000).Draw(rt, "µs")) * time.Microsecond)
			p := pols[rapid.IntRange(0, 1).Draw(rt, "policy")]
			if last != (algo.Policy{}) && p != last {
				changes++
			}
			last = p
			cost := rapid.Int64Range(1, p.Capacity()).Draw(rt, "cost")
			before := c.Stats().Denied
			got, err1 := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: cost})
			want, err2 := twin.Take(ctx, store.Request{Key: "k", Policy: p, Cost: cost})
			if err1 != nil || err2 != nil || got != want {
				rt.Fatalf("step %d: Take(%v, %d) through the cache = %+v, %v; the twin says %+v, %v", step, p, cost, got, err1, want, err2)
			}
			if c.Stats().Denied > before {
				local++
			}
		}
	})
	t.Logf("%d policy changes, %d local denials, all as the twin answered", changes, local)
}
