package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// stored reads the lease set at the Redis key k as algo holds it.
func stored(ctx context.Context, t interface {
	Helper()
	Fatalf(string, ...any)
}, rdb redis.UniversalClient, k string) algo.Leases {
	t.Helper()
	zs, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", k, err)
	}
	var l algo.Leases
	for _, z := range zs {
		l = append(l, algo.Lease{ID: z.Member.(string), Expiry: int64(z.Score)})
	}
	return l
}

// topologies start the Redis deployments a test runs on.
var topologies = []struct {
	name string
	rdb  func(t *testing.T) redis.UniversalClient
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
}

// TestLeaseServerClockMatchesAlgo replays every lease call on the server
// clock through algo at the time the script used (LeaseCall returns
// Redis's TIME): the answers must be identical, and after each call the
// sorted set must hold algo's leases, the key expiring at the first
// millisecond after its last lease. TTLs of a few µs to 5 ms let leases
// expire in real time between calls, with no sleep: the calls themselves
// take that long.
func TestLeaseServerClockMatchesAlgo(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.rdb(t)
			s := newStore(t, rdb, redisstore.Config{})
			ctx := ctxT(t)
			run := 0
			rapid.Check(t, func(rt *rapid.T) {
				run++
				key := fmt.Sprintf("k%d", run)
				p := algo.LeasePolicy{
					Limit: rapid.Int64Range(1, 4).Draw(rt, "limit"),
					TTL:   time.Duration(rapid.Int64Range(1, 5000).Draw(rt, "ttl µs")) * time.Microsecond,
				}
				ids := []string{"a", "b", "c", "d", "e", "{x}"}
				var want algo.Leases
				for step := range rapid.IntRange(1, 40).Draw(rt, "ops") {
					op := rapid.SampledFrom([]string{redisstore.OpAcquire, redisstore.OpAcquire, redisstore.OpRelease, redisstore.OpRenew}).Draw(rt, "op")
					id := rapid.SampledFrom(ids).Draw(rt, "id")
					r, err := redisstore.LeaseCall(ctx, s, op, key, p, id)
					if err != nil {
						rt.Fatal(err)
					}
					now := r[0]
					var ok bool
					var res algo.LeaseResult
					switch op {
					case redisstore.OpAcquire:
						want, res, err = p.Acquire(want, now, id)
						ok = res.Allowed
					case redisstore.OpRelease:
						want, ok, err = want.Release(now, id)
					default:
						want, ok, err = p.Renew(want, now, id)
					}
					if err != nil {
						rt.Fatal(err)
					}
					if ok != (r[1] == 1) || res.Remaining != r[2] || res.RetryAfter != algo.Micros(r[3]) || r[4] != 0 {
						rt.Fatalf("step %d: %s(%q) at %d µs replied %v; algo says %v, %+v", step, op, id, now, r, ok, res)
					}
					got := stored(ctx, rt, rdb, s.LeaseKey(key))
					if len(got) == 0 && len(want) > 0 {
						// Expired since in real time: every lease must be over.
						tm, err := rdb.Time(ctx).Result()
						if err != nil || want.IdleAt() > tm.UnixMicro() {
							rt.Fatalf("step %d: key gone at %v (%v), but algo's leases %v run until %d", step, tm.UnixMicro(), err, want, want.IdleAt())
						}
						want = nil
						continue
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						rt.Fatalf("step %d: %s(%q) at %d µs stored %v; algo says %v", step, op, id, now, got, want)
					}
					if len(got) == 0 {
						continue
					}
					exp, err := rdb.PExpireTime(ctx, s.LeaseKey(key)).Result()
					if err == nil && exp == -2 {
						want = nil // expired since
						continue
					}
					if ms := (want.IdleAt() + 999) / 1000; err != nil || exp.Milliseconds() != ms {
						rt.Fatalf("step %d: PEXPIRETIME %v (%v), want %d ms: the last lease ends at %d µs", step, exp, err, ms, want.IdleAt())
					}
				}
			})
		})
	}
}

