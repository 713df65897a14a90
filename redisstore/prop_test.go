package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// genEdgePolicy draws a valid policy, favouring the edges of algo's
// bounds: capacity 1 and 1e9, one token a day, a million and a billion a
// second, and periods that make Unit large.
func genEdgePolicy(t *rapid.T, label string) algo.Policy {
	rate := rapid.OneOf(
		rapid.Just(algo.PerDay(1)),
		rapid.Just(algo.PerSecond(1_000_000)),
		rapid.Just(algo.PerSecond(algo.MaxPerSecond)),
		rapid.Just(algo.PerSecond(1)),
		rapid.Custom(func(t *rapid.T) algo.Rate {
			per := rapid.SampledFrom([]time.Duration{time.Microsecond, 7 * time.Millisecond, time.Second,
				time.Minute, time.Hour, 24 * time.Hour, algo.MaxPeriod}).Draw(t, "period")
			return algo.Per(rapid.Int64Range(1, 1000).Draw(t, "tokens"), per)
		}),
	).Draw(t, label+"rate")
	capacity := rapid.OneOf(
		rapid.Just(int64(1)),
		rapid.Just(int64(1_000_000_000)),
		rapid.Just(int64(-1)), // the largest the rate allows: full near 2^52
		rapid.Int64Range(1, 100),
		rapid.Int64Range(1, algo.MaxCapacity),
	).Draw(t, label+"capacity")
	if capacity == -1 {
		unit := rate.Period.Microseconds() / gcd(rate.Tokens, rate.Period.Microseconds())
		capacity = min(algo.MaxCapacity, algo.MaxLevel/unit)
	}
	p, err := algo.NewPolicy(capacity, rate)
	for err != nil && capacity > 1 { // too large for this rate: shrink to fit
		capacity /= 7
		p, err = algo.NewPolicy(capacity, rate)
	}
	if err != nil {
		t.Skipf("no valid policy at %v", rate)
	}
	return p
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// genEdgeStep draws a clock move: none, a microsecond or a few, about one
// token's refill, up to two fill times, a long idle gap, or a step back.
func genEdgeStep(t *rapid.T, p algo.Policy) time.Duration {
	token := (p.Unit() + p.Refill() - 1) / p.Refill()
	fill := min(p.FillTime().Microseconds(), 400*365*24*3600*1e6/2)
	us := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(1, 3),
		rapid.Int64Range(max(token-1, 0), token+1),
		rapid.Int64Range(0, 2*fill),
		rapid.Int64Range(0, 30*365*24*3600*1e6), // idle for up to 30 years
		rapid.Int64Range(-2*token-5, -1),
		rapid.Int64Range(-365*24*3600*1e6, -1), // a clock up to a year behind
	).Draw(t, "step")
	return time.Duration(us) * time.Microsecond
}

func genEdgeCost(t *rapid.T, p algo.Policy) int64 {
	return rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Just(int64(1)),
		rapid.Just(p.Capacity()),
		rapid.Int64Range(0, p.Capacity()),
	).Draw(t, "cost")
}

// forget is what both stores do with a bucket that is full at now: drop
// it. (A full bucket whose stamp is ahead of a caller's clock that later
// steps back would report a ResetAfter longer by the difference; forgetting
// it is the documented freedom of a store.)
func forget(p algo.Policy, s algo.State, now int64) algo.State {
	if (algo.TokenBucket{}).IdleAt(p, s) <= now {
		return algo.State{}
	}
	return s
}

