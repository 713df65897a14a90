package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// The failover tests' cluster: three masters with a replica each, failed
// after 2 s without an answer.
const failoverNodeTimeout = 2 * time.Second

// failoverSlack is how late past the Timeout the slowest failed call on
// the killed master's keys may return: the worst of thousands of calls on
// two shared cores, from the deadline to the caller running again (7 ms
// measured). A failed call on the surviving masters' keys, which waits
// for nothing, must take less than liveFailLimit: the worst of thousands
// took 95 ms under -race on an idle machine and 385 ms with CI's other lane
// and a helper's tests beside it, while a call that waited for the killed
// master took 0.4 s (a refused dial, retried) to the Timeout, 1 s.
const (
	failoverSlack = 100 * time.Millisecond
	liveFailLimit = redisstore.DefaultTimeout / 2
)

// Bounds the failover test asserts: every call that starts later than
// servedAfterPromotion after the promotion (every running node agrees on
// the new master) succeeds, and so does every call that starts later than
// servedAfterKill after the kill. The promotion is Redis's: the node
// timeout, then 0.5 to 1 s of election delay, and the gossip; it came 3.0
// to 5.0 s after the kill, with or without the two cores busy. Every call
// succeeded again from 3.0 to 4.4 s after the kill, at most 0.2 s after
// the promotion and often before it (the client reloads from the first
// node that knows).
const (
	servedAfterPromotion = time.Second
	servedAfterKill      = failoverNodeTimeout + 4*time.Second
)

// failoverPolicy keeps buckets drained under the test's traffic (each key
// is visited several times a second), so every admission counts against
// the law: at most capacity + rate·t in t.
var failoverPolicy = algo.PerSecond(1).Burst(3)

// TestClusterFailover kills a master of a cluster with replicas under a
// steady load of Takes and TakeMultis, pipelined and not, with a client
// built as users build theirs (cluster addresses, go-redis defaults). It
// asserts that every key is served again within servedAfterKill of the
// kill and servedAfterPromotion of the promotion, that keys on the
// surviving masters never admit beyond the law, and that keys on the
// killed master exceed it by no more than a bucket's capacity.
//
// It asserts that no call on the surviving masters' keys fails, but for
// CLUSTERDOWN, which Redis itself answers for every key while the cluster
// is down (cluster-require-full-coverage, on by default: from the kill
// being noticed to the promotion) and which takes no wait: the
// auto-pipeline sends each master's calls apart, so none waits on the
// killed master (issue 28; before, about 20 timed out in each run, after
// the Timeout, with the pipelines they shared with its calls). Calls on
// the killed master's keys fail within the Timeout, those whose dial was
// refused with an error matching ErrNotSent. Writes the
// dead master acknowledged but had not yet replicated are lost, so the
// promoted replica may hold an older, fuller bucket: at most what the
// master admitted during the replication lag W, capacity + rate·W, which
// is the capacity for W under a second at 1 token/s (measured: 0 excess
// in every run, the lag on loopback being a fraction of a millisecond).
//
// The control runs the same failover with the store's reloads off and
// shows the keys of the killed master still failing 5 s after the
// promotion (all of them when the machine is idle, nine in ten required): the stall of go-redis issue #3979, which only the client's
// periodic reload (ClusterStateReloadInterval, 60 s) would end. It calls
// without pipelining, where a call to the dead master fails within
// 0.4 s, so every key is tried again and again in those 5 s.
func TestClusterFailover(t *testing.T) {
	cl := redistest.StartClusterOpts(t, redistest.ClusterConfig{Replicas: 1, NodeTimeout: failoverNodeTimeout})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f := runFailover(t, cl, m.cfg, true)
			if f.served > servedAfterKill || f.served-f.promoted > servedAfterPromotion {
				t.Errorf("every key served again %v after the kill (promotion at %v); want within %v, and %v of the promotion",
					f.served, f.promoted, servedAfterKill, servedAfterPromotion)
			}
			if f.reloads == 0 {
				t.Errorf("the store asked for no cluster state reload")
			}
			if f.liveExcess > 0 {
				t.Errorf("keys on the surviving masters admitted %d beyond capacity + rate·t", f.liveExcess)
			}
			if f.maxExcess > failoverPolicy.Capacity() {
				t.Errorf("a key of the killed master admitted %d beyond capacity + rate·t, more than a bucket (%d)", f.maxExcess, failoverPolicy.Capacity())
			}
			if n := f.liveFails - int64(f.liveKinds["CLUSTERDOWN"]); n > 0 || f.liveSlowest >= liveFailLimit {
				t.Errorf("%d calls on the surviving masters' keys failed otherwise than by a CLUSTERDOWN reply (%v), the slowest after %v; want none, and none as slow as %v",
					n, f.liveKinds, f.liveSlowest, liveFailLimit)
			}
			if f.deadSlowest > redisstore.DefaultTimeout+failoverSlack {
				t.Errorf("a call on the killed master's keys failed after %v, later than the Timeout (%v)", f.deadSlowest, redisstore.DefaultTimeout)
			}
			if n := f.deadKinds["refused"]; n > 0 {
				t.Errorf("%d calls to the killed master failed on a refused dial without matching ErrNotSent", n)
			}
		})
	}
	t.Run("control: no reload", func(t *testing.T) {
		f := runFailover(t, cl, redisstore.PipelineConfig{Disabled: true}, false)
		// Under a heavy CPU load a few keys were served (14 of 270 once, at
		// a load average of 21 on 2 cores), so the control asks for nine
		// in ten: with the reloads every key was served within 0.2 s.
		if f.stalled*10 < f.deadUnits*9 || f.deadUnits == 0 {
			t.Errorf("without reloads %d of the %d units on the killed master were not served in the 5 s after the promotion, and failed in the last 3; want at least nine in ten: the control shows no stall",
				f.stalled, f.deadUnits)
		}
	})
}

