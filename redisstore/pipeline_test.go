package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
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

// patience bounds how long a test waits for a state it polls for, or for
// a call the test holds on purpose: far longer than any takes on a loaded
// machine. It bounds a failing test; it times nothing.
const patience = time.Minute

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

// poll calls cond until it reports true, and reports false if that has
// not happened within patience. It synchronises with what cond reads; it
// measures no time.
func poll(cond func() bool) bool {
	for end := time.Now().Add(patience); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// waitState polls until the store's pipeline has queued calls queued and
// writers writers.
func waitState(t *testing.T, s *redisstore.Store, queued, writers int) {
	t.Helper()
	var q, w int
	if !poll(func() bool { q, w = redisstore.PipelineState(s); return q == queued && w == writers }) {
		t.Fatalf("pipeline has %d queued, %d writers; want %d and %d", q, w, queued, writers)
	}
}

// pause holds every script the server of rdb receives (CLIENT PAUSE
// WRITE: EVALSHA and EVAL wait; PING, INFO, CLIENT and SCRIPT commands
// run) until the returned unpause is called, or the test ends. A call sent
// meanwhile stays in flight.
func pause(t *testing.T, rdb *redis.Client) (unpause func()) {
	t.Helper()
	if err := rdb.Do(ctxT(t), "CLIENT", "PAUSE", time.Hour.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause = func() {
		once.Do(func() {
			if err := rdb.ClientUnpause(context.Background()).Err(); err != nil {
				t.Errorf("CLIENT UNPAUSE: %v", err)
			}
		})
	}
	t.Cleanup(unpause)
	return unpause
}

// holdFirst starts a store with pipeline configuration pc on a fresh
// server, pauses the server and sends one Take on "first" under the policy
// it returns, and returns once that Take is in flight: it holds a writer
// until unpause is called.
func holdFirst(t *testing.T, pc redisstore.PipelineConfig) (s *redisstore.Store, p algo.Policy, first <-chan outcome, unpause func()) {
	t.Helper()
	rdb := heldClient(t, redistest.Start(t))
	s = newStore(t, rdb, redisstore.Config{Timeout: patience, Pipeline: pc})
	p = algo.PerHour(1).Burst(10)
	unpause = pause(t, rdb)
	first = takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	return s, p, first, unpause
}

// heldClient returns a client of srv, closed when the test ends, whose
// only deadlines are its calls' contexts (no ReadTimeout): a call held by
// a pause waits as long as the test holds it.
func heldClient(t *testing.T, srv *redistest.Server) *redis.Client {
	o := srv.Options()
	o.ContextTimeoutEnabled, o.ReadTimeout = true, -1
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// lapsed is a context whose deadline has passed but whose Done channel
// stays open until expire is called: the moment between a deadline and
// its timer firing, held for as long as the test needs.
type lapsed struct {
	context.Context // Background, for Value
	at              time.Time
	done            chan struct{}
	once            sync.Once
}

func newLapsed() *lapsed {
	return &lapsed{Context: context.Background(), at: time.Now(), done: make(chan struct{})}
}

func (c *lapsed) Deadline() (time.Time, bool) { return c.at, true }
func (c *lapsed) Done() <-chan struct{}       { return c.done }

func (c *lapsed) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *lapsed) expire() { c.once.Do(func() { close(c.done) }) }

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
	s, p, first, unpause := holdFirst(t, redisstore.PipelineConfig{Writers: 1}) // first is in flight, holding the only writer
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
	unpause()
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
	s, p, first, unpause := holdFirst(t, redisstore.PipelineConfig{Writers: 4}) // sent at once: no writer was running
	var waiting []<-chan outcome
	for i := range redisstore.MinLead - 1 {
		waiting = append(waiting, takeAsync(context.Background(), s, fmt.Sprint("w", i), p))
		waitState(t, s, i+1, 1) // queued behind first: no second writer yet
	}
	waiting = append(waiting, takeAsync(context.Background(), s, "last", p))
	waitState(t, s, 0, 2) // the MinLead-th started a writer, which took every waiting call
	unpause()
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
	s, p, first, unpause := holdFirst(t, redisstore.PipelineConfig{Writers: 1, MaxQueued: 2})
	a, b := takeAsync(context.Background(), s, "a", p), takeAsync(context.Background(), s, "b", p)
	waitState(t, s, 2, 1)
	ctx, cancel := context.WithCancel(context.Background())
	over := takeAsync(ctx, s, "over", p)
	cancel()
	if o := <-over; !errors.Is(o.err, context.Canceled) {
		t.Errorf("take on a full queue = %+v, %v; want context.Canceled", o.res, o.err)
	}
	unpause()
	for _, ch := range []<-chan outcome{first, a, b} {
		if o := <-ch; o.err != nil || !o.res.Allowed {
			t.Errorf("take = %+v, %v; want allowed", o.res, o.err)
		}
	}
	mustFull(t, s, p, "over")
}

// TestPipelineFailureIsolation: pipelines that fail (the server drops
// their connections while a pause holds them) fail only their own calls,
// each with the pipeline's error; the calls queued behind them leave in a
// pipeline of their own, which succeeds; and a queued call whose deadline
// has passed is dropped unsent by the writer that takes it, before its
// caller even sees the deadline.
func TestPipelineFailureIsolation(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("CLIENT KILL of the held connections could hit others sharing the server (REDIS_URL)")
	}
	admin := srv.Client()
	s := newStore(t, heldClient(t, srv), redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 2}})
	p := algo.PerHour(1).Burst(10)
	unpause := pause(t, admin)
	as := []<-chan outcome{takeAsync(context.Background(), s, "a0", p)}
	waitState(t, s, 0, 1) // a0 in flight on the first writer
	for i := 1; i <= redisstore.MinLead; i++ {
		as = append(as, takeAsync(context.Background(), s, fmt.Sprint("a", i), p))
		if i < redisstore.MinLead {
			waitState(t, s, i, 1)
		}
	}
	waitState(t, s, 0, 2) // a1..a8 left the queue for the second
	// Both pipelines have reached the server: the second writer no longer
	// collects calls (for up to MaxDelay, which a busy machine stretches)
	// and cannot take the calls queued next.
	conns := held(t, admin, 2)
	late := newLapsed()
	last := fmt.Sprint("a", redisstore.MinLead+1)
	dropped := takeAsync(late, s, last, p)
	waitState(t, s, 1, 2)
	var bs []<-chan outcome
	for i := range 4 {
		bs = append(bs, takeAsync(context.Background(), s, fmt.Sprint("b", i), p))
	}
	waitState(t, s, 5, 2)
	for _, id := range conns {
		if err := admin.ClientKillByFilter(ctxT(t), "ID", id).Err(); err != nil {
			t.Fatalf("CLIENT KILL ID %s: %v", id, err)
		}
	}
	for i, ch := range as {
		var ne net.Error
		if o := <-ch; !errors.Is(o.err, io.EOF) && !errors.As(o.err, &ne) {
			t.Errorf("take a%d on a dropped connection = %+v, %v; want its pipeline's network error", i, o.res, o.err)
		}
	}
	waitState(t, s, 0, 1) // a writer took the rest: the bs are in flight, last was not sent
	unpause()
	for i, ch := range bs {
		if o := <-ch; o.err != nil || o.res.Remaining != 9 {
			t.Errorf("take b%d = %+v, %v; want allowed, 9 remaining", i, o.res, o.err)
		}
	}
	waitState(t, s, 0, 0)
	select {
	case o := <-dropped:
		t.Fatalf("take %s returned %+v, %v before its context was done", last, o.res, o.err)
	default: // the writer dropped it; its caller waits for its context
	}
	mustFull(t, s, p, last)
	late.expire()
	if o := <-dropped; !errors.Is(o.err, context.DeadlineExceeded) {
		t.Errorf("take %s = %+v, %v; want context.DeadlineExceeded", last, o.res, o.err)
	}
}