// TestLeaseDifferential drives memstore and redisstore (client clock, one
// manual clock) with the same random lease calls and clock moves over two
// keys, and requires identical answers at every step, on standalone Redis
// and on a Cluster, in opsRounds rounds of rapid's cases. (storetest's
// Leases model already compares each backend with algo's functions, which
// implies this; here the two stores meet directly, on a sequence neither
// chose.)
func TestLeaseDifferential(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	t.Run("standalone", func(t *testing.T) { leaseDifferential(t, redistest.Start(t).Client()) })
	t.Run("cluster", func(t *testing.T) { leaseDifferential(t, redistest.StartCluster(t).Client()) })
}

func leaseDifferential(t *testing.T, rdb redis.UniversalClient) {
	run := 0
	for range opsRounds { // as many cases as storetest's properties of Take
		rapid.Check(t, func(rt *rapid.T) {
			run++
			clk := storetest.NewClock()
			rs := newStore(t, rdb, redisstore.Config{Clock: clk, Prefix: fmt.Sprintf("%srun%d:", redistest.Prefix(t), run)})
			ms, err := memstore.New(memstore.Config{Clock: clk})
			if err != nil {
				rt.Fatal(err)
			}
			defer ms.Close()
			ctx := context.Background()
			keys := []string{"a", "b{x}"}
			pols := make([]algo.LeasePolicy, len(keys))
			for i := range pols {
				pols[i] = algo.LeasePolicy{
					Limit: rapid.Int64Range(1, 3).Draw(rt, "limit"),
					TTL:   time.Duration(rapid.Int64Range(1, 100).Draw(rt, "ttl µs")) * time.Microsecond,
				}
			}
			for step := range rapid.IntRange(1, 50).Draw(rt, "ops") {
				i := rapid.IntRange(0, len(keys)-1).Draw(rt, "key")
				k, p := keys[i], pols[i]
				id := rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(rt, "id")
				clk.Add(time.Duration(rapid.Int64Range(0, 2*p.TTL.Microseconds()).Draw(rt, "step µs")) * time.Microsecond)
				var gotM, gotR any
				var errM, errR error
				switch op := rapid.IntRange(0, 3).Draw(rt, "op"); op {
				case 0, 1:
					gotM, errM = ms.AcquireLease(ctx, k, p, id)
					gotR, errR = rs.AcquireLease(ctx, k, p, id)
				case 2:
					gotM, errM = ms.ReleaseLease(ctx, k, id)
					gotR, errR = rs.ReleaseLease(ctx, k, id)
				default:
					gotM, errM = ms.RenewLease(ctx, k, p, id)
					gotR, errR = rs.RenewLease(ctx, k, p, id)
				}
				if errM != nil || errR != nil || gotM != gotR {
					rt.Fatalf("step %d on %q (%v), id %q: memstore %+v, %v; redisstore %+v, %v", step, k, p, id, gotM, errM, gotR, errR)
				}
			}
		})
	}
}

// leaseCorruptions are values a lease key may hold that no lease call
// wrote: each is repaired as an empty lease set, or refused under
// KeepCorrupt.
var leaseCorruptions = []struct {
	name  string
	write func(ctx context.Context, rdb redis.UniversalClient, key string) error
}{
	{"string", setWith("abc", time.Hour)},
	{"a bucket's digits", setWith("500000877", time.Hour)},
	{"hash", func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.HSet(ctx, k, "a", 1).Err()
	}},
	{"list", func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.RPush(ctx, k, "a").Err()
	}},
	{"score +inf", zaddWith(math.Inf(1))},
	{"score 2^53", zaddWith(1 << 53)},
	{"score 1e300", zaddWith(1e300)},
}

func zaddWith(score float64) func(context.Context, redis.UniversalClient, string) error {
	return func(ctx context.Context, rdb redis.UniversalClient, k string) error {
		return rdb.ZAdd(ctx, k, redis.Z{Score: score, Member: "foreign"}).Err()
	}
}

