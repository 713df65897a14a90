package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// quotaScript is the bucket script, called directly to see the now it
// decided at (the reply's first element).
func quotaScript(t *testing.T) packedScript {
	t.Helper()
	src, err := os.ReadFile("tokenbucket.lua")
	if err != nil {
		t.Fatal(err)
	}
	return packedScript{redis.NewScript(string(src))}
}

// packedScript runs a script whose reply is packed integers (WIRE.md, "The
// script") and reads them.
type packedScript struct{ s *redis.Script }

// Run runs the script and reads its reply.
func (p packedScript) Run(ctx context.Context, rdb redis.Scripter, keys []string, args ...any) packedReply {
	reply, err := p.s.Run(ctx, rdb, keys, args...).Text()
	if err != nil {
		return packedReply{err: err}
	}
	v, err := redisstore.Ints(reply)
	return packedReply{v, err}
}

// packedReply is a packedScript's reply, read as go-redis's commands read
// theirs.
type packedReply struct {
	v   []int64
	err error
}

// Err returns the call's error.
func (r packedReply) Err() error { return r.err }

// Int64Slice returns the integers.
func (r packedReply) Int64Slice() ([]int64, error) { return r.v, r.err }

// Result returns the integers as a go-redis Cmd would: a []any of int64.
func (r packedReply) Result() (any, error) {
	a := make([]any, len(r.v))
	for i, x := range r.v {
		a[i] = x
	}
	return a, r.err
}

// quotaReply is one key's answer under p: the script's now and the Result.
func quotaReply(t *rapid.T, v any, p algo.Policy) (int64, algo.Result) {
	now, _, res := multiReply(t, v, p)
	return now, res[0]
}

// multiReply reads the reply of a call on one key per policy in ps: the script's now,
// whether all admitted, and each key's Result.
func multiReply(t *rapid.T, v any, ps ...algo.Policy) (int64, bool, []algo.Result) {
	n := len(ps)
	r, ok := v.([]any)
	if !ok || len(r) < 2+4*n {
		t.Fatalf("reply %v", v)
	}
	x := make([]int64, 2+4*n)
	for i := range x {
		if x[i], ok = r[i].(int64); !ok {
			t.Fatalf("reply %v: element %d is %T", v, i, r[i])
		}
	}
	res := make([]algo.Result, n)
	for k := range res {
		f := x[2+4*k:]
		res[k] = algo.Result{Allowed: f[0] == 1, Remaining: f[1], RetryAfter: algo.Micros(f[2]), ResetAfter: algo.Micros(f[3])}
	}
	return x[0], x[1] == 1, res
}

