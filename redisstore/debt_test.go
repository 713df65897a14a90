package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// genStoredLevel draws a stored deficit under p: none, part of the
// bucket, debt (above full, up to one more bucket), or more than two
// buckets (a shrunk policy's), which algo reads as two; never above 2^53,
// which the script reports as corrupt.
func genStoredLevel(t *rapid.T, p algo.Policy) int64 {
	full := p.Capacity() * p.Unit()
	return rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, full),
		rapid.Int64Range(full, 2*full),
		rapid.Just(2*full),
		rapid.Int64Range(2*full, min(3*full, 1<<53)),
	).Draw(t, "stored deficit")
}

// seedServer writes a state drawn for p at key in the server-clock
// encoding (its policy by number in the registry reg, or in full), debt
// included, and returns it: a stamp at most the time to
// refill the deficit ago (less a second, so that the key has not expired
// when it is read), or up to a minute ahead (a server clock that stepped
// back). A full bucket is no key at all.
func seedServer(rt *rapid.T, rdb redis.UniversalClient, key, reg string, p algo.Policy) algo.State {
	ctx := context.Background()
	st := algo.State{Level: genStoredLevel(rt, p)}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		rt.Fatal(err)
	}
	fill := (min(st.Level, 2*p.Capacity()*p.Unit()) + p.Refill() - 1) / p.Refill()
	back := rapid.Int64Range(-time.Minute.Microseconds(), min(now.UnixMicro(), max(0, fill-time.Second.Microseconds()))).Draw(rt, "stamp µs ago")
	if st.Level == 0 {
		return algo.State{}
	}
	st.Stamp = now.UnixMicro() - back
	n := int64(-1) // the long form, or the short one with the policy's number
	if rapid.Bool().Draw(rt, "short") && st.Level < 92233720368547 {
		n = number(rt, rdb, reg, p)
	}
	v, e := serverValue(st.Level, st.Stamp, p, n)
	if err := rdb.Do(ctx, "SET", key, v, "PXAT", e).Err(); err != nil {
		rt.Fatal(err)
	}
	return st
}

// TestStoredStatesMatchAlgo writes states in the client-clock encoding,
// debt included, and replays takes and peeks on them through algo, with
// the clock moving forwards and back: the script reads a deficit up to
// 2^53 as algo does (at most one bucket of debt kept, peeks admitted in
// debt, Remaining 0, RetryAfter and ResetAfter counting the debt).
// TestServerClockMatchesAlgo starts from such states in the server-clock
// encoding.
func TestStoredStatesMatchAlgo(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		clk := storetest.NewClock()
		s := newStore(t, rdb, redisstore.Config{Clock: clk, Prefix: fmt.Sprintf("%s%d:", redistest.Prefix(t), run), TTLMargin: -1})
		p := genEdgePolicy(rt, "")
		st := algo.State{Level: genStoredLevel(rt, p), Stamp: min(max(clk.Now().UnixMicro()+genEdgeStep(rt, p).Microseconds(), 0), algo.MaxTime)}
		if err := rdb.Set(ctx, s.Key("k"), clientValue(st.Level, st.Stamp, p), 0).Err(); err != nil {
			rt.Fatal(err)
		}
		for step := range rapid.IntRange(1, 20).Draw(rt, "ops") {
			now := clk.Add(genEdgeStep(rt, p)).UnixMicro()
			if now < 0 || now > algo.MaxTime {
				clk.Set(storetest.Start)
				now = storetest.Start.UnixMicro()
			}
			cost := genEdgeCost(rt, p)
			prev := st
			var want algo.Result
			var err error
			if st, want, err = (algo.TokenBucket{}).Take(p, st, now, cost); err != nil {
				rt.Fatal(err)
			}
			st = forget(p, st, now)
			got, err := s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: cost})
			if err != nil || got != want {
				rt.Fatalf("step %d: Take(%v, %d) from %+v at %d µs = %+v, %v; algo says %+v", step, p, cost, prev, now, got, err, want)
			}
		}
	})
}