// TestLeaseCorrupt: on standalone Redis and a Cluster, a lease call on a
// key holding another type, or a sorted set with a score beyond 2^53-1,
// takes it as an empty lease set, rewrites it and reports the repair once
// to OnRepair with an error matching store.ErrCorruptState; under
// KeepCorrupt every call fails with such an error and the key is left as
// it was.
func TestLeaseCorrupt(t *testing.T) {
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.rdb(t)
			ctx := ctxT(t)
			var log repairLog
			s := newStore(t, rdb, redisstore.Config{OnRepair: log.add})
			keep := newStore(t, rdb, redisstore.Config{Corrupt: redisstore.KeepCorrupt})
			p := algo.LeasePolicy{Limit: 1, TTL: time.Minute}
			for i, c := range leaseCorruptions {
				key := fmt.Sprintf("corrupt%d", i)
				t.Run(c.name, func(t *testing.T) {
					// Kept: every call fails, the key is as it was.
					if err := c.write(ctx, rdb, keep.LeaseKey(key)); err != nil {
						t.Fatal(err)
					}
					before, _ := rdb.Dump(ctx, keep.LeaseKey(key)).Result()
					_, errA := keep.AcquireLease(ctx, key, p, "x")
					_, errR := keep.ReleaseLease(ctx, key, "x")
					_, errN := keep.RenewLease(ctx, key, p, "x")
					for _, err := range []error{errA, errR, errN} {
						if !errors.Is(err, store.ErrCorruptState) {
							t.Fatalf("KeepCorrupt: lease call = %v, want store.ErrCorruptState", err)
						}
					}
					if after, _ := rdb.Dump(ctx, keep.LeaseKey(key)).Result(); after != before {
						t.Fatal("KeepCorrupt: the key changed")
					}
					// Repaired: the first call decides on an empty set.
					if err := c.write(ctx, rdb, s.LeaseKey(key)); err != nil {
						t.Fatal(err)
					}
					res, err := s.AcquireLease(ctx, key, p, "x")
					if err != nil || !res.Allowed || res.Remaining != 0 {
						t.Fatalf("AcquireLease on %s = %+v, %v; want admitted on an empty set", c.name, res, err)
					}
					keys, errs := log.take()
					if len(keys) != 1 || keys[0] != s.LeaseKey(key) || !errors.Is(errs[0], store.ErrCorruptState) {
						t.Fatalf("repairs reported: %q %v; want one for %q matching store.ErrCorruptState", keys, errs, s.LeaseKey(key))
					}
					if got := stored(ctx, t, rdb, s.LeaseKey(key)); len(got) != 1 || got[0].ID != "x" {
						t.Fatalf("after the repair the key holds %v, want x's lease alone", got)
					}
					if res, err := s.AcquireLease(ctx, key, p, "y"); err != nil || res.Allowed {
						t.Fatalf("second AcquireLease = %+v, %v; want denied: x holds the one slot", res, err)
					}
					if keys, _ := log.take(); len(keys) != 0 {
						t.Fatalf("a repaired key reported again: %q", keys)
					}
					// A release on a corrupt key repairs it too: it is deleted.
					if err := c.write(ctx, rdb, s.LeaseKey(key+"r")); err != nil {
						t.Fatal(err)
					}
					if ok, err := s.ReleaseLease(ctx, key+"r", "x"); ok || err != nil {
						t.Fatalf("ReleaseLease on %s = %v, %v; want false, nil", c.name, ok, err)
					}
					if n := rdb.Exists(ctx, s.LeaseKey(key+"r")).Val(); n != 0 {
						t.Fatalf("after a release on a corrupt key it still exists")
					}
					if keys, _ := log.take(); len(keys) != 1 {
						t.Fatalf("release on a corrupt key: %d repairs reported, want 1", len(keys))
					}
				})
			}
			// A sorted set whose scores have all passed is a set of expired
			// leases, not corruption: dropped, and nothing reported.
			key := "past"
			if err := rdb.ZAdd(ctx, s.LeaseKey(key), redis.Z{Score: -5, Member: "old"}, redis.Z{Score: 1e6, Member: "older"}).Err(); err != nil {
				t.Fatal(err)
			}
			if res, err := s.AcquireLease(ctx, key, p, "x"); err != nil || !res.Allowed {
				t.Fatalf("AcquireLease over expired scores = %+v, %v", res, err)
			}
			if keys, _ := log.take(); len(keys) != 0 {
				t.Fatalf("expired scores reported as a repair: %q", keys)
			}
			if got := stored(ctx, t, rdb, s.LeaseKey(key)); len(got) != 1 || got[0].ID != "x" {
				t.Fatalf("the key holds %v, want x's lease alone", got)
			}
		})
	}
}

