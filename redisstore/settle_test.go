package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// holdRecords returns the keys of hold records under prefix on rdb.
func holdRecords(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	scan := func(c *redis.Client) error {
		it := c.Scan(ctxT(t), 0, "pol:"+prefix+"*:h:*", 1000).Iterator()
		for it.Next(ctxT(t)) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctxT(t), func(_ context.Context, n *redis.Client) error { return scan(n) })
	case *redis.Ring:
		err = c.ForEachShard(ctxT(t), func(_ context.Context, n *redis.Client) error { return scan(n) })
	case *redis.Client:
		err = scan(c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// recordTTL is the PTTL of the hold record rec, read where the script wrote
// it: on a Ring, the bucket's shard, which need not be the record key's own.
func recordTTL(t *testing.T, rdb redis.UniversalClient, rec string) time.Duration {
	t.Helper()
	ring, ok := rdb.(*redis.Ring)
	if !ok {
		return rdb.PTTL(ctxT(t), rec).Val()
	}
	var ttl atomic.Int64
	if err := ring.ForEachShard(ctxT(t), func(ctx context.Context, n *redis.Client) error {
		if d := n.PTTL(ctx, rec).Val(); d > 0 {
			ttl.Store(int64(d))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ttl.Load())
}

// TestHoldRecord: on Redis's clock, a hold's record is a key in the
// bucket's slot that expires at the hold's deadline; a settle deletes it
// in the call that changes the bucket (on a Cluster, in the bucket's slot),
// so a second settle is
// algo.ErrHoldSettled and changes nothing. On a standalone server and on
// a Cluster, for a key with a hash tag and one without.
func TestHoldRecord(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient) {
		prefix := redistest.Prefix(t)
		s := newStore(t, rdb, redisstore.Config{Prefix: prefix})
		p := algo.PerSecond(10).Burst(100)
		for _, key := range []string{"plain", store.GroupKey("user:7", "llm")} {
			h, res, err := s.Hold(ctxT(t), store.Request{Key: key, Policy: p, Cost: 40}, 2*time.Second)
			if err != nil || !res.Allowed || res.Remaining != 60 {
				t.Fatalf("%s: Hold(40) = %+v %+v %v", key, h, res, err)
			}
			recs := holdRecords(t, rdb, prefix)
			if len(recs) != 1 || !strings.Contains(recs[0], h.ID) {
				t.Fatalf("%s: hold records %q, want one naming %s", key, recs, h.ID)
			}
			if _, cluster := rdb.(*redis.ClusterClient); cluster && redisstore.Slot(recs[0]) != redisstore.Slot(prefix+key) {
				t.Fatalf("%s: record %q in slot %d, the bucket in %d", key, recs[0], redisstore.Slot(recs[0]), redisstore.Slot(prefix+key))
			}
			if ttl := recordTTL(t, rdb, recs[0]); ttl <= 0 || ttl > 2*time.Second+time.Millisecond {
				t.Fatalf("%s: the record's TTL is %v, want in (0, 2.001s]: it expires at the deadline's millisecond", key, ttl)
			}
			st, err := s.Settle(ctxT(t), key, p, h, 100)
			if err != nil || st.Remaining != 0 || st.Uncharged != 0 {
				t.Fatalf("%s: Settle(100) = %+v %v, want 0 left", key, st, err)
			}
			if recs := holdRecords(t, rdb, prefix); len(recs) != 0 {
				t.Fatalf("%s: records %q after the settle", key, recs)
			}
			if _, err := s.Settle(ctxT(t), key, p, h, 0); !errors.Is(err, algo.ErrHoldSettled) {
				t.Fatalf("%s: second Settle: %v, want algo.ErrHoldSettled", key, err)
			}
			if res, _ := s.Take(ctxT(t), store.Request{Key: key, Policy: p}); res.Remaining != 0 {
				t.Fatalf("%s: after the refused settle the bucket holds %d, want 0", key, res.Remaining)
			}
		}
	}
	t.Run("standalone", func(t *testing.T) { run(t, redistest.Start(t).Client()) })
	t.Run("cluster", func(t *testing.T) { run(t, redistest.StartCluster(t).Client()) })
	// On a Ring the script runs on the bucket's shard, and the record
	// must be written there: a settle finds it only on that shard.
	t.Run("ring", func(t *testing.T) {
		a, b := redistest.Start(t), redistest.Start(t)
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
		t.Cleanup(func() { ring.Close() })
		run(t, ring)
	})
}

// TestSettleLawRedis checks the law of settled totals on Redis: LLM-like
// calls of heavy-tailed costs hold an estimate and settle at their cost
// on one bucket, on the client clock; in every interval the cost charged
// (estimates at their holds, the rest at the settles) is within
// algo.Policy.SettleBound. It logs the tightest interval.
func TestSettleLawRedis(t *testing.T) {
	clk := storetest.NewClock()
	s := newStore(t, redistest.Start(t).Client(), redisstore.Config{Clock: clk})
	p := algo.PerMinute(6000).Burst(6000)
	r := rand.New(rand.NewPCG(30, 1))
	type charge struct{ at, cost int64 }
	var ledger []charge
	var open []algo.Hold
	for range 1500 {
		clk.Add(time.Duration(r.Int64N(3_000_000)) * time.Microsecond)
		now := clk.Now().UnixMicro()
		if len(open) == 0 || r.IntN(2) == 0 {
			h, res, err := s.Hold(ctxT(t), store.Request{Key: "llm", Policy: p, Cost: 600}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				ledger, open = append(ledger, charge{now, 600}), append(open, h)
			}
			continue
		}
		k := r.IntN(len(open))
		cost := int64(100 + r.IntN(101))
		for range 6 {
			if r.IntN(2) == 0 {
				cost *= 2
			}
		}
		st, err := s.Settle(ctxT(t), "llm", p, open[k], cost)
		open = append(open[:k], open[k+1:]...)
		if errors.Is(err, algo.ErrHoldExpired) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ledger = append(ledger, charge{now, cost - 600 - st.Uncharged})
	}
	worst, wi, wj := -1.0, 0, 0
	for i := range ledger {
		sum := int64(0)
		for j := i; j < len(ledger); j++ {
			sum += ledger[j].cost
			b := p.SettleBound(time.Duration(ledger[j].at-ledger[i].at) * time.Microsecond)
			if sum > b {
				t.Fatalf("charges %d..%d: %d > SettleBound %d", i, j, sum, b)
			}
			if f := float64(sum) / float64(b); f > worst {
				worst, wi, wj = f, i, j
			}
		}
	}
	t.Logf("%d charges; tightest interval: %d..%d over %v, %.4f of SettleBound", len(ledger), wi, wj,
		time.Duration(ledger[wj].at-ledger[wi].at)*time.Microsecond, worst)
}