// TestPast2To53 pins the two sums the script forms in parts because they
// may pass 2^53, where Lua's doubles skip odd integers: a ResetAfter of
// 2^53 µs and more (a clock lagging a bucket in debt whose fill time is
// near algo's bound: 52124 tokens at one a day take 142 years to refill),
// which the script packs from digits, and a Ticket's At past 2^53 (a
// reservation made near algo.MaxTime), which it packs and reads as digits.
// algo, memstore and redisstore (client clock) answer alike, to the µs.
func TestPast2To53(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	type step struct {
		at   int64 // µs
		op   string
		cost int64
	}
	day := algo.PerDay(1).Burst(52124)
	tests := []struct {
		name  string
		p     algo.Policy
		steps []step
	}{
		{"reset past 2^53", day, []step{
			{storetest.Start.UnixMicro(), "take", 52124},
			{storetest.Start.UnixMicro(), "reserve", 52124},              // debt: 2·full = 9007027200000000 µs to refill
			{storetest.Start.UnixMicro() - 365*24*3600e6 - 1, "take", 0}, // a year and 1 µs behind: 9038563200000001 µs
			{storetest.Start.UnixMicro() - 1, "take", 1},
			{storetest.Start.UnixMicro() + 1, "cancel", 0},
		}},
		{"At past 2^53", algo.PerSecond(1).Burst(1), []step{
			{algo.MaxTime - 10, "take", 1},
			{algo.MaxTime - 10, "reserve", 1}, // At = 2^53 + 999989
			{algo.MaxTime - 11, "take", 0},
			{algo.MaxTime - 9, "cancel", 0}, // gives it back
			{algo.MaxTime, "take", 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := storetest.NewClock()
			rs := newStore(t, rdb, redisstore.Config{Clock: clk, TTLMargin: -1})
			ms, err := memstore.New(memstore.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			var st algo.State
			var tk algo.Ticket
			for i, s := range tc.steps {
				clk.Set(time.UnixMicro(s.at))
				var want, gotM, gotR any
				var errM, errR error
				switch s.op {
				case "take":
					var w algo.Result
					st, w, err = algo.TokenBucket{}.Take(tc.p, st, s.at, s.cost)
					want = w
					gotM, errM = ms.Take(ctx, store.Request{Key: "k", Policy: tc.p, Cost: s.cost})
					gotR, errR = rs.Take(ctx, store.Request{Key: "k", Policy: tc.p, Cost: s.cost})
				case "reserve":
					var w algo.Reservation
					st, w, err = algo.TokenBucket{}.Reserve(tc.p, st, s.at, s.cost, tc.p.MaxDelay().Microseconds())
					want, tk = w, w.Ticket
					gotM, errM = ms.Reserve(ctx, store.Request{Key: "k", Policy: tc.p, Cost: s.cost}, tc.p.MaxDelay())
					gotR, errR = rs.Reserve(ctx, store.Request{Key: "k", Policy: tc.p, Cost: s.cost}, tc.p.MaxDelay())
				case "cancel":
					var ok bool
					var w algo.Result
					st, ok, w, err = algo.TokenBucket{}.Cancel(tc.p, st, s.at, tk)
					want = []any{ok, w}
					okM, resM, eM := ms.CancelReservation(ctx, "k", tc.p, tk)
					okR, resR, eR := rs.CancelReservation(ctx, "k", tc.p, tk)
					gotM, gotR, errM, errR = []any{okM, resM}, []any{okR, resR}, eM, eR
				}
				if err != nil || errM != nil || errR != nil {
					t.Fatalf("step %d (%s at %d): algo %v, memstore %v, redisstore %v", i, s.op, s.at, err, errM, errR)
				}
				if fmt.Sprint(gotM) != fmt.Sprint(want) || fmt.Sprint(gotR) != fmt.Sprint(want) {
					t.Fatalf("step %d (%s(%d) at %d):\nalgo       %+v\nmemstore   %+v\nredisstore %+v", i, s.op, s.cost, s.at, want, gotM, gotR)
				}
				t.Logf("step %d: %s(%d) at %d: %+v", i, s.op, s.cost, s.at, want)
			}
		})
	}
}
