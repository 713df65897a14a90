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
	"github.com/ratebucket/ratebucket/internal/leaktest"
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
		res, err := s.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1})
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
				wg.Go(func() {
					got[j], errs[j] = s.Take(context.Background(), store.Request{Key: fmt.Sprint("k", k), Policy: pols[k], Cost: costs[j]})
				})
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
	if _, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1}); err != nil { // the script is loaded
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
	if res, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1}); err != nil || res.Allowed {
		t.Fatalf("11th take = %+v, %v; want denied", res, err)
	}
}

// TestPipelineClose: Close sends what is queued, stops the writers, and later calls get store.ErrClosed.
func TestPipelineClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := heldClient(t, srv)
	defer leaktest.VerifyNone(t, goleak.IgnoreCurrent())
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
	if _, err := s.Take(ctxT(t), store.Request{Key: "late", Policy: p, Cost: 1}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Take after Close: %v, want store.ErrClosed", err)
	}
}

// TestPipelineNoScriptCluster: pipelines to the masters of a cluster, one
// of which lost its scripts, send again as EVAL only the commands that node
// answered NOSCRIPT: every bucket is charged once, and the other nodes run
// no EVAL.
func TestPipelineNoScriptCluster(t *testing.T) {
	s, p, m := heldCluster(t, 3)
	ctx := ctxT(t)
	lost := m.addrs[1]
	ev0 := map[string]int{}
	for _, a := range m.addrs {
		ev0[a] = calls(t, m.nodes[a], "eval")
	}
	if err := m.nodes[lost].ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Each master's lane is held by a first call, sent alone, so that the
	// calls after it leave in one pipeline per master. The lost node's is
	// a lease call, whose EVAL loads the lease script only: the pipeline
	// after it holds takes, which meet NOSCRIPT, and a lease call, which
	// does not.
	lease := ""
	for i := 0; lease == ""; i++ {
		k := fmt.Sprint("lease", i)
		if node, err := m.rdb.MasterForKey(ctx, s.LeaseKey(k)); err != nil {
			t.Fatal(err)
		} else if node.Options().Addr == lost {
			lease = k
		}
	}
	lp := algo.LeasePolicy{Limit: 10, TTL: time.Hour}
	acquire := func(id string) <-chan outcome {
		ch := make(chan outcome, 1)
		go func() {
			_, err := s.AcquireLease(context.Background(), lease, lp, id)
			ch <- outcome{err: err}
		}()
		return ch
	}
	var firsts []<-chan outcome
	var unpauses []func()
	for i, a := range m.addrs {
		unpauses = append(unpauses, pause(t, m.nodes[a]))
		if a == lost {
			firsts = append(firsts, acquire("first"))
		} else {
			firsts = append(firsts, takeAsync(context.Background(), s, m.byNode[a][0], p))
		}
		waitState(t, s, 0, i+1)
	}
	var batch []<-chan outcome
	for _, k := range m.keys {
		batch = append(batch, takeAsync(context.Background(), s, k, p))
	}
	second := acquire("second")
	waitState(t, s, len(m.keys)+1, len(m.addrs))
	for _, unpause := range unpauses {
		unpause()
	}
	for _, ch := range append(firsts, second) {
		if o := <-ch; o.err != nil {
			t.Fatal(o.err)
		}
	}
	for i, ch := range batch {
		want := int64(8)
		if slices.Contains(m.firsts(), m.keys[i]) && !slices.Contains(m.byNode[lost], m.keys[i]) {
			want = 7 // also taken by a first
		}
		if o := <-ch; o.err != nil || o.res.Remaining != want {
			t.Errorf("take on %s = %+v, %v; want %d remaining (charged once)", m.keys[i], o.res, o.err, want)
		}
	}
	for _, a := range m.addrs {
		want := 0
		if a == lost {
			want = 1 + len(m.byNode[lost]) // its first, alone, then its takes
		}
		if ev := calls(t, m.nodes[a], "eval") - ev0[a]; ev != want {
			t.Errorf("node %s ran EVAL %d times, want %d", a, ev, want)
		}
	}
}

