package fuzz

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// FuzzKeys: any key through a Limiter with any prefix is its own bucket;
// the empty key is refused with store.ErrEmptyKey, never shared.
func FuzzKeys(f *testing.F) {
	ms, err := memstore.New(memstore.Config{Clock: storetest.NewClock()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ms.Close() })
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, prefix, key, other string) {
		ctx := context.Background()
		// A fresh namespace per input, so inputs do not share buckets.
		full := strconv.FormatInt(n.Add(1), 10) + "/" + prefix
		lim, err := ratebucket.NewLimiter(ms, algo.PerHour(1).Burst(1), ratebucket.Config{Prefix: full})
		if err != nil {
			t.Fatal(err)
		}
		first, err := lim.Allow(ctx, key)
		switch {
		case key == "":
			if !errors.Is(err, store.ErrEmptyKey) {
				t.Fatalf("Allow(%q) with prefix %q: error %v, want ErrEmptyKey", key, prefix, err)
			}
			return
		case len(full)+len(key) > store.DefaultMaxKeyLen:
			if !errors.Is(err, store.ErrKeyTooLong) {
				t.Fatalf("Allow(%q) with prefix %q: error %v, want ErrKeyTooLong", key, prefix, err)
			}
			return
		}
		if err != nil || !first.Allowed {
			t.Fatalf("first Allow(%q) = %+v, %v; want admitted", key, first, err)
		}
		if again, err := lim.Allow(ctx, key); err != nil || again.Allowed {
			t.Fatalf("second Allow(%q) = %+v, %v; want denied (capacity 1)", key, again, err)
		}
		if other == key || other == "" || len(full)+len(other) > store.DefaultMaxKeyLen {
			return
		}
		if r, err := lim.Allow(ctx, other); err != nil || !r.Allowed {
			t.Fatalf("Allow(%q) after spending %q = %+v, %v: the keys share a bucket", other, key, r, err)
		}
	})
}

// redisOrSkip returns a client on a real Redis, or skips the target with
// the reason when there is none to start.
func redisOrSkip(f *testing.F) *redis.Client {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("REDIS_URL") == "" {
		f.Skip("FuzzLuaParity compares the Lua script with algo on a real Redis: redis-server is not installed (apt-get install redis-server) and REDIS_URL is unset")
	}
	return redistest.Start(f).Client()
}

// reference is the Go side of the parity check: algo.TokenBucket over a
// map, forgetting full buckets as stores do.
type reference map[string]algo.State

func (ref reference) take(p algo.Policy, key string, now, cost int64) (algo.Result, error) {
	s, r, err := algo.TokenBucket{}.Take(p, ref[key], now, cost)
	if err == nil {
		if algo.TokenBucket.IdleAt(algo.TokenBucket{}, p, s) <= now {
			delete(ref, key)
		} else {
			ref[key] = s
		}
	}
	return r, err
}

// drawWidePolicy draws policies up to algo's bounds, where the Lua
// script's doubles are most at risk.
func drawWidePolicy(t *rapid.T) algo.Policy {
	for {
		p := algo.Per(rapid.Int64Range(1, algo.MaxPerSecond).Draw(t, "tokens"),
			time.Duration(rapid.Int64Range(1, algo.MaxPeriod.Microseconds()).Draw(t, "period µs"))*time.Microsecond).
			Burst(rapid.Int64Range(1, algo.MaxCapacity).Draw(t, "capacity"))
		if p.Validate() == nil {
			return p
		}
		if rapid.IntRange(0, 2).Draw(t, "small instead") > 0 {
			return drawPolicy(t)
		}
	}
}

// FuzzLuaParity runs the same random sequence of Takes and TakeMultis on
// redisstore (client clock, real Redis) and on the Go side, which must
// agree exactly: algo.TokenBucket for Take, memstore for TakeMulti (the
// all-or-nothing rule is the store's, not algo's). Multi-takes use keys of
// their own, so memstore and Redis hold the same state for them.
func FuzzLuaParity(f *testing.F) { f.Fuzz(rapid.MakeFuzz(luaParity(redisOrSkip(f)))) }

