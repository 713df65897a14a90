package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
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
// encoding, debt included, and returns it: a stamp at most the time to
// refill the deficit ago (less a second, so that the key has not expired
// when it is read), or up to a minute ahead (a server clock that stepped
// back). A full bucket is no key at all.
func seedServer(rt *rapid.T, rdb redis.UniversalClient, key string, p algo.Policy) algo.State {
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
	v, e := serverValue(st.Level, st.Stamp, p.Refill())
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
		if err := rdb.Set(ctx, s.Key("k"), fmt.Sprintf("%d:%d", st.Level, st.Stamp), 0).Err(); err != nil {
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
			got, err := s.Take(ctx, "k", p, cost)
			if err != nil || got != want {
				rt.Fatalf("step %d: Take(%v, %d) from %+v at %d µs = %+v, %v; algo says %+v", step, p, cost, prev, now, got, err, want)
			}
		}
	})
}
