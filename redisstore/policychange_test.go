package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

var rules = []algo.ChangeRule{algo.KeepTokens, algo.Proportional}

// TestPolicyChangeConformance: storetest's policy-change state machine
// (client clock: the long form, which names its policy) on a single
// server, on a cluster (multi-takes in one slot, each slot with its own
// registry) and on a Ring of two servers (each with its own), under each
// rule.
func TestPolicyChangeConformance(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	for _, srv := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
		{"ring", startRing},
	} {
		t.Run(srv.name, func(t *testing.T) {
			rdb := srv.rdb(t)
			for _, rule := range rules {
				t.Run(rule.String(), func(t *testing.T) {
					storetest.RunPolicyChange(t, rule, func(t *testing.T, clk *storetest.Clock) store.Store {
						return newStore(t, rdb, redisstore.Config{Clock: clk, Timeout: patience, OnPolicyChange: rule})
					})
				})
			}
		})
	}
}

// TestPolicyChangeServerClock: on the server clock (the integer value
// with the policy's number, read back through the registry) a key used
// under two or three edge policies in turn, and in half the cases two or
// three calendar quotas (two of one calendar, one of them of 1, up to 20
// or 10^12), answers every take, refund, partial grant and reservation as
// algo does with Rebase at each change, at the time the script decided
// at. "numbered" registers the policies as
// they come; "long form" first fills the registry's 100 numbers, so every
// bucket names its policy in full; "cluster" runs on a cluster, where
// each slot has its registry, and "ring" on a Ring of two servers, where
// each shard has its own.
func TestPolicyChangeServerClock(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	for _, tc := range []struct {
		name  string
		rdb   func(t *testing.T) redis.UniversalClient
		flood bool
	}{
		{"numbered", startOne, false},
		{"long form", startOne, true},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }, false},
		{"ring", startRing, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.rdb(t)
			for _, rule := range rules {
				t.Run(rule.String(), func(t *testing.T) { serverClockChanges(t, rdb, rule, tc.flood) })
			}
		})
	}
}

func startOne(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }

// startRing returns a go-redis Ring over two servers of its own.
func startRing(t *testing.T) redis.UniversalClient {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	return ring
}

