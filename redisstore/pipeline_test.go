package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// pausing is how long the pipeline tests pause the server (CLIENT PAUSE)
// to hold a writer's pipeline in flight while they queue calls behind it.
const pausing = 2 * time.Second

// outcome is what one background Take returned.
type outcome struct {
	res algo.Result
	err error
}

// takeAsync runs s.Take in a goroutine and delivers its outcome.
func takeAsync(ctx context.Context, s *redisstore.Store, key string, p algo.Policy) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := s.Take(ctx, key, p, 1)
		ch <- outcome{res, err}
	}()
	return ch
}

// waitState polls until the store's pipeline has queued calls queued and
// writers writers. It synchronises with the store; it measures no time.
func waitState(t *testing.T, s *redisstore.Store, queued, writers int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		if q, w := redisstore.PipelineState(s); q == queued && w == writers {
			return
		}
	}
	q, w := redisstore.PipelineState(s)
	t.Fatalf("pipeline has %d queued, %d writers; want %d and %d", q, w, queued, writers)
}

// pause stops the server from running commands for [pausing]; a call
// written meanwhile stays in flight until then.
func pause(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.ClientPause(ctxT(t), pausing).Err(); err != nil {
		t.Fatal(err)
	}
}

// holdFirst starts a store with pipeline configuration pc on a fresh
// server, pauses the server and sends one Take on "first" under the policy
// it returns, and returns once that Take is in flight: it holds a writer
// until the pause ends.
func holdFirst(t *testing.T, pc redisstore.PipelineConfig) (*redisstore.Store, algo.Policy, <-chan outcome) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{Timeout: 10 * time.Second, Pipeline: pc})
	p := algo.PerHour(1).Burst(10)
	pause(t, rdb)
	first := takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	return s, p, first
}

