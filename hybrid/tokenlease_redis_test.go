package hybrid_test

import (
	"context"
	"errors"
	"log/slog"
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

// TestLeasesRedisBound: 3 instances over a real Redis, a real Cluster and
// a Ring of two servers stay within BatchBound in every interval, and the planted
// over-admission (a batch not charged) breaks it there too.
func TestLeasesRedisBound(t *testing.T) {
	srv, srv2 := redistest.Start(t), redistest.Start(t)
	cl := redistest.StartCluster(t)
	for name, client := range map[string]func() redis.UniversalClient{
		"standalone": func() redis.UniversalClient { return redis.NewClient(srv.Options()) },
		"cluster":    func() redis.UniversalClient { return redis.NewClusterClient(cl.Options()) },
		"ring": func() redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr, "b": srv2.Addr}})
		},
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

// downRig is one instance: Leases over a FailClosed Fallback over
// redisstore, on one manual clock, so the batch is the only thing that
// admits while Redis cannot answer.
type downRig struct {
	clk *storetest.Clock
	rs  *redisstore.Store
	l   *hybrid.Leases
	p   algo.Policy
}

func newDownRig(t *testing.T, c redis.UniversalClient) *downRig {
	t.Helper()
	r := &downRig{clk: storetest.NewClock(), p: algo.PerSecond(1000).Burst(100)}
	rs, err := redisstore.New(c, redisstore.Config{Prefix: redistest.Prefix(t), Clock: r.clk, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.rs = rs
	fb, err := hybrid.NewFallback(rs, nil, hybrid.FallbackConfig{Mode: hybrid.FailClosed, Clock: r.clk, Timeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.l = newLeases(t, fb, hybrid.LeasesConfig{Instances: 2, MinBatch: 2, Clock: r.clk, SweepEvery: -1})
	return r
}

func (r *downRig) take() (algo.Result, error) {
	return r.l.Take(context.Background(), store.Request{Key: "global", Policy: r.p, Cost: 1})
}

// lease makes demand until the instance holds a batch, and returns it.
func (r *downRig) lease(t *testing.T) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // real time: a revived server, a breaker's cool-down
	for r.l.Stats().Held == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no batch: %+v", r.l.Stats())
		}
		if _, err := r.take(); err != nil {
			r.clk.Add(hybrid.DefaultCoolDown) // the breaker lets a probe through
			time.Sleep(10 * time.Millisecond) // real time for a node to come back; no timing is tested
		}
	}
	return r.l.Stats().Held
}

// spend admits the whole batch held, without a primary call, and checks
// that the next request gets the Fallback's mode.
func (r *downRig) spend(t *testing.T, held int64) {
	t.Helper()
	calls := r.l.Stats().Calls
	for i := range held {
		if res, err := r.take(); err != nil || !res.Allowed {
			t.Fatalf("request %d of the batch of %d: %+v, %v", i, held, res, err)
		}
	}
	if st := r.l.Stats(); st.Calls != calls || st.Held != 0 {
		t.Fatalf("after the batch: %+v; want no call, nothing held", st)
	}
	if _, err := r.take(); !errors.Is(err, hybrid.ErrOpen) {
		t.Fatalf("after the batch: %v, want the fail mode's ErrOpen", err)
	}
}

// TestLeasesRedisDown: with batches out when the server is killed (every
// dial then refused), an instance admits exactly its batch, without a
// call, then the Fallback's mode answers; a batch given back while the
// server is down is lost, counted, and never admitted; with the server
// back, the key is leased again.
func TestLeasesRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a local server to kill")
	}
	opts := srv.Options()
	opts.DialerRetries, opts.MaxRetries, opts.ContextTimeoutEnabled = 1, -1, true
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	r := newDownRig(t, c)

	held := r.lease(t)
	srv.Kill(t)
	r.spend(t, held)

	srv.Revive(t)
	held = r.lease(t)
	srv.Kill(t)
	r.clk.Add(hybrid.DefaultLifetime) // the batch's Lifetime ends
	lost := r.l.Stats().Lost
	if n := r.l.Sweep(context.Background()); n != 0 {
		t.Fatalf("Sweep gave %d back to a killed server", n)
	}
	if st := r.l.Stats(); st.Lost-lost != held || st.Held != 0 {
		t.Fatalf("after the sweep: %+v; want the batch of %d lost", st, held)
	}
	if _, err := r.take(); !errors.Is(err, hybrid.ErrOpen) {
		t.Fatalf("after the lost batch: %v, want ErrOpen: a lost batch is never admitted", err)
	}
	srv.Revive(t)
	t.Logf("leased again after the revival: a batch of %d", r.lease(t))
}

// TestLeasesClusterFailover: a batch out when its key's master is killed
// is spent without a call while the cluster fails over, then the
// Fallback's mode answers until a replica is promoted, and the key is
// leased again from the new master.
func TestLeasesClusterFailover(t *testing.T) {
	cl := redistest.StartClusterOpts(t, redistest.ClusterConfig{Replicas: 1, NodeTimeout: 2 * time.Second})
	opts := cl.Options()
	opts.DialerRetries, opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DisableRoutingPolicies = 1, -1, true, true
	c := redis.NewClusterClient(opts)
	t.Cleanup(func() { c.Close() })
	r := newDownRig(t, c)

	held := r.lease(t)
	start := time.Now()
	killed := cl.KillMasterOf(t, r.rs.Key("global"))
	r.spend(t, held)
	held = r.lease(t) // once a replica is promoted
	t.Logf("killed %s: batch spent, then leased again (%d) after %v", killed, held, time.Since(start).Round(time.Millisecond))
}

// TestLeasesRedisFair: 3 instances with equal demand (500/s each against
// 1000/s) on one key of a real Redis each get a third of the admissions,
// ±10%, over 10 s of the client clock.
func TestLeasesRedisFair(t *testing.T) {
	srv := redistest.Start(t)
	f := redisFleet(t, func() redis.UniversalClient { return redis.NewClient(srv.Options()) }, false)
	f.rotate(t, 0, 10*time.Second, 2*time.Millisecond, func(int, time.Duration) bool { return true })
	fairShare(t, "10 s on Redis", f.per)
	if s := f.overBound(); s != "" {
		t.Fatal(s)
	}
	t.Logf("admitted %v of a bound of %d", f.per, f.p.BatchBound(10*time.Second, f.cfg.Lifetime, 3))
}

// TestLeasesRedisCalls measures what leases save on a real Redis: 3
// instances asking 300/s each of a 1000/s key (burst 100, L 50ms, a batch
// of at most 16) for 10 s of the client clock. Every request is admitted,
// with a Redis call per batch and per give-back instead of one per
// request.
func TestLeasesRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	f := redisFleet(t, func() redis.UniversalClient { return redis.NewClient(srv.Options()) }, false)
	step := 10 * time.Millisecond / 3 // 300/s each
	f.rotate(t, 0, 10*time.Second, step, func(int, time.Duration) bool { return true })
	var admitted, calls, local int64
	for i, l := range f.ls {
		st := l.Stats()
		admitted, calls, local = admitted+f.per[i], calls+st.Calls, local+st.Local
	}
	if asked := 3 * int64((10*time.Second+step-1)/step); admitted != asked {
		t.Errorf("admitted %d of %d asked below the rate", admitted, asked)
	}
	if calls*5 > admitted {
		t.Errorf("%d Redis calls for %d admissions: leases save less than 4 calls in 5", calls, admitted)
	}
	t.Logf("%d admitted (%d from batches) with %d Redis calls: %.1f admissions a call", admitted, local, calls, float64(admitted)/float64(calls))
}