// TestLeaseExpiry: a lease key expires with its last lease, and a key with
// no lease left is deleted at once. Server clock: PEXPIREAT the first
// millisecond after the last expiry; client clock: that far ahead plus
// TTLMargin, or no expiry when the margin is negative.
func TestLeaseExpiry(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := ctxT(t)
	s := newStore(t, rdb, redisstore.Config{})
	short, long := algo.LeasePolicy{Limit: 3, TTL: time.Hour + 7*time.Microsecond}, algo.LeasePolicy{Limit: 3, TTL: 2 * time.Hour}
	expireAt := func(want int64) {
		t.Helper()
		exp, err := rdb.PExpireTime(ctx, s.LeaseKey("k")).Result()
		if ms := (want + 999) / 1000; err != nil || exp.Milliseconds() != ms {
			t.Fatalf("PEXPIRETIME = %v, %v; want %d ms", exp, err, ms)
		}
	}
	a, err := redisstore.LeaseCall(ctx, s, redisstore.OpAcquire, "k", short, "a")
	if err != nil {
		t.Fatal(err)
	}
	expireAt(a[0] + short.TTL.Microseconds())
	b, err := redisstore.LeaseCall(ctx, s, redisstore.OpAcquire, "k", long, "b")
	if err != nil {
		t.Fatal(err)
	}
	expireAt(b[0] + long.TTL.Microseconds())
	if ok, err := s.ReleaseLease(ctx, "k", "b"); !ok || err != nil {
		t.Fatalf("ReleaseLease(b) = %v, %v", ok, err)
	}
	expireAt(a[0] + short.TTL.Microseconds()) // back to a's
	n, err := redisstore.LeaseCall(ctx, s, redisstore.OpRenew, "k", long, "a")
	if err != nil || n[1] != 1 {
		t.Fatalf("RenewLease(a) = %v, %v", n, err)
	}
	expireAt(n[0] + long.TTL.Microseconds())
	if ok, err := s.ReleaseLease(ctx, "k", "a"); !ok || err != nil {
		t.Fatalf("ReleaseLease(a) = %v, %v", ok, err)
	}
	if rdb.Exists(ctx, s.LeaseKey("k")).Val() != 0 {
		t.Fatal("a key with no lease left still exists")
	}

	clk := storetest.NewClock()
	for _, tc := range []struct {
		margin time.Duration
		want   time.Duration // PTTL; -1: none
	}{
		{0, redisstore.DefaultTTLMargin + time.Hour + time.Millisecond}, // 1h+7µs rounds up
		{time.Second, time.Second + time.Hour + time.Millisecond},
		{-1, -1},
	} {
		c := newStore(t, rdb, redisstore.Config{Clock: clk, TTLMargin: tc.margin})
		if _, err := c.AcquireLease(ctx, "k", short, "a"); err != nil {
			t.Fatal(err)
		}
		ttl, err := rdb.PTTL(ctx, c.LeaseKey("k")).Result()
		if err != nil || ttl > tc.want || ttl < tc.want-time.Second {
			t.Fatalf("TTLMargin %v: PTTL %v (%v), want %v (less the time since)", tc.margin, ttl, err, tc.want)
		}
	}
}

// TestLeaseConfig: lease keys live under their own prefix, "lease:" and
// the bucket prefix by default, in the cluster slot of the key's own hash
// tag; New refuses a LeasePrefix that begins the bucket prefix or extends
// it, and one with a brace.
func TestLeaseConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true}) // never used
	t.Cleanup(func() { rdb.Close() })
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := store.GroupKey("user:42", "jobs")
	if got, want := s.LeaseKey(k), "lease:rb:jobs{user:42}"; got != want {
		t.Fatalf("LeaseKey = %q, want %q", got, want)
	}
	if redisstore.Slot(s.LeaseKey(k)) != redisstore.Slot(s.Key(k)) {
		t.Fatal("a key's lease set and bucket are in different slots")
	}
	for _, tc := range []struct {
		cfg  redisstore.Config
		want error
	}{
		{redisstore.Config{Prefix: "lease:"}, redisstore.ErrInvalidConfig}, // default "lease:lease:" extends it
		{redisstore.Config{Prefix: "app:", LeasePrefix: "app:l:"}, redisstore.ErrInvalidConfig},
		{redisstore.Config{Prefix: "app:l:", LeasePrefix: "app:"}, redisstore.ErrInvalidConfig},
		{redisstore.Config{LeasePrefix: "rb:"}, redisstore.ErrInvalidConfig},
		{redisstore.Config{LeasePrefix: "{l}:"}, redisstore.ErrHashTagPrefix},
		{redisstore.Config{Prefix: "app:", LeasePrefix: "app-l:"}, nil},
	} {
		if _, err := redisstore.New(rdb, tc.cfg); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Errorf("New(%+v) = %v, want %v", tc.cfg, err, tc.want)
		}
	}
}