// TestLuaParity runs the parity property under rapid's own generator. Like
// every Redis test outside the fuzz targets, it fails without Redis.
func TestLuaParity(t *testing.T) { rapid.Check(t, luaParity(redistest.Start(t).Client())) }

var inputs atomic.Int64

// luaParity is the property behind FuzzLuaParity and TestLuaParity.
func luaParity(rdb *redis.Client) func(*rapid.T) {
	return func(t *rapid.T) {
		ctx := context.Background()
		clk := storetest.NewClock()
		clk.Set(time.UnixMicro(rapid.Int64Range(0, algo.MaxTime/2).Draw(t, "start µs")))
		rs, err := redisstore.New(rdb, redisstore.Config{Prefix: "rbfuzz:" + strconv.FormatInt(inputs.Add(1), 10) + ":", Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := memstore.New(memstore.Config{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		keys := []string{rapid.String().Draw(t, "key0"), rapid.StringN(1, 8, -1).Draw(t, "key1"), "{tag}" + rapid.String().Draw(t, "key2")}
		pols := map[string]algo.Policy{}
		var longest time.Duration
		for _, k := range keys {
			if _, ok := pols[k]; !ok {
				pols[k] = rapid.Custom(drawWidePolicy).Draw(t, "policy")
				longest = max(longest, pols[k].FillTime())
			}
		}
		var used []string
		defer func() { rdb.Del(context.Background(), used...) }()
		for _, k := range keys {
			used = append(used, rs.Key(k), rs.Key("multi:"+k))
		}
		ref := reference{}
		for step := range rapid.IntRange(5, 40).Draw(t, "steps") {
			clk.Add(time.Duration(rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 1000),
				rapid.Int64Range(0, longest.Microseconds())).Draw(t, "advance µs")) * time.Microsecond)
			now := clk.Now().UnixMicro()
			if rapid.IntRange(0, 3).Draw(t, "multi") > 0 {
				key := rapid.SampledFrom(keys).Draw(t, "key")
				p := pols[key]
				cost := drawCost(t, p)
				want, werr := ref.take(p, key, now, cost)
				got, err := rs.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
				switch {
				case key == "":
					if !errors.Is(err, store.ErrEmptyKey) {
						t.Fatalf("step %d: Take(\"\") error %v", step, err)
					}
				case werr != nil || err != nil:
					if werr == nil || !errors.Is(err, werr) {
						t.Fatalf("step %d: Take(%q, %v, %d) error %v, reference %v", step, key, p, cost, err, werr)
					}
				case got != want:
					t.Fatalf("step %d: Take(%q, %v, %d) at %d\nLua %+v\n Go %+v", step, key, p, cost, now, got, want)
				}
				continue
			}
			var reqs []store.Request
			for _, k := range keys {
				if rapid.Bool().Draw(t, "include") {
					reqs = append(reqs, store.Request{Key: "multi:" + k, Policy: pols[k],
						Cost: rapid.Int64Range(0, pols[k].Capacity()).Draw(t, "multi cost")})
				}
			}
			want, werr := ms.TakeMulti(ctx, reqs)
			got, err := rs.TakeMulti(ctx, reqs)
			if (err == nil) != (werr == nil) || err == nil && !sameMulti(got, want) {
				t.Fatalf("step %d: TakeMulti(%+v)\nLua %+v, %v\n Go %+v, %v", step, reqs, got, err, want, werr)
			}
		}
	}
}

func sameMulti(a, b store.MultiResult) bool {
	if a.Allowed != b.Allowed || a.Denied != b.Denied || a.RetryAfter != b.RetryAfter || len(a.Results) != len(b.Results) {
		return false
	}
	for i := range a.Results {
		if a.Results[i] != b.Results[i] {
			return false
		}
	}
	return true
}
