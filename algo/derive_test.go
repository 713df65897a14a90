package algo_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// TestPropIdleFrom: IdleFrom, read off a Take's Result, equals IdleAt of
// the state that Take returned, for any state, time and cost.
func TestPropIdleFrom(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		s := algo.State{Level: rapid.Int64Range(0, p.Capacity()*p.Unit()).Draw(t, "level"), Stamp: rapid.Int64Range(0, maxT).Draw(t, "stamp")}
		now := rapid.Int64Range(0, maxT).Draw(t, "now")
		st, res := take(t, algo.TokenBucket{}, p, s, now, rapid.Int64Range(0, p.Capacity()).Draw(t, "cost"))
		if got, want := (algo.TokenBucket{}).IdleFrom(p, st, res.ResetAfter, now), (algo.TokenBucket{}).IdleAt(p, st); got != want {
			t.Fatalf("IdleFrom = %d, IdleAt = %d (state %+v, result %+v)", got, want, st, res)
		}
	})
}

// TestPropUncharged: Uncharged of an admitted Take's Result is what a peek
// on the bucket before the charge answers: Remaining exactly, ResetAfter
// at most 1µs late and never early, when the caller's clock is not behind
// the bucket's stamp.
func TestPropUncharged(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		s := algo.State{Level: rapid.Int64Range(0, p.Capacity()*p.Unit()).Draw(t, "level"), Stamp: rapid.Int64Range(0, maxT).Draw(t, "stamp")}
		now := s.Stamp + rapid.Int64Range(0, maxT-s.Stamp).Draw(t, "elapsed")
		cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
		_, res := take(t, algo.TokenBucket{}, p, s, now, cost)
		_, peek := take(t, algo.TokenBucket{}, p, s, now, 0)
		got := algo.TokenBucket{}.Uncharged(p, res, cost)
		if !res.Allowed {
			if got != res {
				t.Fatalf("Uncharged changed a denial: %+v -> %+v", res, got)
			}
			return
		}
		if got.Remaining != peek.Remaining || got.ResetAfter < peek.ResetAfter || got.ResetAfter > peek.ResetAfter+time.Microsecond {
			t.Fatalf("Uncharged(%+v, cost %d) = %+v; the bucket before the charge says %+v", res, cost, got, peek)
		}
	})
}
