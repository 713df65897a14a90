package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// repairLog records the repairs a store reports.
type repairLog struct {
	mu   sync.Mutex
	keys []string
	errs []error
}

func (l *repairLog) add(key string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys, l.errs = append(l.keys, key), append(l.errs, err)
}

// take returns the repairs reported since the last call.
func (l *repairLog) take() ([]string, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, e := l.keys, l.errs
	l.keys, l.errs = nil, nil
	return k, e
}

// corruptions are the values issue 12 lists, written by something other
// than the store: each must be repaired as an empty bucket.
var corruptions = []struct {
	name  string
	write func(ctx context.Context, rdb redis.UniversalClient, key string) error
}{
	{"abc", setWith("abc", time.Hour)},
	{"hash", func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.HSet(ctx, k, "tokens", 3).Err()
	}},
	{"list", func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.RPush(ctx, k, "x").Err()
	}},
	{"1e30", setWith("1e30", time.Hour)},
	{"-1", setWith("-1", time.Hour)},
	{"1.5", setWith("1.5", time.Hour)},
	{"inf", setWith("inf", time.Hour)},
	{"nan", setWith("nan", time.Hour)},
	{"empty string", setWith("", time.Hour)},
	{"digits without expiry", setWith("123456", 0)},
	{"too many digits", setWith("99999999999999999999", time.Hour)},
	{"client format under the server clock", setWith("5:6", time.Hour)},
}

func setWith(v string, ttl time.Duration) func(context.Context, redis.UniversalClient, string) error {
	return func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.Set(ctx, k, v, ttl).Err()
	}
}

// TestCorruptRepair: on standalone Redis and on a Cluster, with the server
// clock and pipelined or not, a Take on each corrupt form decides on an
// empty bucket (denied, Remaining 0, RetryAfter exactly one token's
// refill), rewrites the key as that bucket (Inspect reads a full deficit),
// and reports the repair once to OnRepair with an error matching
// store.ErrCorruptState; the next Take is an ordinary denial, not another
// repair. A multi-take with a corrupt key is denied, repairs it, and
// charges nothing else.
func TestCorruptRepair(t *testing.T) {
	// A token every 30 s: the second Take must find the bucket still
	// empty however slowly a loaded machine gets to it.
	p := algo.PerMinute(2).Burst(10)
	oneToken := 30 * time.Second
	full := p.Capacity() * p.Unit()
	backends := []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.rdb(t)
			for _, mode := range modes {
				t.Run(mode.name, func(t *testing.T) {
					log := &repairLog{}
					s := newStore(t, rdb, redisstore.Config{Pipeline: mode.cfg, OnRepair: log.add})
					for _, c := range corruptions {
						t.Run(c.name, func(t *testing.T) {
							key := "{" + strings.ReplaceAll(c.name, " ", "-") + "}"
							if err := c.write(ctxT(t), rdb, s.Key(key)); err != nil {
								t.Fatal(err)
							}
							res, err := s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: 1})
							want := algo.Result{RetryAfter: oneToken, ResetAfter: 5 * time.Minute}
							if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter != oneToken {
								t.Fatalf("Take on %s = %+v, %v; want a repaired empty bucket %+v", c.name, res, err, want)
							}
							keys, errs := log.take()
							if len(keys) != 1 || keys[0] != s.Key(key) || !errors.Is(errs[0], store.ErrCorruptState) {
								t.Fatalf("OnRepair got %q, %v; want one call for %q matching store.ErrCorruptState", keys, errs, s.Key(key))
							}
							b, err := s.Inspect(ctxT(t), key, p)
							if err != nil || !b.Exists || b.Deficit < full-2*p.Refill()*int64(time.Second/time.Microsecond) || b.TTL <= 0 {
								t.Fatalf("Inspect after the repair = %+v, %v; want an empty bucket that expires", b, err)
							}
							if res, err := s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: 1}); err != nil || res.Allowed {
								t.Fatalf("second Take = %+v, %v; want an ordinary denial", res, err)
							}
							if keys, _ := log.take(); len(keys) != 0 {
								t.Fatalf("second Take repaired %q again", keys)
							}
						})
					}
					t.Run("multi", func(t *testing.T) {
						keys := []string{"{m}:ok", "{m}:bad"}
						if err := rdb.Set(ctxT(t), s.Key(keys[1]), "garbage", 0).Err(); err != nil {
							t.Fatal(err)
						}
						mr, err := s.TakeMulti(ctxT(t), []store.Request{{Key: keys[0], Policy: p, Cost: 1}, {Key: keys[1], Policy: p, Cost: 1}})
						if err != nil || mr.Allowed || mr.Denied != 1 || mr.RetryAfter != oneToken {
							t.Fatalf("TakeMulti with a corrupt key = %+v, %v; want denied by it, retry in %v", mr, err, oneToken)
						}
						if got, _ := log.take(); len(got) != 1 || got[0] != s.Key(keys[1]) {
							t.Fatalf("OnRepair got %q, want %q", got, s.Key(keys[1]))
						}
						if b, err := s.Inspect(ctxT(t), keys[0], p); err != nil || b.Exists {
							t.Fatalf("the other bucket after a denied multi = %+v, %v; want it untouched", b, err)
						}
					})
				})
			}
		})
	}
}

