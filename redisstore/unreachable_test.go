package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// unreachableTimeout is the store's Timeout in the tests of an unreachable
// Redis: long enough that a refused dial (well under a millisecond on
// loopback) is far below it, short enough to try a few times.
const unreachableTimeout = 150 * time.Millisecond

// slack is what a call may take past its Timeout on a hung server: the
// time from the deadline to the caller running again.
const slack = 10 * time.Millisecond

// attempts is how many times a timed call is made: the fastest counts,
// as two shared cores under -race can hold any one goroutine back for
// longer than slack. (Five calls are too many for TestHungCluster: each
// holds a pool connection on the hung node, and warm opens 3*attempts.)
const attempts = 3

// boundedOptions are the options a store's client should have: deadlines
// reach the socket (ContextTimeoutEnabled), and, with oneDial, a refused
// dial is reported at once rather than tried 5 times 100 ms apart (go-redis's
// DialerRetries).
func boundedOptions(o *redis.Options, oneDial bool) *redis.Options {
	o.ContextTimeoutEnabled = true
	if oneDial {
		o.DialerRetries = 1
	}
	return o
}

// fastest makes call attempts times and returns the shortest time one
// took; check sees every call's error. Each call must answer within a
// second of the Timeout: the slowest is noise, not seconds of waiting.
func fastest(t *testing.T, check func(error), call func() error) time.Duration {
	t.Helper()
	best := time.Duration(-1)
	var err error
	for range attempts {
		start := time.Now()
		err = call()
		d := time.Since(start)
		check(err)
		if d > unreachableTimeout+time.Second {
			t.Errorf("a call took %v: %v", d, err)
		}
		if best < 0 || d < best {
			best = d
		}
	}
	t.Logf("error: %v", err)
	return best
}

// wantNotSent fails unless err says nothing was sent: it matches
// redisstore.ErrNotSent and not the "may have run" of a call whose request
// was written.
func wantNotSent(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, redisstore.ErrNotSent) || strings.Contains(err.Error(), "may have run") {
		t.Errorf("call = %v; want an error matching redisstore.ErrNotSent", err)
	}
}

// wantMayHaveRun fails unless err is a timeout after the request was
// written: context.DeadlineExceeded, "may have run", not ErrNotSent.
func wantMayHaveRun(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redisstore.ErrNotSent) || !strings.Contains(err.Error(), "may have run") {
		t.Errorf("call = %v; want context.DeadlineExceeded, the script may have run", err)
	}
}

// within fails unless the fastest of the calls took at most limit.
func within(t *testing.T, what string, d, limit time.Duration) {
	t.Helper()
	t.Logf("%s: fastest of %d calls %v (limit %v)", what, attempts, d.Round(100*time.Microsecond), limit)
	if d > limit {
		t.Errorf("%s: the fastest of %d calls took %v, want at most %v", what, attempts, d, limit)
	}
}

// takeOne is one Take with no deadline of its own: the store's Timeout
// bounds it.
func takeOne(s *redisstore.Store, key string) error {
	_, err := s.Take(context.Background(), store.Request{Key: key, Policy: algo.PerHour(1).Burst(10), Cost: 1})
	return err
}

// TestRefusedStandalone: on a port nothing listens on, every call fails
// with ErrNotSent in every mode. With one dial attempt it fails at once;
// with go-redis's default 5 dial attempts 100 ms apart it still answers
// by the store's Timeout.
func TestRefusedStandalone(t *testing.T) {
	addr := redistest.RefusedAddr(t)
	for _, m := range modes {
		for _, oneDial := range []bool{true, false} {
			name := m.name + "/one dial"
			limit := unreachableTimeout / 10
			if !oneDial {
				name, limit = m.name+"/default dials", unreachableTimeout+slack
			}
			t.Run(name, func(t *testing.T) {
				rdb := redis.NewClient(boundedOptions(&redis.Options{Addr: addr}, oneDial))
				defer rdb.Close()
				s := newStore(t, rdb, redisstore.Config{Timeout: unreachableTimeout, Pipeline: m.cfg})
				d := fastest(t, func(err error) { wantNotSent(t, err) }, func() error { return takeOne(s, "k") })
				within(t, "refused", d, limit)
			})
		}
	}
}