// held waits until the pause holds the commands of n connections to the
// server of admin (flag b in CLIENT LIST): a call in flight has reached
// the server, not only left the queue. It returns their ids.
func held(t *testing.T, admin *redis.Client, n int) []string {
	t.Helper()
	flagged := regexp.MustCompile(`(?m)^id=(\d+) .* flags=\w*b\w* `)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var ids []string
	if !poll(func() bool {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		ids = ids[:0]
		for _, m := range flagged.FindAllStringSubmatch(list, -1) {
			ids = append(ids, m[1])
		}
		return len(ids) == n
	}) {
		t.Fatalf("the pause holds %d connections, want %d", len(ids), n)
	}
	return ids
}

// TestPipelineNoScript: after SCRIPT FLUSH the commands of a pipeline that
// reply NOSCRIPT are sent again as EVAL, once each: the buckets are charged
// exactly once per take.
func TestPipelineNoScript(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("SCRIPT FLUSH would drop the scripts of others sharing the server (REDIS_URL)")
	}
	rdb := heldClient(t, srv)
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	p := algo.PerHour(1).Burst(10)
	if _, err := s.Take(ctxT(t), "k", p, 1); err != nil { // the script is loaded
		t.Fatal(err)
	}
	ev0 := calls(t, rdb, "eval")
	unpause := pause(t, rdb)
	first := takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	var batch []<-chan outcome
	for range 9 {
		batch = append(batch, takeAsync(context.Background(), s, "k", p))
	}
	waitState(t, s, 9, 1)
	held(t, rdb, 1) // first
	// A write ahead of it holds the flush behind first: the pause resumes
	// connections in the order it held them, so the flush runs right
	// after first, before the batch (sent once first's reply is in)
	// reaches the server.
	ctx := ctxT(t)
	flusher := srv.Client().Pipeline()
	flusher.Set(ctx, s.Key("flusher"), 1, 0)
	flusher.ScriptFlush(ctx)
	flushed := make(chan error, 1)
	go func() { _, err := flusher.Exec(ctx); flushed <- err }()
	held(t, rdb, 2)
	unpause()
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
	// The nine takes left in one pipeline, as one script call (a batch):
	// one EVAL for them all.
	if ev := calls(t, rdb, "eval") - ev0; ev < 1 || ev > 2 {
		t.Fatalf("EVAL ran %d times, want 1 (the batch in one call) or 2 (and first)", ev)
	}
	if res, err := s.Take(ctxT(t), "k", p, 1); err != nil || res.Allowed {
		t.Fatalf("11th take = %+v, %v; want denied", res, err)
	}
}

// TestPipelineClose: Close sends what is queued, stops the writers, and later calls get store.ErrClosed.
func TestPipelineClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := heldClient(t, srv)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p := algo.PerHour(1).Burst(10)
	unpause := pause(t, rdb)
	all := []<-chan outcome{takeAsync(context.Background(), s, "first", p)}
	waitState(t, s, 0, 1)
	for i := range 5 {
		all = append(all, takeAsync(context.Background(), s, fmt.Sprint("q", i), p))
	}
	waitState(t, s, 5, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if !poll(func() bool { return redisstore.PipelineClosed(s) }) {
		t.Fatal("Close did not close the pipeline")
	}
	unpause() // Close waits for the writer, which the pause holds
	if err := <-closed; err != nil {
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
	opts := cl.Options()
	opts.ContextTimeoutEnabled, opts.ReadTimeout = true, -1 // as heldClient
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 1}})
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
	unpause := pause(t, nodes[held])
	first := takeAsync(context.Background(), s, byNode[held][0], p)
	waitState(t, s, 0, 1)
	var batch []<-chan outcome
	for _, k := range keys {
		batch = append(batch, takeAsync(context.Background(), s, k, p))
	}
	waitState(t, s, len(keys), 1)
	unpause()
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