// TestRepairLaw: with a client clock, after any corrupt value is repaired
// at T0 every later Result equals algo.TokenBucket's from an empty bucket
// stamped T0, so admissions over [T0, T0+t] never exceed ⌊rate·t⌋ — within
// the law's capacity + rate·t, which a repair can never break.
func TestRepairLaw(t *testing.T) {
	rdb := redistest.Start(t).Client()
	clk := storetest.NewClock()
	log := &repairLog{}
	s := newStore(t, rdb, redisstore.Config{Clock: clk, OnRepair: log.add})
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		key := "law" + strings.Repeat("x", n%3) + string(rune('a'+n%26)) + time.Duration(n).String()
		p := algo.PerSecond(float64(rapid.Int64Range(1, 50).Draw(rt, "rate"))).Burst(rapid.Int64Range(1, 50).Draw(rt, "capacity"))
		v := rapid.SampledFrom([]string{"abc", "1e30", "-1", "1.5", "inf", "nan", "", "5006", "9:x"}).Draw(rt, "value")
		if err := rdb.Set(ctxT(t), s.Key(key), v, time.Hour).Err(); err != nil {
			rt.Fatal(err)
		}
		t0 := clk.Now()
		st := algo.State{Level: p.Capacity() * p.Unit(), Stamp: t0.UnixMicro()}
		var admitted int64
		for i := range rapid.IntRange(1, 30).Draw(rt, "ops") {
			if i > 0 {
				clk.Add(time.Duration(rapid.Int64Range(0, 2_000_000).Draw(rt, "step")) * time.Microsecond)
			}
			cost := rapid.Int64Range(0, p.Capacity()).Draw(rt, "cost")
			now := clk.Now()
			var want algo.Result
			var err error
			st, want, err = algo.TokenBucket{}.Take(p, st, now.UnixMicro(), cost)
			if err != nil {
				rt.Fatal(err)
			}
			got, err := s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: cost})
			if err != nil || got != want {
				rt.Fatalf("Take(%d) %v after the repair = %+v, %v; algo from an empty bucket says %+v", cost, now.Sub(t0), got, err, want)
			}
			if got.Allowed {
				admitted += cost
			}
			if bound := now.Sub(t0).Microseconds() * p.Refill() / p.Unit(); admitted > bound {
				rt.Fatalf("admitted %d in %v after the repair, more than rate·t = %d", admitted, now.Sub(t0), bound)
			}
		}
		if keys, _ := log.take(); len(keys) != 1 {
			rt.Fatalf("%d repairs reported, want 1", len(keys))
		}
	})
}