// TestHungStandalone: a server that accepts connections and answers
// nothing. Before the handshake (a listener that never replies, or a
// stopped redis-server on a fresh connection) nothing of the call is
// written: it fails with ErrNotSent at the store's Timeout. On a
// connection made before the server stopped, the script is written: the
// call fails at the Timeout with "the script may have run".
func TestHungStandalone(t *testing.T) {
	hung := redistest.HungAddr(t)
	srv := redistest.Start(t)
	for _, m := range modes {
		t.Run(m.name+"/listener", func(t *testing.T) {
			rdb := redis.NewClient(boundedOptions(&redis.Options{Addr: hung}, true))
			defer rdb.Close()
			s := newStore(t, rdb, redisstore.Config{Timeout: unreachableTimeout, Pipeline: m.cfg})
			d := fastest(t, func(err error) { wantNotSent(t, err) }, func() error { return takeOne(s, "k") })
			within(t, "hung listener", d, unreachableTimeout+slack)
		})
	}
	for _, m := range modes {
		t.Run(m.name+"/stopped", func(t *testing.T) {
			warmRdb := redis.NewClient(boundedOptions(srv.Options(), true))
			defer warmRdb.Close()
			warm(t, warmRdb, attempts)
			cold := redis.NewClient(boundedOptions(srv.Options(), true))
			defer cold.Close()
			ws := newStore(t, warmRdb, redisstore.Config{Timeout: unreachableTimeout, Pipeline: m.cfg})
			cs := newStore(t, cold, redisstore.Config{Timeout: unreachableTimeout, Pipeline: m.cfg})
			resume := stall(t, srv.Client())
			defer resume()
			d := fastest(t, func(err error) { wantMayHaveRun(t, err) }, func() error { return takeOne(ws, "k") })
			within(t, "stopped server, warm connection", d, unreachableTimeout+slack)
			d = fastest(t, func(err error) { wantNotSent(t, err) }, func() error { return takeOne(cs, "k") })
			within(t, "stopped server, fresh connection", d, unreachableTimeout+slack)
		})
	}
}

// clusterOptions are boundedOptions for a cluster client. With slots set,
// the client takes its slot map from them instead of asking a node, so
// that it opens no connection before its first call.
func clusterOptions(cl *redistest.Cluster, slots []redis.ClusterSlot) *redis.ClusterOptions {
	o := cl.Options()
	o.ContextTimeoutEnabled, o.DialerRetries = true, 1
	if slots != nil {
		o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) { return slots, nil }
	}
	return o
}

// TestHungCluster: a cluster whose master of the key is stopped. A call
// on a connection made before it stopped is written, and fails at the
// store's Timeout with "the script may have run"; one from a client with
// no connection to it yet fails at the Timeout with ErrNotSent, its
// handshake unanswered.
func TestHungCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			warmRdb := redis.NewClusterClient(clusterOptions(cl, nil))
			defer warmRdb.Close()
			ws := newStore(t, warmRdb, redisstore.Config{Timeout: unreachableTimeout, Pipeline: m.cfg})
			if err := takeOne(ws, "k"); err != nil {
				t.Fatal(err)
			}
			node, err := warmRdb.MasterForKey(ctxT(t), ws.Key("k"))
			if err != nil {
				t.Fatal(err)
			}
			// A connection for each call, and one for each reload of the
			// cluster state a failed call asks for (at most one per 200 ms),
			// which may go to the stopped node and hang there.
			warm(t, node, 3*attempts)
			slots, err := warmRdb.ClusterSlots(ctxT(t)).Result()
			if err != nil {
				t.Fatal(err)
			}
			// A fresh go-redis v9.23 ClusterClient loads COMMAND from a
			// random node before its first single command (for its routing
			// policies), with a 5 s timeout of its own and a lock that
			// holds every other call: on the stopped node, 5 s whatever the
			// call's deadline. Without routing policies it loads none.
			co := clusterOptions(cl, slots)
			co.DisableRoutingPolicies = true
			cold := redis.NewClusterClient(co)
			defer cold.Close()
			cs := newStore(t, cold, redisstore.Config{Prefix: ws.Key(""), Timeout: unreachableTimeout, Pipeline: m.cfg})
			admin := redis.NewClient(&redis.Options{Addr: node.Options().Addr})
			defer admin.Close()
			resume := stall(t, admin)
			defer resume()
			d := fastest(t, func(err error) { wantMayHaveRun(t, err) }, func() error { return takeOne(ws, "k") })
			within(t, "stopped master, warm connection", d, unreachableTimeout+slack)
			d = fastest(t, func(err error) { wantNotSent(t, err) }, func() error { return takeOne(cs, "k") })
			within(t, "stopped master, fresh connection", d, unreachableTimeout+slack)
		})
	}
}

// TestRefusedCluster: a cluster whose master of the key was killed. A
// client with no connection to it yet has its dial refused, and the call
// fails with ErrNotSent: at once with one dial attempt, by the store's
// Timeout with go-redis's default 5.
func TestRefusedCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	admin := cl.Client()
	slots, err := admin.ClusterSlots(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	cl.KillMasterOf(t, prefix+"k")
	for _, m := range modes {
		for _, oneDial := range []bool{true, false} {
			name, limit := m.name+"/one dial", unreachableTimeout/10
			if !oneDial {
				name, limit = m.name+"/default dials", unreachableTimeout+slack
			}
			t.Run(name, func(t *testing.T) {
				o := clusterOptions(cl, slots)
				if !oneDial {
					o.DialerRetries = 0
				}
				rdb := redis.NewClusterClient(o)
				defer rdb.Close()
				s := newStore(t, rdb, redisstore.Config{Prefix: prefix, Timeout: unreachableTimeout, Pipeline: m.cfg})
				d := fastest(t, func(err error) { wantNotSent(t, err) }, func() error { return takeOne(s, "k") })
				within(t, "killed master", d, limit)
			})
		}
	}
}