// TestLeaseNoScript: after SCRIPT FLUSH a lease call is sent again as EVAL
// (it did not run, so nothing is held twice), pipelined or not, and under
// Config.Functions, whose library holds only the bucket script.
func TestLeaseNoScript(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := ctxT(t)
	p := algo.LeasePolicy{Limit: 1, TTL: time.Minute}
	for _, tc := range []struct {
		name string
		cfg  redisstore.Config
	}{
		{"pipelined", redisstore.Config{}},
		{"direct", redisstore.Config{Pipeline: redisstore.PipelineConfig{Disabled: true}}},
		{"functions", redisstore.Config{Functions: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, rdb, tc.cfg)
			for i := range 2 {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				res, err := s.AcquireLease(ctx, "k", p, "a")
				if err != nil || !res.Allowed || res.Remaining != 0 {
					t.Fatalf("acquire %d after SCRIPT FLUSH = %+v, %v; want admitted, none remaining", i, res, err)
				}
			}
			if ok, err := s.ReleaseLease(ctx, "k", "a"); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
		})
	}
}

// TestLeaseMemory measures MEMORY USAGE of a lease key (20 bytes, as
// TestMemoryPerKey's buckets) holding n leases of 26-byte ids
// (store.NewLeaseID), on the server clock. Run it with
//
//	go test -run TestLeaseMemory -v ./redisstore/
//
// Up to 128 leases Redis keeps the sorted set as a listpack (one
// allocation: about 28 bytes a lease); from 129 as a skiplist and a hash
// table (about 100 a lease). BENCHMARKS.md has the figures.
func TestLeaseMemory(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := ctxT(t)
	s := newStore(t, rdb, redisstore.Config{Prefix: "rb:", LeasePrefix: "rl:"})
	var one int64 // MEMORY USAGE with one lease
	for _, n := range []int{1, 2, 10, 100, 128, 129, 1000} {
		key := fmt.Sprintf("user:%012d", n)
		p := algo.LeasePolicy{Limit: int64(n), TTL: time.Hour}
		for range n {
			if res, err := s.AcquireLease(ctx, key, p, store.NewLeaseID()); err != nil || !res.Allowed {
				t.Fatalf("acquire: %+v, %v", res, err)
			}
		}
		k := s.LeaseKey(key)
		if len(k) != 20 {
			t.Fatalf("key %q is %d bytes, want 20", k, len(k))
		}
		usage, err := rdb.MemoryUsage(ctx, k, 0).Result() // SAMPLES 0: every element
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			one = usage
		}
		t.Logf("%4d leases: MEMORY USAGE %6d B (%s), %5.1f B a lease beyond the first",
			n, usage, rdb.ObjectEncoding(ctx, k).Val(), float64(usage-one)/float64(max(n-1, 1)))
	}
	if one > 128 {
		t.Errorf("one lease: MEMORY USAGE %d B, want at most 128", one)
	}
}

// BenchmarkLease measures an acquire and its release (two script calls)
// on distinct keys with the server clock, auto-pipelined, at 1, 16 and 64
// goroutines, as BenchmarkTake measures one Take.
func BenchmarkLease(b *testing.B) {
	rdb := redistest.Start(b).Client()
	s := newStore(b, rdb, redisstore.Config{})
	p := algo.LeasePolicy{Limit: 10, TTL: time.Minute}
	ctx := context.Background()
	var n atomic.Int64
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			b.ReportAllocs()
			parallel(b, g, func() error {
				key, id := fmt.Sprint("k", n.Add(1)), store.NewLeaseID()
				if _, err := s.AcquireLease(ctx, key, p, id); err != nil {
					return err
				}
				_, err := s.ReleaseLease(ctx, key, id)
				return err
			})
		})
	}
}