// TestPipelinePerMaster: on a cluster each master's calls queue and leave
// apart (issue 28): while one master holds its lane's writer, calls to the
// others are answered at once, and its own calls wait. A call queued for a
// master whose slot then moves to another (the client's slot map not yet
// reloaded) is answered MOVED, and go-redis sends it to the new owner:
// it is charged once.
func TestPipelinePerMaster(t *testing.T) {
	s, p, m := heldCluster(t, 2)
	ctx := ctxT(t)
	held, to := m.addrs[0], m.addrs[1]
	// moving: a key of held's whose slot no earlier call touched (it holds
	// no key, so it can move at once).
	var moving string
	for i := 0; moving == ""; i++ {
		k := fmt.Sprint("moving", i)
		node, err := m.rdb.MasterForKey(ctx, s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == held && !slices.ContainsFunc(m.keys, func(o string) bool {
			return redisstore.Slot(s.Key(o)) == redisstore.Slot(s.Key(k))
		}) {
			moving = k
		}
	}
	unpause := pause(t, m.nodes[held])
	first := takeAsync(context.Background(), s, m.byNode[held][0], p)
	waitState(t, s, 0, 1)
	queued := []<-chan outcome{takeAsync(context.Background(), s, m.byNode[held][1], p), takeAsync(context.Background(), s, moving, p)}
	waitState(t, s, 2, 1)
	for _, a := range m.addrs[1:] {
		for _, k := range m.byNode[a] {
			if r, err := s.Take(ctx, store.Request{Key: k, Policy: p, Cost: 1}); err != nil || r.Remaining != 8 {
				t.Errorf("take on %s, on %s, while %s holds its calls: %+v, %v; want 8 remaining at once", k, a, held, r, err)
			}
		}
	}
	if n := redisstore.PipelineLanes(s); n != len(m.addrs) {
		t.Errorf("%d lanes, want one per master: %d", n, len(m.addrs))
	}
	moveSlot(t, m, redisstore.Slot(s.Key(moving)), held, to)
	unpause()
	if o := <-first; o.err != nil || o.res.Remaining != 8 {
		t.Errorf("first take on %s = %+v, %v; want 8 remaining", m.byNode[held][0], o.res, o.err)
	}
	if o := <-queued[0]; o.err != nil || o.res.Remaining != 8 {
		t.Errorf("queued take on %s = %+v, %v; want 8 remaining", m.byNode[held][1], o.res, o.err)
	}
	if o := <-queued[1]; o.err != nil || o.res.Remaining != 9 {
		t.Fatalf("take on %s, whose slot moved while it was queued = %+v, %v; want 9 remaining", moving, o.res, o.err)
	}
	if n, err := m.nodes[to].Exists(ctx, s.Key(moving)).Result(); err != nil || n != 1 {
		t.Errorf("%s holds %s: %d, %v; want the bucket there", to, s.Key(moving), n, err)
	}
	if r, err := s.Take(ctx, store.Request{Key: moving, Policy: p, Cost: 0}); err != nil || r.Remaining != 9 {
		t.Errorf("peek at %s = %+v, %v; want 9 remaining (charged once)", moving, r, err)
	}
}

// TestPipelinePerShard: on a Ring each shard's calls queue and leave
// apart, as a cluster's masters' do: while one shard holds its lane's
// writer, calls to the other are answered at once.
func TestPipelinePerShard(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true, ReadTimeout: -1}) // as heldClient
	t.Cleanup(func() { ring.Close() })
	s := newStore(t, ring, redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	p := algo.PerHour(1).Burst(10)
	byShard := map[string][]string{}
	shards := map[string]*redis.Client{}
	for i := 0; len(byShard[a.Addr]) < 2 || len(byShard[b.Addr]) < 2; i++ {
		k := fmt.Sprint("r", i)
		shard, err := ring.GetShardClientForKey(s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		addr := shard.Options().Addr
		shards[addr] = shard
		byShard[addr] = append(byShard[addr], k)
	}
	unpause := pause(t, shards[a.Addr])
	first := takeAsync(context.Background(), s, byShard[a.Addr][0], p)
	waitState(t, s, 0, 1)
	queued := takeAsync(context.Background(), s, byShard[a.Addr][1], p)
	waitState(t, s, 1, 1)
	for _, k := range byShard[b.Addr] {
		if r, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 1}); err != nil || r.Remaining != 9 {
			t.Errorf("take on %s, on shard b, while shard a holds its calls: %+v, %v; want 9 remaining at once", k, r, err)
		}
	}
	if n := redisstore.PipelineLanes(s); n != 2 {
		t.Errorf("%d lanes, want one per shard: 2", n)
	}
	unpause()
	for _, ch := range []<-chan outcome{first, queued} {
		if o := <-ch; o.err != nil || o.res.Remaining != 9 {
			t.Errorf("take on shard a = %+v, %v; want 9 remaining", o.res, o.err)
		}
	}
}