// failoverResult is what runFailover measured. Durations are from the
// kill.
type failoverResult struct {
	promoted  time.Duration // until every running node agrees on the new master
	served    time.Duration // until the start of the last failed call: every call started later succeeded
	deadUnits int           // units on the killed master
	stalled   int           // control: units not served in the 5 s after the promotion, failing in the last 3
	reloads   int64
	// Admissions beyond capacity + rate·t, summed over the keys of the
	// surviving masters, and the most for one key of the killed master.
	liveExcess, maxExcess int64
	// Failed calls on the surviving masters' keys, by kind (errorKind,
	// with " (not sent)" when the error matches ErrNotSent), those on the
	// killed master's keys, and the longest failed call on each side.
	liveFails                int64
	liveKinds, deadKinds     map[string]int
	liveSlowest, deadSlowest time.Duration
}

// runFailover starts traffic on a store over a new client of cl, kills the
// master of the first key once every bucket is drained, and waits until
// every key is served again (or, with reload off, 5 s past the
// promotion). It revives the killed node, which rejoins as a replica, when
// the test ends.
func runFailover(t *testing.T, cl *redistest.Cluster, pc redisstore.PipelineConfig, reload bool) failoverResult {
	rdb := redis.NewClusterClient(cl.Options())
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, rdb, redisstore.Config{Pipeline: pc})
	if !reload {
		redisstore.NoFailoverReload(s)
	}
	tr := startTraffic(s, failoverPolicy, 600, 200, 8)
	t.Cleanup(tr.halt)
	waitUntil(t, 20*time.Second, "every bucket drained", func() bool { return tr.minRounds() >= 5 })

	slots, err := rdb.ClusterSlots(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(u *unit) string {
		slot := redisstore.Slot(s.Key(u.keys[0]))
		for _, r := range slots {
			if r.Start <= slot && slot <= r.End {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("slot %d has no master in %v", slot, slots)
		return ""
	}
	dead := cl.MasterOf(t, s.Key(tr.units[0].keys[0]))
	if m := masterOf(tr.units[0]); m != dead {
		t.Fatalf("the client routes %s to %s, the cluster to %s", tr.units[0].keys[0], m, dead)
	}
	kill := time.Now()
	cl.Kill(t, dead)
	t.Cleanup(func() {
		cl.Revive(t, dead)
		cl.WaitOK(t)
	})
	cl.WaitOK(t)
	f := failoverResult{liveKinds: map[string]int{}, deadKinds: map[string]int{}}
	f.promoted = time.Since(kill)
	promoted := kill.Add(f.promoted)

	if reload {
		waitUntil(t, 20*time.Second, "every key served again", func() bool { return tr.servedSince(promoted) })
		rounds := tr.minRounds()
		waitUntil(t, 10*time.Second, "two more rounds", func() bool { return tr.minRounds() >= rounds+2 })
	} else {
		waitUntil(t, 10*time.Second, "5 s past the promotion", func() bool { return time.Since(promoted) >= 5*time.Second })
	}
	tr.halt()

	var lastErr int64           // UnixNano
	failing := map[string]int{} // units with errors, by master
	rate := failoverPolicy.Rate()
	for _, u := range tr.units {
		m := masterOf(u)
		if m == dead {
			f.deadUnits++
			if !reload && u.lastErr.Load() > promoted.Add(2*time.Second).UnixNano() && u.lastOK.Load() < promoted.UnixNano() {
				f.stalled++
			}
		}
		if u.errs.Load() > 0 {
			if m != dead {
				f.liveFails += u.errs.Load()
				for k, n := range u.kinds {
					f.liveKinds[k] += n
				}
				f.liveSlowest = max(f.liveSlowest, u.slowest)
			} else {
				for k, n := range u.kinds {
					f.deadKinds[k] += n
				}
				f.deadSlowest = max(f.deadSlowest, u.slowest)
			}
			failing[m]++
			lastErr = max(lastErr, u.lastErr.Load())
		}
		if u.first.IsZero() {
			continue
		}
		allowed := failoverPolicy.Capacity() + rate.Tokens*int64(u.last.Sub(u.first))/int64(rate.Period)
		excess := max(u.admitted-allowed, 0)
		if m == dead {
			f.maxExcess = max(f.maxExcess, excess)
		} else {
			f.liveExcess += excess
		}
		if excess > 0 {
			t.Logf("%v on %s: %d admitted in %v, law allows %d", u.keys, m, u.admitted, u.last.Sub(u.first).Round(time.Millisecond), allowed)
		}
	}
	f.served = time.Unix(0, lastErr).Sub(kill)
	f.reloads = redisstore.FailoverReloads(s)
	t.Logf("killed %s: promoted after %v; the last failed call started %v after the kill; %d units (of %d; %d on the killed master) failed at least once, by master %v; %d reloads asked; errors %s; excess admissions: %d on the surviving masters, at most %d per key on the killed one",
		dead, f.promoted.Round(time.Millisecond), f.served.Round(time.Millisecond), sumValues(failing), len(tr.units), f.deadUnits, failing, f.reloads, tr.errorSummary(kill), f.liveExcess, f.maxExcess)
	t.Logf("failed calls on the surviving masters' keys: %d %v, the slowest %v; on the killed master's: %v, the slowest %v",
		f.liveFails, f.liveKinds, f.liveSlowest.Round(time.Millisecond), f.deadKinds, f.deadSlowest.Round(time.Millisecond))
	if !reload {
		t.Logf("without reloads: %d of the %d units on the killed master not served in the 5 s after the promotion, and failing in the last 3", f.stalled, f.deadUnits)
	}
	return f
}

// unit is one key taken with Take, or two keys with one hash tag taken
// together with TakeMulti. Only its worker writes admitted, first and last
// (read after the traffic stops); lastOK and lastErr are read while it
// runs.
type unit struct {
	keys        []string
	admitted    int64     // calls that admitted
	first, last time.Time // start of its first call, end of its last successful one
	// UnixNano at the start of the last call that succeeded, that failed.
	lastOK, lastErr atomic.Int64
	errs            atomic.Int64
	// Its failed calls by kind (errorKind, and whether nothing was sent),
	// and the longest one; written by its worker only.
	kinds   map[string]int
	slowest time.Duration
}

// traffic runs workers that each take cost 1 from their units in turn,
// as fast as the store answers, until halted.
type traffic struct {
	s      *redisstore.Store
	p      algo.Policy
	units  []*unit
	done   []atomic.Int64 // rounds each worker has completed
	stop   chan struct{}
	halted sync.Once
	wg     sync.WaitGroup

	mu          sync.Mutex
	kinds       map[string]int           // errors by kind
	first, last map[string]time.Time     // the start of the first and last failed call, by kind
	slowest     map[string]time.Duration // the longest failed call, by kind
	sample      map[string]string        // one message per kind
}

// startTraffic starts workers over singles keys taken alone and pairs of
// hash-tagged keys taken together.
func startTraffic(s *redisstore.Store, p algo.Policy, singles, pairs, workers int) *traffic {
	tr := &traffic{s: s, p: p, done: make([]atomic.Int64, workers), stop: make(chan struct{}),
		kinds: map[string]int{}, first: map[string]time.Time{}, last: map[string]time.Time{},
		slowest: map[string]time.Duration{}, sample: map[string]string{}}
	for i := range singles {
		tr.units = append(tr.units, &unit{keys: []string{fmt.Sprintf("f:%d", i)}})
	}
	for i := range pairs {
		tr.units = append(tr.units, &unit{keys: []string{fmt.Sprintf("{fm:%d}:a", i), fmt.Sprintf("{fm:%d}:b", i)}})
	}
	for w := range workers {
		tr.wg.Go(func() {
			for {
				for i := w; i < len(tr.units); i += workers {
					select {
					case <-tr.stop:
						return
					default:
					}
					tr.take(tr.units[i])
				}
				tr.done[w].Add(1)
			}
		})
	}
	return tr
}

// take makes one call for u, under the store's timeout (1 s).
func (tr *traffic) take(u *unit) {
	start := time.Now()
	var allowed bool
	var err error
	if len(u.keys) == 1 {
		var r algo.Result
		r, err = tr.s.Take(context.Background(), store.Request{Key: u.keys[0], Policy: tr.p, Cost: 1})
		allowed = r.Allowed
	} else {
		var r store.MultiResult
		r, err = tr.s.TakeMulti(context.Background(), []store.Request{
			{Key: u.keys[0], Policy: tr.p, Cost: 1}, {Key: u.keys[1], Policy: tr.p, Cost: 1}})
		allowed = r.Allowed
	}
	end := time.Now()
	if u.first.IsZero() {
		u.first = start
	}
	if err != nil {
		u.errs.Add(1)
		u.lastErr.Store(start.UnixNano())
		k := errorKind(err)
		if errors.Is(err, redisstore.ErrNotSent) {
			k += " (not sent)"
		}
		if u.kinds == nil {
			u.kinds = map[string]int{}
		}
		u.kinds[k]++
		u.slowest = max(u.slowest, end.Sub(start))
		tr.record(err, start, end.Sub(start))
		return
	}
	u.last = end
	u.lastOK.Store(start.UnixNano())
	if allowed {
		u.admitted++
	}
}

func (tr *traffic) record(err error, start time.Time, took time.Duration) {
	kind := errorKind(err)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.kinds[kind] == 0 || start.Before(tr.first[kind]) {
		tr.first[kind] = start
	}
	if start.After(tr.last[kind]) {
		tr.last[kind] = start
	}
	tr.kinds[kind]++
	tr.slowest[kind] = max(tr.slowest[kind], took)
	if _, ok := tr.sample[kind]; !ok {
		tr.sample[kind] = err.Error()
	}
}

// errorKind names what went wrong, for the log.
func errorKind(err error) string {
	var op *net.OpError
	switch msg := err.Error(); {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "dropped"
	case strings.Contains(msg, "CLUSTERDOWN"):
		return "CLUSTERDOWN"
	case errors.As(err, &op) && op.Timeout(), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return "other"
}

// errorSummary describes the errors by kind, their times from t0.
func (tr *traffic) errorSummary(t0 time.Time) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(tr.kinds)) {
		fmt.Fprintf(&b, "%s %d (started from %v to %v, the slowest took %v; %.120q); ", k, tr.kinds[k],
			tr.first[k].Sub(t0).Round(time.Millisecond), tr.last[k].Sub(t0).Round(time.Millisecond), tr.slowest[k].Round(time.Millisecond), tr.sample[k])
	}
	return b.String()
}

// servedSince reports whether every unit has been served by a call that
// started after t and after its last failed call started.
func (tr *traffic) servedSince(t time.Time) bool {
	for _, u := range tr.units {
		if ok := u.lastOK.Load(); ok <= t.UnixNano() || ok <= u.lastErr.Load() {
			return false
		}
	}
	return true
}

// minRounds returns the rounds completed by the slowest worker.
func (tr *traffic) minRounds() int64 {
	n := tr.done[0].Load()
	for i := range tr.done {
		n = min(n, tr.done[i].Load())
	}
	return n
}

// halt stops the workers and waits for them.
func (tr *traffic) halt() {
	tr.halted.Do(func() { close(tr.stop) })
	tr.wg.Wait()
}

// waitUntil polls cond until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond) // polls a condition; times nothing
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v", what, limit)
		}
		<-tick.C
	}
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestRestartRefillsBuckets: a Redis with persistence off that is killed
// and started again comes back empty, so every bucket it held comes back
// full: a drained key admits its capacity again at once, beyond the law by
// exactly that. Shown for a standalone server and for a cluster master
// with no replica (it keeps its slots, from nodes.conf, and loses its
// data); keys on the other masters stay drained. The test measures how
// long the keys fail after the restart.
func TestRestartRefillsBuckets(t *testing.T) {
	p := algo.PerHour(1).Burst(5)
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		if srv.External() {
			t.Skip("needs a local server to kill and restart, not REDIS_URL")
		}
		s := newStore(t, srv.Client(), redisstore.Config{})
		keys := restartKeys(100)
		drain(t, s, p, keys)
		srv.Restart(t)
		refilled(t, s, p, keys, func(string) bool { return true })
	})
	t.Run("cluster master without replica", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		s := newStore(t, cl.Client(), redisstore.Config{})
		keys := restartKeys(90)
		drain(t, s, p, keys)
		master := map[string]string{}
		for _, k := range keys {
			master[k] = cl.MasterOf(t, s.Key(k))
		}
		victim := master[keys[0]]
		cl.Kill(t, victim)
		cl.Revive(t, victim)
		refilled(t, s, p, keys, func(k string) bool { return master[k] == victim })
		cl.WaitOK(t)
		if m := cl.MasterOf(t, s.Key(keys[0])); m != victim {
			t.Errorf("after the restart %s is served by %s, want %s still (no replica to promote)", keys[0], m, victim)
		}
	})
}

func restartKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("r:%d", i)
	}
	return keys
}

// drain takes every token of each key's bucket and checks the next Take
// is denied.
func drain(t *testing.T, s *redisstore.Store, p algo.Policy, keys []string) {
	t.Helper()
	for _, k := range keys {
		r, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: p.Capacity()})
		if err == nil && r.Allowed {
			r, err = s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 1})
		}
		if err != nil || r.Allowed {
			t.Fatalf("draining %s: %+v, %v; want drained", k, r, err)
		}
	}
}

// refilled takes from each key after a restart, retrying a failed call
// (every 10 ms, for at most 20 s), and checks that the keys lost (for
// which lost is true) admit their whole capacity again and the others
// admit nothing. It logs how long the keys failed and how often.
func refilled(t *testing.T, s *redisstore.Store, p algo.Policy, keys []string, lost func(string) bool) {
	t.Helper()
	start := time.Now()
	kinds := map[string]int{}
	var failed int
	var last time.Duration // until the last failed call
	nLost := 0
	for _, k := range keys {
		var r algo.Result
		waitUntil(t, 20*time.Second, "served after the restart", func() bool {
			var err error
			if r, err = s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 1}); err != nil {
				failed++
				kinds[errorKind(err)]++
				last = time.Since(start)
				return false
			}
			return true
		})
		switch {
		case !lost(k) && r.Allowed:
			t.Errorf("%s, on a node that was not restarted, admitted after the restart: %+v", k, r)
		case lost(k) && (!r.Allowed || r.Remaining != p.Capacity()-1):
			t.Errorf("%s after the restart: %+v; want a full bucket", k, r)
		case lost(k):
			nLost++
			if r, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: p.Capacity() - 1}); err != nil || !r.Allowed {
				t.Errorf("%s: the rest of the refilled bucket: %+v, %v", k, r, err)
			}
		}
	}
	t.Logf("%d of %d drained buckets came back full (%d admissions beyond the law each); %d failed calls %v, the last %v after the restart returned",
		nLost, len(keys), p.Capacity(), failed, kinds, last.Round(time.Millisecond))
}

// TestNodeLost: the errors that ask a cluster client for a reload are
// those of a node that cannot be reached, dropped the connection or did
// not answer in time, not a reply from Redis or a local limit.
func TestNodeLost(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{dial, true},
		{fmt.Errorf("redisstore: redis: %w", dial), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true}, // i/o timeout
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{context.DeadlineExceeded, true}, // what go-redis leaves in a pipeline whose dial retries outlast it
		{context.Canceled, false},
		{redis.ErrClosed, false},
		{redis.ErrPoolTimeout, false},
		{redis.Nil, false},
		{errors.New("CLUSTERDOWN The cluster is down"), false},
		{errors.New("MOVED 3999 127.0.0.1:6381"), false},
		{errors.New("LOADING Redis is loading the dataset in memory"), false},
	} {
		if got := redisstore.NodeLost(c.err); got != c.want {
			t.Errorf("NodeLost(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