// deadlineClient returns a client of srv whose context deadlines reach the
// socket, closed when the test ends.
func deadlineClient(t *testing.T, srv *redistest.Server) *redis.Client {
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// mustFull fails unless the buckets at keys are absent: never charged.
func mustFull(t *testing.T, s *redisstore.Store, p algo.Policy, keys ...string) {
	t.Helper()
	for _, k := range keys {
		b, err := s.Inspect(ctxT(t), k, p)
		if err != nil || b.Exists {
			t.Errorf("Inspect(%q) = %+v, %v; want an absent key (nothing charged)", k, b, err)
		}
	}
}

// TestPipelineDifferential issues each step's takes, on distinct keys, at
// once from as many goroutines into one writer, so they share pipelines,
// and requires the Results algo gives for the same takes one by one.
func TestPipelineDifferential(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		clk := storetest.NewClock()
		s := newStore(t, rdb, redisstore.Config{Clock: clk, Prefix: fmt.Sprintf("%sprun%d:", redistest.Prefix(t), run), TTLMargin: time.Hour,
			Pipeline: redisstore.PipelineConfig{Writers: 1, MaxBatch: 4, MaxDelay: time.Millisecond}})
		const nkeys = 8
		pols := make([]algo.Policy, nkeys)
		for i := range pols {
			pols[i] = genEdgePolicy(rt, fmt.Sprintf("p%d ", i))
		}
		states := make([]algo.State, nkeys)
		for step := range rapid.IntRange(1, 12).Draw(rt, "steps") {
			keys := rapid.SliceOfNDistinct(rapid.IntRange(0, nkeys-1), 1, nkeys, rapid.ID[int]).Draw(rt, "keys")
			now := clk.Add(genEdgeStep(rt, pols[keys[0]]))
			if now.UnixMicro() < 0 || now.UnixMicro() > algo.MaxTime {
				clk.Set(storetest.Start)
				now = storetest.Start
			}
			want, got := make([]algo.Result, len(keys)), make([]algo.Result, len(keys))
			costs := make([]int64, len(keys))
			for j, k := range keys {
				costs[j] = genEdgeCost(rt, pols[k])
				var err error
				if states[k], want[j], err = (algo.TokenBucket{}).Take(pols[k], states[k], now.UnixMicro(), costs[j]); err != nil {
					rt.Fatal(err)
				}
				states[k] = forget(pols[k], states[k], now.UnixMicro())
			}
			errs := make([]error, len(keys))
			var wg sync.WaitGroup
			for j, k := range keys {
				wg.Go(func() { got[j], errs[j] = s.Take(context.Background(), fmt.Sprint("k", k), pols[k], costs[j]) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil || !slices.Equal(got, want) {
				rt.Fatalf("step %d keys %v costs %v:\nalgo      %+v\npipelined %+v (%v)", step, keys, costs, want, got, err)
			}
		}
	})
}

// TestPipelineCancelBeforeSend: calls queued behind a pipeline in flight
// whose contexts end return at once with the context's error, and are
// never sent: their buckets stay full.
func TestPipelineCancelBeforeSend(t *testing.T) {
	s, p, first := holdFirst(t, redisstore.PipelineConfig{Writers: 1}) // first is in flight, holding the only writer
	ctx, cancel := context.WithCancel(context.Background())
	keys := []string{"c0", "c1", "c2", "c3", "c4"}
	var queued []<-chan outcome
	for _, k := range keys {
		queued = append(queued, takeAsync(ctx, s, k, p))
	}
	waitState(t, s, len(keys), 1)
	cancel()
	for i, ch := range queued {
		if o := <-ch; !errors.Is(o.err, context.Canceled) {
			t.Errorf("queued take %d after cancel: %+v, %v; want context.Canceled", i, o.res, o.err)
		}
	}
	select {
	case o := <-first:
		t.Fatalf("first take returned %+v, %v while the server was paused", o.res, o.err)
	default: // the cancelled calls returned while the pipeline was in flight
	}
	if o := <-first; o.err != nil || o.res.Remaining != 9 {
		t.Fatalf("first take = %+v, %v; want 9 remaining", o.res, o.err)
	}
	waitState(t, s, 0, 0)
	mustFull(t, s, p, keys...)
}

// TestPipelineLeadRule: a lone call is sent at once; calls that arrive
// while its pipeline is in flight wait, and only the MinLead-th of them
// starts a second writer, which takes them all in one pipeline.
func TestPipelineLeadRule(t *testing.T) {
	s, p, first := holdFirst(t, redisstore.PipelineConfig{Writers: 4}) // sent at once: no writer was running
	var waiting []<-chan outcome
	for i := range redisstore.MinLead - 1 {
		waiting = append(waiting, takeAsync(context.Background(), s, fmt.Sprint("w", i), p))
		waitState(t, s, i+1, 1) // queued behind first: no second writer yet
	}
	waiting = append(waiting, takeAsync(context.Background(), s, "last", p))
	waitState(t, s, 0, 2) // the MinLead-th started a writer, which took every waiting call
	for i, ch := range append(waiting, first) {
		if o := <-ch; o.err != nil || o.res.Remaining != 9 {
			t.Errorf("take %d = %+v, %v; want 9 remaining", i, o.res, o.err)
		}
	}
	waitState(t, s, 0, 0)
}

// TestPipelineQueueFull: a call that finds MaxQueued calls waiting blocks,
// and returns its context's error, charging nothing, when that ends.
func TestPipelineQueueFull(t *testing.T) {
	s, p, first := holdFirst(t, redisstore.PipelineConfig{Writers: 1, MaxQueued: 2})
	a, b := takeAsync(context.Background(), s, "a", p), takeAsync(context.Background(), s, "b", p)
	waitState(t, s, 2, 1)
	ctx, cancel := context.WithCancel(context.Background())
	over := takeAsync(ctx, s, "over", p)
	cancel()
	if o := <-over; !errors.Is(o.err, context.Canceled) {
		t.Errorf("take on a full queue = %+v, %v; want context.Canceled", o.res, o.err)
	}
	for _, ch := range []<-chan outcome{first, a, b} {
		if o := <-ch; o.err != nil || !o.res.Allowed {
			t.Errorf("take = %+v, %v; want allowed", o.res, o.err)
		}
	}
	mustFull(t, s, p, "over")
}

// TestPipelineFailureIsolation: pipelines that fail (their callers'
// deadline passes while the server is paused) fail only their own calls; a
// pipeline of calls with time to spare, sent behind them, succeeds, and a
// queued call whose deadline passed is dropped unsent.
func TestPipelineFailureIsolation(t *testing.T) {
	srv := redistest.Start(t)
	rdb := deadlineClient(t, srv)
	s := newStore(t, rdb, redisstore.Config{Pipeline: redisstore.PipelineConfig{Writers: 2}})
	p := algo.PerHour(1).Burst(10)
	short, cancel := context.WithTimeout(context.Background(), pausing/2)
	defer cancel()
	long, cancel2 := context.WithTimeout(context.Background(), 10*pausing)
	defer cancel2()
	pause(t, srv.Client())
	as := []<-chan outcome{takeAsync(short, s, "a0", p)}
	waitState(t, s, 0, 1) // a0 in flight on the first writer
	for i := 1; i <= redisstore.MinLead; i++ {
		as = append(as, takeAsync(short, s, fmt.Sprint("a", i), p))
		if i < redisstore.MinLead {
			waitState(t, s, i, 1)
		}
	}
	waitState(t, s, 0, 2) // a1..a8 in flight on the second
	last := fmt.Sprint("a", redisstore.MinLead+1)
	as = append(as, takeAsync(short, s, last, p))
	waitState(t, s, 1, 2)
	var bs []<-chan outcome
	for i := range 4 {
		bs = append(bs, takeAsync(long, s, fmt.Sprint("b", i), p))
	}
	waitState(t, s, 5, 2)
	for i, ch := range as {
		if o := <-ch; !errors.Is(o.err, context.DeadlineExceeded) {
			t.Errorf("short take a%d = %+v, %v; want context.DeadlineExceeded", i, o.res, o.err)
		}
	}
	for i, ch := range bs {
		if o := <-ch; o.err != nil || o.res.Remaining != 9 {
			t.Errorf("long take b%d = %+v, %v; want allowed, 9 remaining", i, o.res, o.err)
		}
	}
	mustFull(t, s, p, last)
}

// TestPipelineNoScript: after SCRIPT FLUSH the commands of a pipeline that
// reply NOSCRIPT are sent again as EVAL, once each: the buckets are charged
// exactly once per take.
func TestPipelineNoScript(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("SCRIPT FLUSH would drop the scripts of others sharing the server (REDIS_URL)")
	}
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{Timeout: 10 * time.Second, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	p := algo.PerHour(1).Burst(10)
	if _, err := s.Take(ctxT(t), "k", p, 1); err != nil { // the script is loaded
		t.Fatal(err)
	}
	ev0 := calls(t, rdb, "eval")
	flusher := srv.Client() // connected before the pause, which would hold its handshake
	if err := flusher.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	pause(t, rdb)
	first := takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	var batch []<-chan outcome
	for range 9 {
		batch = append(batch, takeAsync(context.Background(), s, "k", p))
	}
	waitState(t, s, 9, 1)
	// Queued behind the pause, the flush runs as soon as the pause ends,
	// before the batch (sent once first's reply is in) reaches the server.
	flushed := make(chan error, 1)
	go func() { flushed <- flusher.ScriptFlush(context.Background()).Err() }()
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	var remaining []int64
	for _, ch := range batch {
		o := <-ch
		if o.err != nil {
			t.Fatal(o.err)
		}
		remaining = append(remaining, o.res.Remaining)
	}
	slices.Sort(remaining)
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(remaining, want) {
		t.Fatalf("remaining after the batch %v, want %v: each take charged once", remaining, want)
	}
	if ev := calls(t, rdb, "eval") - ev0; ev < 9 || ev > 10 {
		t.Fatalf("EVAL ran %d times, want 9 (the batch) or 10 (and first)", ev)
	}
	if res, err := s.Take(ctxT(t), "k", p, 1); err != nil || res.Allowed {
		t.Fatalf("11th take = %+v, %v; want denied", res, err)
	}
}

// TestPipelineClose: Close sends what is queued, stops the writers, and later calls get store.ErrClosed.
func TestPipelineClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Timeout: 10 * time.Second, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p := algo.PerHour(1).Burst(10)
	pause(t, rdb)
	all := []<-chan outcome{takeAsync(context.Background(), s, "first", p)}
	waitState(t, s, 0, 1)
	for i := range 5 {
		all = append(all, takeAsync(context.Background(), s, fmt.Sprint("q", i), p))
	}
	waitState(t, s, 5, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range all {
		if o := <-ch; o.err != nil || o.res.Remaining != 9 {
			t.Errorf("take %d = %+v, %v; want allowed, 9 remaining (sent by Close)", i, o.res, o.err)
		}
	}
	if _, err := s.Take(ctxT(t), "late", p, 1); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Take after Close: %v, want store.ErrClosed", err)
	}
}

// TestPipelineNoScriptCluster: a pipeline that go-redis splits over the
// masters of a cluster, one of which lost its scripts, sends again as EVAL
// only the commands that node answered NOSCRIPT: every bucket is charged
// once, and the other nodes run no EVAL.
func TestPipelineNoScriptCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	s := newStore(t, rdb, redisstore.Config{Timeout: 10 * time.Second, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	p := algo.PerHour(1).Burst(10)
	ctx := ctxT(t)
	byNode := map[string][]string{}
	nodes := map[string]*redis.Client{}
	var addrs, keys []string
	for i := 0; len(keys) < 3*redistest.ClusterSize; i++ {
		k := fmt.Sprint("n", i)
		m, err := rdb.MasterForKey(ctx, s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		addr := m.Options().Addr
		if nodes[addr] == nil {
			nodes[addr] = m
			addrs = append(addrs, addr)
		}
		if len(byNode[addr]) < 3 {
			byNode[addr] = append(byNode[addr], k)
			keys = append(keys, k)
			if _, err := s.Take(ctx, k, p, 1); err != nil { // loads the script on every node
				t.Fatal(err)
			}
		}
	}
	held, lost := addrs[0], addrs[1]
	ev0 := map[string]int{}
	for _, a := range addrs {
		ev0[a] = calls(t, nodes[a], "eval")
	}
	if err := nodes[lost].ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	pause(t, nodes[held])
	first := takeAsync(context.Background(), s, byNode[held][0], p)
	waitState(t, s, 0, 1)
	var batch []<-chan outcome
	for _, k := range keys {
		batch = append(batch, takeAsync(context.Background(), s, k, p))
	}
	waitState(t, s, len(keys), 1)
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	for i, ch := range batch {
		want := int64(8)
		if keys[i] == byNode[held][0] {
			want = 7 // also taken by first
		}
		if o := <-ch; o.err != nil || o.res.Remaining != want {
			t.Errorf("take on %s = %+v, %v; want %d remaining (charged once)", keys[i], o.res, o.err, want)
		}
	}
	for _, a := range addrs {
		want := 0
		if a == lost {
			want = len(byNode[lost])
		}
		if ev := calls(t, nodes[a], "eval") - ev0[a]; ev != want {
			t.Errorf("node %s ran EVAL %d times, want %d", a, ev, want)
		}
	}
}