// TestPipelineLanesPruned: a new lane drops the lanes idle for a minute
// (no call queued, no writer, no batch taken), so the lanes of nodes that
// left keep no memory, and keeps a busy one however old its last batch.
func TestPipelineLanesPruned(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true, ReadTimeout: -1}) // as heldClient
	t.Cleanup(func() { ring.Close() })
	s := newStore(t, ring, redisstore.Config{Timeout: patience})
	p := algo.PerHour(1).Burst(10)
	var onA string
	for i := 0; redisstore.PipelineLanes(s) < 2; i++ {
		k := fmt.Sprint("r", i)
		if _, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if shard, err := ring.GetShardClientForKey(s.Key(k)); err != nil {
			t.Fatal(err)
		} else if shard.Options().Addr == a.Addr {
			onA = k
		}
	}
	shardA, err := ring.GetShardClientForKey(s.Key(onA))
	if err != nil {
		t.Fatal(err)
	}
	other := func() *redis.Client { return redistest.Start(t).Client() } // a node the store has not met
	redisstore.AgeLanes(s, 59*time.Second)
	redisstore.AddLane(s, other())
	if n := redisstore.PipelineLanes(s); n != 3 {
		t.Fatalf("%d lanes after a new one beside two idle for 59 s; want 3", n)
	}
	unpause := pause(t, shardA)
	held := takeAsync(context.Background(), s, onA, p)
	waitState(t, s, 0, 1)
	redisstore.AgeLanes(s, 2*time.Minute)
	redisstore.AddLane(s, other())
	if n := redisstore.PipelineLanes(s); n != 2 {
		t.Errorf("%d lanes after a new one beside three idle for 2 minutes, one of them with a writer; want 2", n)
	}
	unpause()
	if o := <-held; o.err != nil {
		t.Fatal(o.err)
	}
}

// clusterMasters is a cluster client's masters and keys of each.
type clusterMasters struct {
	rdb    *redis.ClusterClient
	addrs  []string                 // in the order first met
	nodes  map[string]*redis.Client // by address
	byNode map[string][]string      // keys (without the store's prefix) by master
	keys   []string                 // all of them
}

// firsts returns each master's first key.
func (m *clusterMasters) firsts() []string {
	var ks []string
	for _, a := range m.addrs {
		ks = append(ks, m.byNode[a][0])
	}
	return ks
}

// heldCluster starts a cluster and a store on a client of it whose only
// deadlines are its calls' contexts (as heldClient), with one writer per
// lane, and takes once from perNode keys of each master under the policy
// it returns (capacity 10), which loads the script on every node.
func heldCluster(t *testing.T, perNode int) (*redisstore.Store, algo.Policy, *clusterMasters) {
	cl := redistest.StartCluster(t)
	opts := cl.Options()
	opts.ContextTimeoutEnabled, opts.ReadTimeout = true, -1 // as heldClient
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	p := algo.PerHour(1).Burst(10)
	ctx := ctxT(t)
	m := &clusterMasters{rdb: rdb, nodes: map[string]*redis.Client{}, byNode: map[string][]string{}}
	for i := 0; len(m.keys) < perNode*redistest.ClusterSize; i++ {
		k := fmt.Sprint("n", i)
		node, err := rdb.MasterForKey(ctx, s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if m.nodes[addr] == nil {
			m.nodes[addr] = node
			m.addrs = append(m.addrs, addr)
		}
		if len(m.byNode[addr]) < perNode {
			m.byNode[addr] = append(m.byNode[addr], k)
			m.keys = append(m.keys, k)
			if _, err := s.Take(ctx, store.Request{Key: k, Policy: p, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s, p, m
}

// moveSlot moves slot, which holds no key, from master from to master to,
// as a resharding does (IMPORTING, MIGRATING, then NODE on both), without
// telling the client: its calls for the slot meet MOVED.
func moveSlot(t *testing.T, m *clusterMasters, slot int, from, to string) {
	t.Helper()
	ctx := ctxT(t)
	fromID, err := m.nodes[from].ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	toID, err := m.nodes[to].ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		node string
		args []any
	}{
		{to, []any{"IMPORTING", fromID}},
		{from, []any{"MIGRATING", toID}},
		{to, []any{"NODE", toID}},
		{from, []any{"NODE", toID}},
	} {
		args := append([]any{"CLUSTER", "SETSLOT", slot}, step.args...)
		if err := m.nodes[step.node].Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, step.node, err)
		}
	}
}