// drawQuota draws a valid quota of at most 10 per period.
func drawQuota(t *rapid.T) algo.Policy {
	p := algo.Quota(rapid.Int64Range(1, 10).Draw(t, "n"),
		algo.CalendarPeriod(rapid.IntRange(1, 3).Draw(t, "period")),
		time.Duration(rapid.Int64Range(-86399, 86399).Draw(t, "offset s"))*time.Second)
	err := p.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQuotaServerClock checks the server-clock path of quotas on
// standalone Redis and on a Cluster: random takes, alone and in
// multi-takes beside a token bucket, on the script's own clock (TIME)
// give algo's Results at the now the script reports (all or nothing
// charged), that now lies between two readings of Redis's TIME, and the
// key's PEXPIRETIME is the end of the period algo computes, in ms.
func TestQuotaServerClock(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	for _, c := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb, script, prefix := c.rdb(t), quotaScript(t), redistest.Prefix(t)
			ctx := context.Background()
			serverNow := func(t *rapid.T, key string) int64 {
				var tm time.Time
				var err error
				if cc, ok := rdb.(*redis.ClusterClient); ok {
					var node *redis.Client
					if node, err = cc.MasterForKey(ctx, key); err == nil {
						tm, err = node.Time(ctx).Result()
					}
				} else {
					tm, err = rdb.(*redis.Client).Time(ctx).Result()
				}
				if err != nil {
					t.Fatal(err)
				}
				return tm.UnixMicro()
			}
			i := 0
			rapid.Check(t, func(t *rapid.T) {
				p := drawQuota(t)
				i++
				key := fmt.Sprintf("%s{%d}quota", prefix, i)
				reg := fmt.Sprintf("pol:%s{%d}", prefix, i) // a registry in the keys' slot
				var s algo.State
				bucket := fmt.Sprintf("%s{%d}burst", prefix, i)
				bp := algo.PerSecond(float64(rapid.Int64Range(1, 1000).Draw(t, "rate"))).Burst(rapid.Int64Range(1, 10).Draw(t, "burst"))
				var bs algo.State
				for range rapid.IntRange(1, 8).Draw(t, "takes") {
					cost := rapid.Int64Range(0, p.Capacity()).Draw(t, "cost")
					if rapid.Bool().Draw(t, "multi") {
						bcost := rapid.Int64Range(0, bp.Capacity()).Draw(t, "bucket cost")
						v, err := script.Run(ctx, rdb, []string{bucket, key, reg}, "sm", policyField(bp), bcost, policyField(p), cost).Result()
						if err != nil {
							t.Fatalf("script: %v", err)
						}
						now, all, got := multiReply(t, v, bp, p)
						bs2, bwant, err1 := algo.TokenBucket{}.Take(bp, bs, now, bcost)
						s2, qwant, err2 := algo.TokenBucket{}.Take(p, s, now, cost)
						if err1 != nil || err2 != nil {
							t.Fatal(err1, err2)
						}
						if all != (bwant.Allowed && qwant.Allowed) || got[0] != bwant || got[1] != qwant {
							t.Fatalf("multi %v cost %d, %v cost %d at %d: script %v %+v, algo %+v %+v", bp, bcost, p, cost, now, all, got, bwant, qwant)
						}
						if all {
							bs, s = bs2, s2
						}
						continue
					}
					before := serverNow(t, key)
					v, err := script.Run(ctx, rdb, []string{key, reg}, policyField(p), cost).Result()
					if err != nil {
						t.Fatalf("script: %v", err)
					}
					after := serverNow(t, key)
					now, got := quotaReply(t, v, p)
					if now < before || now > after {
						t.Fatalf("script's now %d outside Redis TIME [%d, %d]", now, before, after)
					}
					var want algo.Result
					s, want, err = algo.TokenBucket{}.Take(p, s, now, cost)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("%v, cost %d at %d: script %+v, algo %+v", p, cost, now, got, want)
					}
					exp, err := rdb.PExpireTime(ctx, key).Result()
					if err != nil {
						t.Fatal(err)
					}
					_, end := p.QuotaPeriod(now)
					switch {
					case s.Level > 0 && exp != time.Duration(end/1000)*time.Millisecond:
						t.Fatalf("%v: PEXPIRETIME %v, want the period's end %d ms", p, exp, end/1000)
					case s.Level == 0 && exp != -2: // a count of 0 is no key
						t.Fatalf("%v: count 0 but PEXPIRETIME %v", p, exp)
					}
				}
			})
		})
	}
}

// TestQuotaClientClockBoundaries has the script compute period ends from a
// given now (the client clock: the same function the server clock calls),
// for random instants up to 2^53 µs and random quotas, and checks them
// against package time: a take's ResetAfter is the end of the period in
// the quota's zone, as time.Date says.
func TestQuotaClientClockBoundaries(t *testing.T) {
	rdb, script, prefix := redistest.Start(t).Client(), quotaScript(t), redistest.Prefix(t)
	ctx := context.Background()
	i := 0
	rapid.Check(t, func(t *rapid.T) {
		p := drawQuota(t)
		period, off, _ := p.Calendar()
		now := rapid.Int64Range(0, algo.MaxTime).Draw(t, "now")
		if rapid.Bool().Draw(t, "near a month's end") {
			at := time.UnixMicro(now).In(time.FixedZone("q", int(off/time.Second)))
			first := time.Date(at.Year(), at.Month()+1, 1, 0, 0, 0, 0, at.Location()).UnixMicro()
			now = min(max(first+rapid.Int64Range(-2, 1).Draw(t, "µs from the 1st"), 0), algo.MaxTime)
		}
		i++
		key := fmt.Sprintf("%s%d", prefix, i)
		v, err := script.Run(ctx, rdb, []string{key, "pol:" + prefix}, "ct", now, -1, policyField(p), 1).Result()
		if err != nil {
			t.Fatalf("script: %v", err)
		}
		_, got := quotaReply(t, v, p)
		zone := time.FixedZone("q", int(off/time.Second))
		at := time.UnixMicro(now).In(zone)
		var end time.Time
		switch period {
		case algo.Day:
			end = time.Date(at.Year(), at.Month(), at.Day()+1, 0, 0, 0, 0, zone)
		case algo.Week:
			end = time.Date(at.Year(), at.Month(), at.Day()+7-(int(at.Weekday())+6)%7, 0, 0, 0, 0, zone)
		case algo.Month:
			end = time.Date(at.Year(), at.Month()+1, 1, 0, 0, 0, 0, zone)
		}
		if want := time.Duration(end.UnixMicro()-now) * time.Microsecond; !got.Allowed || got.ResetAfter != want {
			t.Fatalf("%v at %v: script %+v, want reset after %v (until %v)", p, at, got, want, end)
		}
		rdb.Del(ctx, key)
	})
}

