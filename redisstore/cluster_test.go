package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestCluster covers what only a cluster has: the slot function agrees
// with CLUSTER KEYSLOT, keys spread over the masters, multi-limit takes
// within one slot work, across slots they fail with store.ErrNotTogether
// before any script runs, and a timed-out script is not replayed by the
// cluster client's own retry loop.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	s := newStore(t, rdb, redisstore.Config{})
	p := algo.PerHour(1).Burst(10)

	t.Run("slot", func(t *testing.T) {
		for _, k := range []string{"", "foo", "rb:user:42", "{user:42}:burst", "rb:{user:42}:daily", "a{}b", "{}{x}", "a{b", "x}{y}", "123456789"} {
			want := rdb.ClusterKeySlot(ctxT(t), k).Val()
			if k == "" {
				want = 0 // CLUSTER KEYSLOT "" is 0
			}
			if got := redisstore.Slot(k); int64(got) != want {
				t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
			}
		}
	})
	t.Run("keys spread", func(t *testing.T) {
		nodes := map[string]bool{}
		for i := range 30 {
			key := fmt.Sprintf("user:%d", i)
			if _, err := s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: 1}); err != nil {
				t.Fatal(err)
			}
			m, err := rdb.MasterForKey(ctxT(t), s.Key(key))
			if err != nil {
				t.Fatal(err)
			}
			nodes[m.Options().Addr] = true
		}
		if len(nodes) != redistest.ClusterSize {
			t.Errorf("30 keys on %d masters, want %d: the prefix must not be a hash tag", len(nodes), redistest.ClusterSize)
		}
	})
	t.Run("multi in one slot", func(t *testing.T) {
		reqs := []store.Request{
			{Key: "{user:7}:burst", Policy: p, Cost: 4},
			{Key: "{user:7}:daily", Policy: algo.PerDay(100).Burst(5), Cost: 4},
		}
		res, err := s.TakeMulti(ctxT(t), reqs)
		if err != nil || !res.Allowed {
			t.Fatalf("TakeMulti = %+v, %v; want allowed", res, err)
		}
		res, err = s.TakeMulti(ctxT(t), reqs)
		if err != nil || res.Allowed || res.Denied != 1 || res.Results[0].Remaining != 2 {
			t.Fatalf("second TakeMulti = %+v, %v; want denied by the daily bucket, nothing charged", res, err)
		}
	})
	t.Run("reset across slots", func(t *testing.T) {
		keys := []string{"r:1", "r:2", "r:3", "r:4", "r:5"}
		for _, k := range keys {
			if _, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Reset(ctxT(t), keys...); err != nil {
			t.Fatalf("Reset of keys in several slots: %v", err)
		}
		for _, k := range keys {
			if n := rdb.Exists(ctxT(t), s.Key(k)).Val(); n != 0 {
				t.Errorf("key %s survived Reset", k)
			}
		}
	})
	t.Run("cross slot", func(t *testing.T) {
		before := evalCalls(t, rdb)
		reqs := []store.Request{{Key: "user:1", Policy: p, Cost: 1}, {Key: "tenant:1", Policy: p, Cost: 1}}
		res, err := s.TakeMulti(ctxT(t), reqs)
		if !errors.Is(err, store.ErrNotTogether) {
			t.Fatalf("TakeMulti across slots = %+v, %v; want store.ErrNotTogether", res, err)
		}
		if after := evalCalls(t, rdb); after != before {
			t.Fatalf("a cross-slot TakeMulti reached Redis (%d → %d script calls)", before, after)
		}
	})
	t.Run("no replay after timeout", func(t *testing.T) {
		opts := cl.Options()
		opts.ReadTimeout = 100 * time.Millisecond // MaxRetries and MaxRedirects at their defaults
		opts.ClientName = "slow"
		slow := redis.NewClusterClient(opts)
		defer slow.Close()
		ss := newStore(t, slow, redisstore.Config{Timeout: 10 * time.Second})
		inspector := newStore(t, rdb, redisstore.Config{Prefix: ss.Key("")})
		if _, err := ss.Inspect(ctxT(t), "k", p); err != nil {
			t.Fatal(err)
		}
		node, err := rdb.MasterForKey(ctxT(t), ss.Key("k"))
		if err != nil {
			t.Fatal(err)
		}
		resume := stall(t, node)
		_, err = ss.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1})
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Take on a stalled node: %v, want a timeout", err)
		}
		slow.Close() // what it sent is written; the node reads each connection to its end
		resume()
		drained(t, node, opts.ClientName)
		b, err := inspector.Inspect(ctxT(t), "k", p)
		if err != nil {
			t.Fatal(err)
		}
		if runs := p.Capacity() - b.Tokens; runs != 1 {
			t.Fatalf("the script charged the bucket %d times, want 1", runs)
		}
	})
}

// evalCalls sums EVAL and EVALSHA calls over the cluster's masters.
func evalCalls(t *testing.T, rdb *redis.ClusterClient) int {
	t.Helper()
	var total atomic.Int64
	err := rdb.ForEachMaster(ctxT(t), func(ctx context.Context, c *redis.Client) error {
		total.Add(int64(calls(t, c, "eval") + calls(t, c, "evalsha")))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(total.Load())
}

// TestRing: on a Ring a multi-limit take needs keys with one hash tag (the
// Ring shards by it); without one it fails with store.ErrNotTogether.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	defer ring.Close()
	s := newStore(t, ring, redisstore.Config{})
	p := algo.PerHour(1).Burst(3)
	tagged := []store.Request{{Key: "{user:1}:burst", Policy: p, Cost: 2}, {Key: "{user:1}:daily", Policy: p, Cost: 1}}
	if res, err := s.TakeMulti(ctxT(t), tagged); err != nil || !res.Allowed {
		t.Fatalf("TakeMulti with one hash tag = %+v, %v; want allowed", res, err)
	}
	if res, err := s.Take(ctxT(t), store.Request{Key: "{user:1}:burst", Policy: p, Cost: 0}); err != nil || res.Remaining != 1 {
		t.Fatalf("peek after TakeMulti = %+v, %v; want 1 remaining (the single take reaches the same shard)", res, err)
	}
	untagged := []store.Request{{Key: "user:1", Policy: p, Cost: 1}, {Key: "tenant:1", Policy: p, Cost: 1}}
	if res, err := s.TakeMulti(ctxT(t), untagged); !errors.Is(err, store.ErrNotTogether) {
		t.Fatalf("TakeMulti without a shared tag = %+v, %v; want store.ErrNotTogether", res, err)
	}
}