func serverClockChanges(t *testing.T, rdb redis.UniversalClient, rule algo.ChangeRule, flood bool) {
	ctx := context.Background()
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, OnPolicyChange: rule})
	if flood { // 100 policies take every number of the (single) registry
		for i := range 100 {
			if _, err := s.Take(ctx, store.Request{Key: fmt.Sprint("flood", i), Policy: algo.PerHour(1).Burst(int64(1 + i)), Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run, changes, calls := 0, 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		keys := []string{fmt.Sprintf("{k%d}a", run), fmt.Sprintf("{k%d}b", run)} // one slot, for multi
		pols := []algo.Policy{genEdgePolicy(rt, "a "), genEdgePolicy(rt, "b ")}
		if rapid.Bool().Draw(rt, "third") {
			pols = append(pols, genPolicy(rt))
		}
		if rapid.Bool().Draw(rt, "quotas") { // two of one calendar (the count kept or scaled), maybe one of another
			q := drawQuota(rt)
			period, off, _ := q.Calendar()
			n := rapid.OneOf(rapid.Just(int64(1)), rapid.Int64Range(1, 20), rapid.Just(int64(algo.MaxCapacity))).Draw(rt, "n")
			pols = append(pols, q, algo.Quota(n, period, off))
			if rapid.Bool().Draw(rt, "another calendar") {
				pols = append(pols, drawQuota(rt))
			}
		}
		cur := make([]algo.Policy, 2) // the policy of each key's last call
		st := make([]algo.State, 2)
		var tickets []algo.Ticket // of key 0, with the policy each was made under
		var tpols []algo.Policy
		// convert is key i's reference state for a call under p at the
		// script's now.
		convert := func(i int, p algo.Policy, now int64) algo.State {
			calls++
			if cur[i] == (algo.Policy{}) || cur[i] == p {
				return st[i]
			}
			changes++
			next, err := algo.TokenBucket{}.Rebase(cur[i], p, st[i], now, rule)
			if err != nil {
				rt.Fatalf("Rebase: %v", err)
			}
			return next
		}
		for step := range rapid.IntRange(1, 25).Draw(rt, "ops") {
			i := rapid.IntRange(0, 1).Draw(rt, "key")
			key := keys[i]
			p := rapid.SampledFrom(pols).Draw(rt, "policy")
			var call string
			var got, want any
			var now int64
			var err error
			switch op := rapid.SampledFrom([]string{"take", "take", "refund", "at most", "reserve", "cancel", "multi"}).Draw(rt, "op"); op {
			case "take":
				cost := genEdgeCost(rt, p)
				var res algo.Result
				res, now, err = redisstore.TakeNow(ctx, s, key, p, cost)
				call, got = fmt.Sprintf("Take(%d)", cost), res
				if err == nil {
					st[i], want, err = algo.TokenBucket{}.Take(p, convert(i, p, now), now, cost)
				}
			case "refund":
				n := genEdgeCost(rt, p)
				var res algo.Result
				res, now, err = redisstore.RefundNow(ctx, s, key, p, n)
				call, got = fmt.Sprintf("Refund(%d)", n), res
				if err == nil {
					st[i], want, err = algo.TokenBucket{}.Refund(p, convert(i, p, now), now, n)
				}
			case "at most":
				if p.IsQuota() { // a quota is only taken and refunded
					continue
				}
				n := genAtMost(rt, p)
				var g int64
				var res algo.Result
				g, res, now, err = redisstore.TakeAtMostNow(ctx, s, key, p, n)
				call, got = fmt.Sprintf("TakeAtMost(%d)", n), []any{g, res}
				if err == nil {
					var wg int64
					var w algo.Result
					st[i], wg, w, err = algo.TokenBucket{}.TakeAtMost(p, convert(i, p, now), now, n)
					want = []any{wg, w}
				}
			case "reserve":
				if p.IsQuota() {
					continue
				}
				cost, wait := genEdgeCost(rt, p), genEdgeWait(rt, p)
				var res algo.Reservation
				res, now, err = redisstore.ReserveNow(ctx, s, key, p, cost, wait)
				call, got = fmt.Sprintf("Reserve(%d, %v)", cost, wait), res
				if err == nil {
					var w algo.Reservation
					st[i], w, err = algo.TokenBucket{}.Reserve(p, convert(i, p, now), now, cost, wait.Microseconds())
					want = w
					if i == 0 && w.Ticket != (algo.Ticket{}) {
						tickets, tpols = append(tickets, w.Ticket), append(tpols, p)
					}
				}
			case "cancel": // a ticket of key 0, under the policy it was made with
				if len(tickets) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(tickets)-1).Draw(rt, "ticket")
				i, key, p = 0, keys[0], tpols[j]
				var ok bool
				var res algo.Result
				ok, res, now, err = redisstore.CancelNow(ctx, s, key, p, tickets[j])
				call, got = fmt.Sprintf("CancelReservation(%+v)", tickets[j]), []any{ok, res}
				if err == nil {
					var wok bool
					var w algo.Result
					st[i], wok, w, err = algo.TokenBucket{}.Cancel(p, convert(i, p, now), now, tickets[j])
					want = []any{wok, w}
				}
			case "multi": // both keys, each under a drawn policy
				q := rapid.SampledFrom(pols).Draw(rt, "policy 2")
				reqs := []store.Request{{Key: keys[0], Policy: p, Cost: genEdgeCost(rt, p)}, {Key: keys[1], Policy: q, Cost: genEdgeCost(rt, q)}}
				var res []algo.Result
				res, now, err = redisstore.TakeMultiNow(ctx, s, reqs)
				call, got = fmt.Sprintf("TakeMulti(%v %d, %v %d)", p, reqs[0].Cost, q, reqs[1].Cost), res
				if err != nil {
					break
				}
				conv := []algo.State{convert(0, p, now), convert(1, q, now)}
				next := make([]algo.State, 2)
				w := make([]algo.Result, 2)
				all := true
				for k := range reqs {
					if next[k], w[k], err = (algo.TokenBucket{}).Take(reqs[k].Policy, conv[k], now, reqs[k].Cost); err != nil {
						break
					}
					all = all && w[k].Allowed
				}
				want = w
				for k := range reqs { // all charged, or none: a would-admit bucket keeps its converted state
					if all || !w[k].Allowed {
						st[k] = next[k]
					} else {
						st[k] = conv[k]
					}
					cur[k] = reqs[k].Policy
					st[k] = forget(reqs[k].Policy, st[k], now)
				}
			}
			if err != nil {
				rt.Fatalf("step %d: %s under %v: %v", step, call, p, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				rt.Fatalf("step %d: %s on %s under %v (last call under %v) at %d µs = %+v; algo says %+v", step, call, key, p, cur[i], now, got, want)
			}
			if !strings.HasPrefix(call, "TakeMulti") {
				cur[i], st[i] = p, forget(p, st[i], now)
			}
		}
	})
	t.Logf("rule %v: %d cases, %d calls, %d policy changes", rule, run, calls, changes)
}

// genPolicy draws a plain policy of a few tokens a second to an hour.
func genPolicy(t *rapid.T) algo.Policy {
	periods := []time.Duration{time.Second, 7*time.Second + 3*time.Microsecond, time.Minute, time.Hour}
	r := algo.Per(rapid.Int64Range(1, 10).Draw(t, "tokens"), rapid.SampledFrom(periods).Draw(t, "period"))
	return r.Burst(rapid.Int64Range(1, 50).Draw(t, "capacity"))
}

// TestPolicyChangeMemory measures, on the server clock with a 20-byte
// key, MEMORY USAGE of a bucket written under one policy and then under
// another (a converted bucket is stored as any other: 72 B), of one in
// the long form (past 100 policies), and of the
// registry with 1, 10 and 100 policies:
//
//	go test -run TestPolicyChangeMemory -v ./redisstore/
func TestPolicyChangeMemory(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("measures MEMORY USAGE on a server of its own")
	}
	rdb := srv.Client()
	ctx := context.Background()
	s := newStore(t, rdb, redisstore.Config{Prefix: "rl:"})
	key := "user:000000000042" // "rl:" + 17 bytes: 20 bytes
	a, b := algo.PerSecond(2).Burst(100), algo.PerSecond(20).Burst(1000)
	usage := func(k string) int64 { return rdb.MemoryUsage(ctx, k).Val() }
	reg := "pol:rl:"
	for _, step := range []struct {
		name string
		p    algo.Policy
	}{{"written under A", a}, {"converted to B", b}, {"converted back to A", a}} {
		if _, err := s.Take(ctx, store.Request{Key: key, Policy: step.p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		v := rdb.Get(ctx, s.Key(key)).Val()
		t.Logf("%-22s %q: MEMORY USAGE %d B; registry %d B", step.name, v, usage(s.Key(key)), usage(reg))
		if u := usage(s.Key(key)); u > 72 {
			t.Errorf("%s: %d B, want 72 (an integer value)", step.name, u)
		}
	}
	for i := 3; i <= 100; i++ {
		if _, err := s.Take(ctx, store.Request{Key: fmt.Sprint("other", i), Policy: algo.PerHour(1).Burst(int64(i)), Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if i == 10 || i == 100 {
			t.Logf("registry with %d policies: MEMORY USAGE %d B (%s)", i, usage(reg), rdb.ObjectEncoding(ctx, reg).Val())
		}
	}
	long := algo.PerSecond(3).Burst(100) // the 101st: no number left
	if _, err := s.Take(ctx, store.Request{Key: key, Policy: long, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	v := rdb.Get(ctx, s.Key(key)).Val()
	t.Logf("long form %q: MEMORY USAGE %d B", v, usage(s.Key(key)))
	if !strings.HasPrefix(v, "=") {
		t.Errorf("the 101st policy's bucket holds %q, want the long form", v)
	}
}

// TestResetPolicies: Reset then ResetPolicies leave nothing of a store's
// buckets in Redis, registries included, on a single server, a cluster
// and a Ring (whose two shards each hold a registry first).
func TestResetPolicies(t *testing.T) {
	for _, rdb := range []redis.UniversalClient{redistest.Start(t).Client(), redistest.StartCluster(t).Client(), startRing(t)} {
		s := newStore(t, rdb, redisstore.Config{})
		// Enough keys that a Ring sends some to each shard: the prefix is
		// random, and 8 keys all went to one shard about once in 128
		// runs (CI saw it); 40 leave that at 2^-39.
		keys := []string{"a", "b", "{x}c", "d", "e", "f", "g", "h"}
		for i := range 32 {
			keys = append(keys, fmt.Sprint("k", i))
		}
		for _, k := range keys {
			if _, err := s.Take(ctxT(t), store.Request{Key: k, Policy: algo.PerHour(1).Burst(5), Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if ring, ok := rdb.(*redis.Ring); ok {
			var regs atomic.Int64
			err := ring.ForEachShard(ctxT(t), func(ctx context.Context, c *redis.Client) error {
				n, err := c.Exists(ctx, "pol:"+s.Key("")).Result()
				regs.Add(n)
				return err
			})
			if err != nil || regs.Load() != 2 {
				t.Fatalf("a Ring of 2 shards holds %d registries (%v), want one on each", regs.Load(), err)
			}
		}
		if err := s.Reset(ctxT(t), keys...); err != nil {
			t.Fatal(err)
		}
		if err := s.ResetPolicies(ctxT(t), keys...); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var left []string
		scan := func(ctx context.Context, c *redis.Client) error {
			ks, err := c.Keys(ctx, "*"+s.Key("")+"*").Result()
			mu.Lock()
			defer mu.Unlock()
			left = append(left, ks...)
			return err
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctxT(t), scan) // concurrently, one call per master
		} else if ring, ok := rdb.(*redis.Ring); ok {
			_ = ring.ForEachShard(ctxT(t), scan)
		} else {
			_ = scan(ctxT(t), rdb.(*redis.Client))
		}
		if len(left) != 0 {
			t.Errorf("left in Redis: %q", left)
		}
	}
}