// TestQuotaMemory reports what one quota costs Redis on the server clock,
// at a 20-byte key: MEMORY USAGE, which must not exceed a bucket's 72 B.
func TestQuotaMemory(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: "rl:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	key := fmt.Sprintf("user:%012d", time.Now().UnixNano()%1e12) // 17 bytes, 20 with the prefix
	if _, err := s.Take(ctx, store.Request{Key: key, Policy: algo.Quota(10_000, algo.Month, 0), Cost: 1}); err != nil {
		t.Fatal(err)
	}
	usage, err := rdb.MemoryUsage(ctx, "rl:"+key).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a quota of 10,000 a month at a 20-byte key: MEMORY USAGE %d B", usage)
	if usage > 72 {
		t.Errorf("MEMORY USAGE %d B, more than a bucket's 72 B", usage)
	}
	rdb.Del(ctx, "rl:"+key)
}

// TestQuotaWireExamples checks WIRE.md's worked examples of a quota's
// policy words, and that the script decides a quota given as those words.
func TestQuotaWireExamples(t *testing.T) {
	for _, c := range []struct {
		p      algo.Policy
		refill int64
	}{
		{algo.Quota(10_000, algo.Month, 0), -345599},
		{algo.Quota(500, algo.Day, 5*time.Hour+30*time.Minute), -424797},
	} {
		if c.p.Capacity() < 1 || c.p.Unit() != 0 || c.p.Refill() != c.refill {
			t.Errorf("%v: words %d, %d, %d; WIRE.md says refill %d", c.p, c.p.Capacity(), c.p.Unit(), c.p.Refill(), c.refill)
		}
	}
	rdb, script := redistest.Start(t).Client(), quotaScript(t)
	key := redistest.Prefix(t) + "wire"
	now := time.Date(2026, 2, 28, 18, 29, 59, 0, time.UTC) // 23:59:59 at UTC+05:30
	v, err := script.Run(context.Background(), rdb, []string{key, key + ":reg"}, "ct", now.UnixMicro(), -1, "500:0:-424797", 500).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{now.UnixMicro(), 1, 1, 0, 0, time.Second.Microseconds()}; fmt.Sprint(v) != fmt.Sprint(want) {
		t.Errorf("reply %v, want %v: admitted, none left, the day ends in 1s", v, want)
	}
}