// TestDifferential drives algo.TokenBucket, memstore and redisstore (client
// clock) with one random sequence of takes, multi-takes and clock moves
// over three keys, and requires identical Results at every step.
func TestDifferential(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		clk := storetest.NewClock()
		rs := newStore(t, rdb, redisstore.Config{Clock: clk, Prefix: fmt.Sprintf("%srun%d:", redistest.Prefix(t), run), TTLMargin: time.Hour})
		ms, err := memstore.New(memstore.Config{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer ms.Close()
		keys := []string{"{u}:a", "{u}:b", "{u}:c"}
		pols := []algo.Policy{genEdgePolicy(rt, "a "), genEdgePolicy(rt, "b "), genEdgePolicy(rt, "c ")}
		states := make([]algo.State, 3)
		ctx := context.Background()
		n := rapid.IntRange(1, 50).Draw(rt, "ops")
		for step := range n {
			i := rapid.IntRange(0, 2).Draw(rt, "key")
			now := clk.Add(genEdgeStep(rt, pols[i]))
			if now.UnixMicro() < 0 || now.UnixMicro() > algo.MaxTime {
				clk.Set(storetest.Start)
				now = storetest.Start
			}
			at := now.UnixMicro()
			if rapid.IntRange(0, 4).Draw(rt, "multi") == 0 {
				reqs := []store.Request{{Key: keys[i], Policy: pols[i], Cost: genEdgeCost(rt, pols[i])}}
				if j := (i + 1 + rapid.IntRange(0, 1).Draw(rt, "other")) % 3; rapid.Bool().Draw(rt, "two") {
					reqs = append(reqs, store.Request{Key: keys[j], Policy: pols[j], Cost: genEdgeCost(rt, pols[j])})
				}
				want := store.MultiResult{Allowed: true, Denied: -1, Results: make([]algo.Result, len(reqs))}
				next := make([]algo.State, len(reqs))
				idx := make([]int, len(reqs))
				for j, r := range reqs {
					idx[j] = (map[string]int{keys[0]: 0, keys[1]: 1, keys[2]: 2})[r.Key]
					next[j], want.Results[j], err = algo.TokenBucket{}.Take(r.Policy, states[idx[j]], at, r.Cost)
					if err != nil {
						rt.Fatalf("algo: %v", err)
					}
					if r := want.Results[j]; !r.Allowed && (want.Denied < 0 || r.RetryAfter > want.RetryAfter) {
						want.Allowed, want.Denied, want.RetryAfter = false, j, r.RetryAfter
					}
				}
				for j := range reqs { // denied: only the denying buckets move on
					if want.Allowed || !want.Results[j].Allowed {
						states[idx[j]] = forget(reqs[j].Policy, next[j], at)
					}
				}
				gotM, errM := ms.TakeMulti(ctx, reqs)
				gotR, errR := rs.TakeMulti(ctx, reqs)
				if errM != nil || errR != nil {
					rt.Fatalf("step %d TakeMulti(%+v): memstore %v, redisstore %v", step, reqs, errM, errR)
				}
				if fmt.Sprint(gotM) != fmt.Sprint(want) || fmt.Sprint(gotR) != fmt.Sprint(want) {
					rt.Fatalf("step %d at %d: TakeMulti(%+v):\nalgo      %+v\nmemstore  %+v\nredisstore %+v", step, at, reqs, want, gotM, gotR)
				}
				continue
			}
			cost := genEdgeCost(rt, pols[i])
			var want algo.Result
			states[i], want, err = algo.TokenBucket{}.Take(pols[i], states[i], at, cost)
			if err != nil {
				rt.Fatalf("algo: %v", err)
			}
			states[i] = forget(pols[i], states[i], at)
			gotM, errM := ms.Take(ctx, keys[i], pols[i], cost)
			gotR, errR := rs.Take(ctx, keys[i], pols[i], cost)
			if errM != nil || errR != nil {
				rt.Fatalf("step %d Take: memstore %v, redisstore %v", step, errM, errR)
			}
			if gotM != want || gotR != want {
				rt.Fatalf("step %d at %d: Take(%s, %v, %d):\nalgo       %+v\nmemstore   %+v\nredisstore %+v\nstate %+v",
					step, at, keys[i], pols[i], cost, want, gotM, gotR, states[i])
			}
		}
	})
}

// TestServerClockMatchesAlgo replays every server-clock Take through algo
// at the time the script used (TakeNow returns Redis's TIME), from a state
// written in the wire encoding (seedServer: debt included, or none): the
// Results must be identical, denials and peeks included. After a charge, whose
// stamp is that time, the stored state (the stamp rebuilt from the key's
// expiry) must be algo's too, and the key must expire at the first
// millisecond at which the bucket is full. This covers the script's fast
// path, which only the server clock's one-key take runs, and its fall
// through to the general path for deficits too long for it (≥ 1e11 level
// units, which the edge policies reach).
func TestServerClockMatchesAlgo(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{})
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		key := fmt.Sprintf("k%d", run)
		p := genEdgePolicy(rt, "")
		st := seedServer(rt, rdb, s.Key(key), p)
		for step := range rapid.IntRange(1, 30).Draw(rt, "ops") {
			cost := genEdgeCost(rt, p)
			got, now, err := redisstore.TakeNow(ctx, s, key, p, cost)
			if err != nil {
				rt.Fatal(err)
			}
			prev := st
			var want algo.Result
			if st, want, err = (algo.TokenBucket{}).Take(p, st, now, cost); err != nil {
				rt.Fatal(err)
			}
			if got != want {
				rt.Fatalf("step %d: Take(%v, %d) from %+v at %d µs = %+v; algo says %+v", step, p, cost, prev, now, got, want)
			}
			after, err := s.Inspect(ctx, key, p)
			if err != nil {
				rt.Fatal(err)
			}
			if !got.Allowed || cost == 0 || !after.Exists {
				continue // not charged: the key holds an earlier state, or none
			}
			if stored := (algo.State{Level: after.Deficit, Stamp: after.Stamp.UnixMicro()}); stored != st {
				rt.Fatalf("step %d: Take(%v, %d) at %d µs stored %+v; algo says %+v", step, p, cost, now, stored, st)
			}
			// The key expires at the first millisecond at which the bucket is full.
			idle := algo.TokenBucket{}.IdleAt(p, st)
			// (In ms, not as a Duration: a debt's expiry may pass the year 2262.)
			exp, err := rdb.Do(ctx, "PEXPIRETIME", s.Key(key)).Int64()
			if err == nil && exp == -2 { // expired since: real time runs on
				continue
			}
			if err != nil || exp != (idle+999)/1000 {
				rt.Fatalf("step %d: PEXPIRETIME %v (%v), want %d ms: the bucket is full at %d µs", step, exp, err, (idle+999)/1000, idle)
			}
		}
	})
}
