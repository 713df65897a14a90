package hybrid_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// redisFleet is 3 instances, each a Leases over a redisstore of its own
// (its own go-redis client) on one Redis or Cluster, with one client
// clock: the bucket's time and the admissions' are the same, so the
// bound's check is exact.
func redisFleet(t *testing.T, client func() redis.UniversalClient, plant bool) *fleet {
	t.Helper()
	clk := storetest.NewClock()
	prefix := redistest.Prefix(t)
	stores := make([]store.Store, 3)
	for i := range stores {
		c := client()
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.Config{Prefix: prefix, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	p := algo.PerSecond(1000).Burst(100)
	cfg := hybrid.LeasesConfig{Instances: 3, Lifetime: 50 * time.Millisecond, MinBatch: 2}
	f := newFleetOn(t, clk, stores, p, cfg, []time.Duration{0, 40 * time.Millisecond, -25 * time.Millisecond}, plant)
	t.Cleanup(f.close)
	return f
}

// TestLeasesRedisBound: 3 instances over a real Redis and a real Cluster
// stay within BatchBound in every interval, and the planted
// over-admission (a batch not charged) breaks it there too.
func TestLeasesRedisBound(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for name, client := range map[string]func() redis.UniversalClient{
		"standalone": func() redis.UniversalClient { return redis.NewClient(srv.Options()) },
		"cluster":    func() redis.UniversalClient { return redis.NewClusterClient(cl.Options()) },
	} {
		t.Run(name, func(t *testing.T) {
			f := redisFleet(t, client, false)
			f.scenario(t, 1, 300)
			if s := f.overBound(); s != "" {
				t.Fatal(s)
			}
			var local, calls int64
			for _, l := range f.ls {
				st := l.Stats()
				local, calls = local+st.Local, calls+st.Calls
			}
			t.Logf("admitted %v (%d from batches) with %d Redis calls", f.per, local, calls)
			if local == 0 {
				t.Fatal("nothing admitted from a batch")
			}
		})
		t.Run(name+"/planted", func(t *testing.T) {
			f := redisFleet(t, client, true)
			f.scenario(t, 1, 300)
			if s := f.overBound(); s == "" {
				t.Fatal("batches not charged, and no interval over the bound")
			} else {
				t.Logf("caught: %s", s)
			}
		})
	}
}