// TestQuotaCorrupt: a quota's key that holds something else is repaired
// as the period of now, spent (denied until its end), and reported with
// its kind; under "k" the call fails with RBCORRUPT and the key is kept.
// A count above the quota (a quota that shrank) reads as the quota, as
// algo reads it.
func TestQuotaCorrupt(t *testing.T) {
	rdb, script, prefix := redistest.Start(t).Client(), quotaScript(t), redistest.Prefix(t)
	ctx := context.Background()
	p := algo.Quota(10, algo.Day, 0)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).UnixMicro()
	_, end := p.QuotaPeriod(now)
	for i, c := range []struct {
		name  string
		clock string // "s" or "c"
		write func(key string)
		kind  int64
	}{
		{"a hash", "c", func(k string) { rdb.HSet(ctx, k, "tokens", 1) }, 1},
		{"server-clock digits read by a client clock", "c", func(k string) { rdb.Set(ctx, k, "3", 0) }, 2},
		{"garbage, client clock", "c", func(k string) { rdb.Set(ctx, k, "3:x", 0) }, 3},
		{"a draft's client-clock value", "c", func(k string) { rdb.Set(ctx, k, "3:99", 0) }, 3},
		{"a client-clock value read by the server clock", "s", func(k string) { rdb.Set(ctx, k, "3:99:10:0:-345597", time.Hour) }, 2},
		{"garbage, server clock", "s", func(k string) { rdb.Set(ctx, k, "-3", time.Hour) }, 3},
		{"digits with no expiry", "s", func(k string) { rdb.Set(ctx, k, "3", 0) }, 4},
	} {
		key := fmt.Sprintf("%s%d", prefix, i)
		args := func(call string) []any {
			if c.clock == "s" {
				return []any{call, policyField(p), 1}
			}
			return []any{call, now, -1, policyField(p), 1}
		}
		keys := []string{key, "pol:" + prefix}
		c.write(key)
		if err := script.Run(ctx, rdb, keys, args(c.clock+"tk")...).Err(); err == nil || !strings.HasPrefix(err.Error(), "RBCORRUPT") {
			t.Errorf("%s, kept: %v, want RBCORRUPT", c.name, err)
		}
		v, err := script.Run(ctx, rdb, keys, args(c.clock+"t")...).Int64Slice()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		at := now
		if c.clock == "s" {
			at = v[0]
			_, end = p.QuotaPeriod(at)
		}
		if want := []int64{at, 0, 0, 0, end - at, end - at, 1, c.kind}; fmt.Sprint(v) != fmt.Sprint(want) {
			t.Errorf("%s: reply %v, want %v: spent until the period ends, key 1 repaired (kind %d)", c.name, v, want, c.kind)
		}
	}
	// A count of 50 under a quota of 10 reads as 10.
	key := prefix + "shrunk"
	rdb.Set(ctx, key, fmt.Sprintf("50:%d:%s", end, policyField(p)), 0)
	v, err := script.Run(ctx, rdb, []string{key, "pol:" + prefix}, "ct", now, -1, policyField(p), 0).Int64Slice()
	_, want, _ := algo.TokenBucket{}.Take(p, algo.State{Level: 50, Stamp: end}, now, 0)
	if err != nil || v[3] != want.Remaining || v[5] != want.ResetAfter.Microseconds() {
		t.Errorf("a count of 50 under 10: reply %v, %v; algo says %+v", v, err, want)
	}
}

// TestQuotaValuesWithRegistry: a quota's value names its policy: on the
// server clock the short value of its number (count*10^5 + number: u = 0)
// with PEXPIREAT at the period's end, on the client clock
// "<count>:<end>:<capacity>:0:<refill>". A value of another quota of the
// same calendar keeps its count; one of another calendar (or a bucket's)
// starts afresh, as algo.TokenBucket.Rebase has it.
func TestQuotaValuesWithRegistry(t *testing.T) {
	rdb, script, prefix := redistest.Start(t).Client(), quotaScript(t), redistest.Prefix(t)
	ctx := context.Background()
	reg := "pol:" + prefix
	p := algo.Quota(10, algo.Day, 0)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).UnixMicro()
	_, end := p.QuotaPeriod(now)
	key := prefix + "q"
	run := func(keys []string, args ...any) []int64 {
		t.Helper()
		v, err := script.Run(ctx, rdb, keys, args...).Int64Slice()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	run([]string{key, reg}, "ct", now, -1, policyField(p), 3)
	if got, want := rdb.Get(ctx, key).Val(), fmt.Sprintf("3:%d:10:0:%d", end, p.Refill()); got != want {
		t.Errorf("client clock stored %q, want %q", got, want)
	}
	rdb.Del(ctx, key)
	run([]string{key, reg}, policyField(p), 3)
	if err := rdb.HGet(ctx, reg, policyField(p)).Err(); err != nil {
		t.Fatalf("the quota has no number in the registry: %v", err)
	}
	n := number(t, rdb, reg, p)
	if v, want := rdb.Get(ctx, key).Val(), fmt.Sprint(3*100_000+n); v != want {
		t.Errorf("server clock stored %q, want %s (count 3, u 0, number %d)", v, want, n)
	}
	for _, c := range []struct {
		name  string
		value string
		left  int64 // remaining after a peek under p
	}{
		{"the same quota", fmt.Sprintf("3:%d:%s", end, policyField(p)), 7},
		{"a larger quota of the same calendar", fmt.Sprintf("3:%d:20:0:%d", end, p.Refill()), 7},
		{"a quota of another offset", fmt.Sprintf("3:%d:10:0:%d", end-3600e6, algo.Quota(10, algo.Day, -time.Hour).Refill()), 10},
		{"a bucket", fmt.Sprintf("3:%d:10:1000:1", now), 10},
	} {
		rdb.Set(ctx, key, c.value, 0)
		if v := run([]string{key, reg}, "ct", now, -1, policyField(p), 0); v[3] != c.left {
			t.Errorf("%s: a peek leaves %d, want %d (reply %v)", c.name, v[3], c.left, v)
		}
	}
}
