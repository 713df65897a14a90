package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/store"
)

// Defaults for [PipelineConfig].
const (
	DefaultMaxBatch  = 64
	DefaultMaxDelay  = 20 * time.Microsecond
	DefaultWriters   = 4
	DefaultMaxQueued = 4096
)

// PipelineConfig configures auto-pipelining: concurrent Takes (and
// TakeMultis) from many goroutines are coalesced into pipelines, so that
// Redis answers many checks per round trip. The zero value turns it on with
// the defaults above.
//
// A call is queued; up to Writers writers each send one pipeline at a time
// of up to MaxBatch queued calls. A call that finds no writer running sends
// at once on its own goroutine, so a lone caller's latency is that of one
// round trip, as without batching. Calls that arrive while a pipeline is in
// flight wait in the queue and leave together in the next one: when a
// writer's reply is in, or when 4 of them (or MaxBatch, if smaller) are
// waiting and fewer than Writers writers run, in which case one of them
// starts another writer. A writer holding more than one call but fewer than MaxBatch yields
// for up to MaxDelay to collect more, until a yield brings none; a writer
// holding one call never waits.
//
// Each call gets its own result or error. A call whose context ends while
// it is queued is dropped and charges nothing (its error matches
// ErrNotSent); once its pipeline is sent, a call whose context ends returns
// the context's error, and the late reply is discarded: the script may have
// run, as with any timed-out call, unless go-redis had not begun to write
// it (it was still waiting for a connection) and it was sent alone or
// with its pipeline's deadline passed, when it is withdrawn (go-redis will
// never write it) and its error matches ErrNotSent. The store's Timeout,
// for a call whose context has no deadline, ends it the same way, with
// context.DeadlineExceeded, without a timer per call: the writers drop
// calls whose deadline has passed, and one timer per store wakes a caller
// still waiting at its deadline, and stops go-redis waiting for a
// connection for a call sent alone. A
// failed pipeline fails only the calls in it, and nothing is replayed
// except the commands that replied NOSCRIPT, which are sent again as EVAL.
//
// On Redis Cluster each master has a queue and writers of its own, and a
// pipeline holds the calls of one master only: a call queues for the
// master that holds its first key's slot in the client's slot map
// (ClusterClient.MasterForKey). go-redis sends the parts of a pipeline
// for several nodes at once but returns when the last is done, so with
// one queue a call to a healthy master waited, up to its deadline, with
// the calls to a master that had died: in a failover 14 to 20 calls on
// the healthy masters' keys timed out, and now none does
// (TestClusterFailover). Writers and MaxQueued bound each master's queue,
// so a dead master's calls, which wait out their deadlines, leave the
// others' room. A call whose slot moves while it is queued (a failover, a
// resharding) is sent by go-redis where its slot map then says, which
// follows MOVED and ASK as for any command: it leaves its queue once and
// runs once. On a Ring each shard has a queue likewise
// (Ring.GetShardClientForKey); a failover client, with one master, keeps
// one queue.
//
// Takes of one bucket each (Take on the server clock) that leave in one
// pipeline share one script call: a batch of takes, per policy registry
// (so per slot on a cluster), which the script decides key by key, each as
// a take alone, in order, at one server time (WIRE.md, "Calling it"). The
// script's own cost per call, about a third of a lone take's, is paid once
// per batch: 62.1k instructions of Redis per take alone, 38.4k each in
// fours, 32.9k in eights. A take that would fail the others (KeepCorrupt),
// a quota's and every call on a Ring are sent as their own call.
type PipelineConfig struct {
	// Disabled turns auto-pipelining off: each call is its own round
	// trip.
	Disabled bool
	// MaxBatch bounds the calls in one pipeline. The default is 64.
	MaxBatch int
	// MaxDelay is how long a writer holding several calls, but fewer than
	// MaxBatch, waits for more before sending (it stops sooner when
	// yielding to the goroutines ready to run brings none). The default
	// is 20µs; a negative value means it never waits.
	MaxDelay time.Duration
	// Writers bounds the pipelines in flight at once (each uses one
	// connection), per master on a cluster (per shard on a Ring). The
	// default is 4.
	Writers int
	// MaxQueued bounds the calls waiting for a writer, per master on a
	// cluster (per shard on a Ring). When it is reached a call blocks
	// until there is room or its context ends; then it returns the
	// context's error and charges nothing. The default is 4096.
	MaxQueued int
}

// minLead is how many waiting calls start another writer while one has a
// pipeline in flight (or MaxBatch, if smaller). Starting one for every
// call that finds a writer slot free sent most pipelines nearly empty: at
// 64 goroutines, 4 writers averaged 9.5 calls per pipeline, and 15 with
// this rule, for about 1.2x the throughput (BENCHMARKS.md). With 8 the
// server sat idle at 16 goroutines (two pipelines of about 8.7 in
// flight, redis-server at 0.72 of a core): 4 keeps up to four pipelines
// of about 4.5 in flight there, 77k against 66k checks per second, and
// leaves 64 goroutines' pipelines at 15.5 calls (issue 19, BENCHMARKS.md).
const minLead = 4

// call states.
const (
	queued    int32 = iota
	sent            // a writer took it
	dropped         // it left the queue unsent: nothing charged
	abandoned       // it was sent, and its caller left
	replied         // its reply is in cmd
)

// call is one queued script command. The writer that sends it owns args
// and cmd until it signals done.
//
// A call's deadline is a value, dl, and no timer runs for it. When its
// context has a deadline, dl is that deadline and the caller also waits
// on the context's Done channel, whose timer fires at it. Otherwise the
// store's Timeout gives dl, and the call is timed: nothing but the
// pipeline wakes its caller, so a writer that finds dl passed drops the
// call and signals it, and the pipeliner's one alarm signals a timed call
// still waiting at dl, queued or in flight.
type call struct {
	hkey  string // a hold's record (opHold, opSettle)
	ctx   context.Context
	dl    time.Time // zero: no deadline
	timed bool      // dl is the store's Timeout, not ctx's deadline
	args  []any
	cmd   *redis.StringCmd
	vals  []int64 // the reply, when the call shared cmd (see split)
	state atomic.Int32
	done  chan struct{} // buffered: the writer never blocks on a caller that left
	// dctx is what go-redis is given for a timed call sent alone whose
	// ctx has no Done channel: ctx with dl as its deadline, for the
	// socket, and dead as its Done channel, which the alarm closes at dl,
	// for go-redis's waits (a dial, the pool). For a ctx with a Done
	// channel, cancel ends the context.WithDeadline it is sent under.
	dctx   deadlineCtx
	dead   chan struct{}
	cancel context.CancelFunc
	// What go-redis did with the command (unwritten, writing, withdrawn:
	// see written), and how it was sent (see markUntil).
	wrote atomic.Int32
	until atomic.Int64
	mark  written // the argument that marks the call written (see fillArgs)
	// The alarm's list of timed calls, in order of dl; guarded by the
	// pipeliner's mu.
	prev, next *call
	listed     bool
	// What args point to (see fillArgs).
	keys []string
	nums []int64
	pols []policyArg
	// batch: the call may share one script call with others (see
	// exec): a take of one bucket, args laid out as fillArgs lays it:
	// verb, target, 2, the key, the registry (the mark), the call's
	// letters if any, then the policy and the cost, unless ones.
	batch   bool
	letters any  // the call's letters, or nil for a take on the server clock
	ones    bool // the costs, each 1, are left out of args (nums has them)
}

// calls holds calls free for reuse, each with its done channel and its
// arguments' storage: a call costs no allocation of its own.
var calls = sync.Pool{New: func() any {
	c := &call{done: make(chan struct{}, 1), dead: make(chan struct{})}
	c.mark.one[0] = c
	c.mark.calls = c.mark.one[:]
	return c
}}

// maxFree bounds the arguments of a call kept for reuse, so that one
// large TakeMulti does not leave large calls in the pool.
const maxFree = 64

// newCall returns a call made under ctx.
func newCall(ctx context.Context) *call {
	c := calls.Get().(*call)
	c.ctx = ctx
	return c
}

// free makes c, which nothing else holds any more (its reply is in, or it
// was sent directly), free for reuse. A call that left a pipeline without
// its reply is never freed: a writer, or the alarm, may still hold it.
func (c *call) free() {
	if cap(c.args) > maxFree {
		return
	}
	clear(c.args)
	clear(c.keys)
	c.ctx, c.dl, c.timed, c.cmd, c.vals, c.dctx, c.batch, c.mark.word = nil, time.Time{}, false, nil, nil, deadlineCtx{}, false, nil
	c.letters, c.ones = nil, false
	c.args, c.keys, c.nums, c.pols = c.args[:0], c.keys[:0], c.nums[:0], c.pols[:0]
	c.state.Store(queued)
	c.wrote.Store(unwritten)
	c.until.Store(0)
	calls.Put(c)
}

// sendCtx returns the context the call is sent under when it is sent
// alone: its own, or for a timed call one that ends at dl. go-redis needs
// both ends: the deadline for the socket, and a Done channel that closes
// at dl, without which it waits out a dial's retries (DialerRetries, 100
// ms apart) or a full pool (PoolTimeout) past dl. A timed call whose ctx
// has no Done channel gets dctx, whose channel the alarm closes: no timer
// of its own; one whose ctx has one gets a context.WithDeadline, which
// unsend ends.
func (c *call) sendCtx() context.Context {
	if !c.timed {
		return c.ctx
	}
	if c.ctx.Done() == nil {
		c.dctx = deadlineCtx{Context: c.ctx, dl: c.dl, dead: c.dead}
		return &c.dctx
	}
	ctx, cancel := context.WithDeadline(c.ctx, c.dl)
	c.cancel = cancel
	return ctx
}

// unsend ends what sendCtx started, once go-redis has returned.
func (c *call) unsend() {
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
}

// deadlineCtx is a context with a deadline and no timer, whose parent has
// no Done channel: Deadline reports dl, Done is dead, which the alarm
// closes at dl, and Err is DeadlineExceeded once it is closed. go-redis
// reads the deadline for the socket's and the dial's, and waits on Done.
type deadlineCtx struct {
	context.Context
	dl   time.Time
	dead chan struct{}
}

// Deadline reports dl.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.dl, true }

// Done returns dead.
func (c *deadlineCtx) Done() <-chan struct{} { return c.dead }

// Err reports context.DeadlineExceeded once dead is closed.
func (c *deadlineCtx) Err() error {
	select {
	case <-c.dead:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// leave is how the call c ended without its reply, in state st, with the
// context's error cerr (nil: the store's Timeout): never sent (queued, or
// sent to go-redis and withdrawn before it wrote the command), or sent.
func leave(c *call, st int32, cerr error) error {
	if cerr == nil {
		cerr = context.DeadlineExceeded
	}
	switch {
	case st == dropped:
		return notSent{fmt.Errorf("redisstore: %w before the pipeline was sent (nothing charged)", cerr)}
	case c.unsent(time.Now()):
		return connFailed(cerr, nil)
	}
	return fmt.Errorf("redisstore: %w after the pipeline was sent (the script may have run)", cerr)
}

// pipeliner queues calls and sends them in pipelines. Writers run only while
// calls are queued: none is left when the queue is empty, and Close waits
// for the last.
//
// A call queues in a lane: the one lane, or on a cluster (or a Ring) the
// lane of the master (the shard) that holds its first key (see laneOf).
// Each lane has its queue, its bound and its writers, so a pipeline holds
// the calls of one node only, and a node that does not answer holds up no
// other's.
type pipeliner struct {
	rdb       redis.UniversalClient
	fo        *failover  // nil: not a cluster client
	fn        *functions // nil: EVALSHA
	maxBatch  int
	delay     time.Duration
	maxW      int
	minLead   int // see minLead
	maxQueued int
	senders   sync.Pool // *sender
	obs       batchObserver

	// route returns the node a key goes to, on a client whose nodes have
	// a lane each, listed in lanes (a list that is replaced, never
	// changed, under mu); nil on any other client, whose calls all queue
	// in one. routed is set once route has answered.
	route  func(ctx context.Context, key string) (*redis.Client, error)
	one    lane
	lanes  atomic.Pointer[[]*lane]
	routed atomic.Bool

	mu     sync.Mutex
	closed bool // guarded by mu
	wg     sync.WaitGroup

	// The alarm (see call): the timed calls not yet signalled, earliest
	// dl first, and one timer set for the first's dl, or later. Guarded by
	// mu; awg counts the alarm set or ringing, for close.
	head, tail *call
	alarm      *time.Timer
	armed      bool
	awg        sync.WaitGroup
}

func newPipeliner(rdb redis.UniversalClient, cfg PipelineConfig, fo *failover) (*pipeliner, error) {
	if cfg.MaxBatch < 0 || cfg.Writers < 0 || cfg.MaxQueued < 0 {
		return nil, fmt.Errorf("%w: MaxBatch %d, Writers %d, MaxQueued %d", ErrInvalidConfig, cfg.MaxBatch, cfg.Writers, cfg.MaxQueued)
	}
	p := &pipeliner{rdb: rdb, fo: fo, maxBatch: cfg.MaxBatch, delay: cfg.MaxDelay, maxW: cfg.Writers, maxQueued: cfg.MaxQueued}
	if p.maxBatch == 0 {
		p.maxBatch = DefaultMaxBatch
	}
	if p.delay == 0 {
		p.delay = DefaultMaxDelay
	}
	if p.maxW == 0 {
		p.maxW = DefaultWriters
	}
	if p.maxQueued == 0 {
		p.maxQueued = DefaultMaxQueued
	}
	p.minLead = min(minLead, p.maxBatch)
	p.one.slots = make(chan struct{}, p.maxQueued)
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		p.route = c.MasterForKey
	case *redis.Ring:
		p.route = func(_ context.Context, key string) (*redis.Client, error) { return c.GetShardClientForKey(key) }
	}
	p.senders.New = func() any { return &sender{batch: make([]*call, 0, p.maxBatch)} }
	return p, nil
}

// do queues c and returns once its reply is in c.cmd, or with the
// context's error when its deadline passes or its context ends first.
func (p *pipeliner) do(c *call) error {
	l := &p.one
	if p.route != nil {
		var err error
		if l, err = p.laneOf(c); err != nil {
			return err
		}
	}
	select {
	case l.slots <- struct{}{}:
	default:
		if err := p.waitSlot(l, c); err != nil {
			return err
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-l.slots
		return store.ErrClosed
	}
	l.q = append(l.q, c)
	if c.timed {
		p.list(c)
	}
	lead := l.writers == 0 || (l.writers < p.maxW && len(l.q) >= p.minLead)
	if lead {
		l.writers++
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if lead {
		p.work(l, true)
	}
	return p.wait(c)
}

// waitSlot waits for room in l's full queue until c's deadline passes or
// its context ends; only a timed call needs a timer for that.
func (p *pipeliner) waitSlot(l *lane, c *call) error {
	var expired <-chan time.Time
	if c.timed {
		t := time.NewTimer(time.Until(c.dl))
		defer t.Stop()
		expired = t.C
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-c.ctx.Done():
		return notSent{fmt.Errorf("redisstore: %w while the pipeline queue was full (nothing charged)", c.ctx.Err())}
	case <-expired:
		return notSent{fmt.Errorf("redisstore: %w while the pipeline queue was full (nothing charged)", context.DeadlineExceeded)}
	}
}

// wait waits for c's signal, or for its context to end.
func (p *pipeliner) wait(c *call) error {
	done := c.ctx.Done()
	if done == nil {
		<-c.done
	} else {
		select {
		case <-c.done:
		case <-done:
			if c.state.CompareAndSwap(queued, dropped) || c.state.CompareAndSwap(sent, abandoned) {
				return leave(c, c.state.Load(), c.ctx.Err())
			}
			if st := c.state.Load(); st != replied {
				return leave(c, st, c.ctx.Err()) // a writer dropped it, or the alarm
			}
			<-c.done // the writer is signalling its reply
		}
	}
	if st := c.state.Load(); st != replied {
		return leave(c, st, c.ctx.Err())
	}
	return nil
}

// list adds the timed call c to the alarm's list, and sets the alarm if
// it is not; p.mu is held. Calls come in about the order of their dl, so
// c goes at the end, or a few places before.
func (p *pipeliner) list(c *call) {
	at := p.tail
	for at != nil && at.dl.After(c.dl) {
		at = at.prev
	}
	c.prev, c.listed = at, true
	if at == nil {
		c.next, p.head = p.head, c
	} else {
		c.next, at.next = at.next, c
	}
	if c.next == nil {
		p.tail = c
	} else {
		c.next.prev = c
	}
	if !p.armed {
		p.arm(time.Until(c.dl))
	}
}

// unlist takes c off the alarm's list, if it is on it; p.mu is held.
func (p *pipeliner) unlist(c *call) {
	if !c.listed {
		return
	}
	if c.prev == nil {
		p.head = c.next
	} else {
		c.prev.next = c.next
	}
	if c.next == nil {
		p.tail = c.prev
	} else {
		c.next.prev = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
}

// arm sets the alarm to ring after d; p.mu is held.
func (p *pipeliner) arm(d time.Duration) {
	p.armed = true
	p.awg.Add(1)
	if p.alarm == nil {
		p.alarm = time.AfterFunc(d, p.ring)
	} else {
		p.alarm.Reset(d)
	}
}

// ring is the alarm: it signals every timed call whose dl has passed and
// that no writer has signalled (the caller of one still queued returns
// with nothing charged, as when its context ends), and sets the alarm
// again for the first call left. Writers take calls off the list before
// they signal them, so that in a healthy pipeline the alarm only finds
// the first call's dl still ahead, about once per Timeout.
func (p *pipeliner) ring() {
	defer p.awg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	p.expire(time.Now())
}

// expire signals the listed calls whose dl is not after now, and sets the
// alarm for the first call left if it is not set; p.mu is held.
func (p *pipeliner) expire(now time.Time) {
	for c := p.head; c != nil && !now.Before(c.dl); c = p.head {
		p.unlist(c)
		if c.state.CompareAndSwap(queued, dropped) || c.state.CompareAndSwap(sent, abandoned) {
			close(c.dead) // go-redis, if it holds the call, stops waiting (dctx)
			c.done <- struct{}{}
		}
	}
	if p.head != nil && !p.armed {
		p.arm(time.Until(p.head.dl))
	}
}

// work is a writer of lane l: it sends batches until l's queue is empty.
// Run inline by a caller, it sends one batch and hands any rest to a
// goroutine, so that the caller is not kept sending for others.
func (p *pipeliner) work(l *lane, inline bool) {
	w := p.senders.Get().(*sender)
	defer p.senders.Put(w)
	for {
		batch := p.next(l, w.batch[:0])
		w.batch = batch
		if len(batch) == 0 {
			return
		}
		l.used.Store(p.flush(w, batch).UnixNano())
		clear(batch)
		if inline {
			p.mu.Lock()
			more := len(l.q) > 0
			if !more {
				p.exit(l)
			}
			p.mu.Unlock()
			if more {
				go p.work(l, false)
			}
			return
		}
	}
}

// sender is what a writer reuses from one pipeline to the next: the
// batch, the commands, the go-redis pipeline, which Exec leaves empty, and
// the takes grouped into shared script calls, and their replies' integers.
type sender struct {
	batch  []*call
	cmds   []redis.Cmder
	pipe   redis.Pipeliner
	groups []takes
	ints   []int64
}

// takes is a group of calls that share one script call (see exec): args
// is that call's command, cmd its reply, mark its registry argument, which
// marks every call of the group written.
type takes struct {
	calls []*call
	args  []any
	cmd   *redis.StringCmd
	mark  written
}

// joins reports whether the batchable call c can share a script call
// with the batchable call head: the same verb and script, the same
// registry (so on a cluster the same slot) and the same call letters.
func joins(head, c *call) bool {
	return c.args[0] == head.args[0] && c.args[1] == head.args[1] && sameWord(c.mark.word, head.mark.word) && c.letters == head.letters
}

// exit ends a writer of l; p.mu is held.
func (p *pipeliner) exit(l *lane) {
	l.writers--
	p.wg.Done()
}

// next returns l's next batch, or none (and ends the writer) when its
// queue is empty.
func (p *pipeliner) next(l *lane, batch []*call) []*call {
	p.mu.Lock()
	batch = l.pop(batch, p.maxBatch)
	if len(batch) == 0 {
		p.exit(l)
	}
	p.mu.Unlock()
	if len(batch) > 1 && p.delay > 0 {
		// Each yield lets the goroutines ready to run queue their calls;
		// one that brings none ends the wait early.
		end := time.Now().Add(p.delay)
		for len(batch) < p.maxBatch {
			runtime.Gosched()
			n := len(batch)
			p.mu.Lock()
			batch = l.pop(batch, p.maxBatch)
			p.mu.Unlock()
			if len(batch) == n || !time.Now().Before(end) {
				break
			}
		}
	}
	return batch
}

// pop moves l's queued calls to batch, up to maxBatch; the pipeliner's
// mu is held.
func (l *lane) pop(batch []*call, maxBatch int) []*call {
	n := min(len(l.q), maxBatch-len(batch))
	batch = append(batch, l.q[:n]...)
	rest := copy(l.q, l.q[n:]) // the queue keeps its array from batch to batch
	clear(l.q[rest:])
	l.q = l.q[:rest]
	if rest == 0 && cap(l.q) > 4*maxBatch {
		l.q = nil // let a burst's large array go once drained
	}
	for range n {
		<-l.slots
	}
	return batch
}

// flush sends the calls of batch still wanted in one pipeline, then the
// ones that replied NOSCRIPT as EVAL in another (or, with Functions, the
// ones that found no library, once it is loaded), and signals each caller.
// It returns the time it began.
func (p *pipeliner) flush(w *sender, batch []*call) time.Time {
	live := batch[:0]
	var deadline time.Time
	bounded, timed := true, false
	now := time.Now()
	for _, c := range batch {
		timed = timed || c.timed
		if (!c.dl.IsZero() && !now.Before(c.dl)) || c.ctx.Err() != nil {
			// Its deadline has passed (its timer, if any, not yet
			// fired), or its context has ended: nothing is sent for
			// it, and its caller, still queued, returns the context's
			// error with nothing charged. A timed call learns it here.
			if c.state.CompareAndSwap(queued, dropped) && c.timed {
				c.done <- struct{}{}
			}
			continue
		}
		if !c.state.CompareAndSwap(queued, sent) {
			continue // the caller left: nothing is sent for it
		}
		live = append(live, c)
		if c.dl.IsZero() {
			bounded = false
		} else if c.dl.After(deadline) {
			deadline = c.dl
		}
	}
	if len(live) > 0 {
		p.send(w, live, bounded, deadline)
	}
	if timed {
		p.mu.Lock()
		for _, c := range batch {
			p.unlist(c)
		}
		p.mu.Unlock()
	}
	for _, c := range live {
		if c.state.CompareAndSwap(sent, replied) {
			c.done <- struct{}{}
		}
	}
	return now
}

// send sends the calls of live, each with its deadline, the latest of
// which is deadline when all have one (bounded).
func (p *pipeliner) send(w *sender, live []*call, bounded bool, deadline time.Time) {
	p.obs.batch(len(live))
	var ctx context.Context
	if !bounded {
		deadline = time.Time{}
	}
	for _, c := range live {
		c.markUntil(len(live) == 1, deadline)
	}
	if len(live) == 1 {
		ctx = live[0].sendCtx() // alone, a call is sent under its own deadline
		defer live[0].unsend()
	} else {
		var cancel context.CancelFunc = func() {}
		ctx = context.Background()
		if bounded {
			ctx, cancel = context.WithDeadline(ctx, deadline)
		}
		defer cancel()
	}
	p.exec(ctx, w, live, func(*call) bool { return true })
	if again := p.fn.pick(ctx, live); again != nil { // NOSCRIPT, or no function library
		p.exec(ctx, w, live, again)
	}
}

// exec sends, in one pipeline, a fresh command for each call that pick
// selects. A single command is sent as a plain call, which costs less.
func (p *pipeliner) exec(ctx context.Context, w *sender, calls []*call, pick func(*call) bool) {
	if len(calls) == 1 {
		if c := calls[0]; pick(c) {
			c.wrote.CompareAndSwap(writing, unwritten) // sent again: the first did not run
			c.cmd, c.vals = redis.NewStringCmd(ctx, c.args...), nil
			_ = p.rdb.Process(ctx, noRetry{c.cmd})
			p.fo.check(c.cmd.Err())
		}
		return
	}
	if w.pipe == nil {
		w.pipe = p.rdb.Pipeline()
	}
	cmds, groups := w.cmds[:0], w.groups[:0]
	for _, c := range calls {
		if !pick(c) {
			continue
		}
		c.wrote.CompareAndSwap(writing, unwritten) // sent again: the first did not run
		c.vals = nil
		if c.batch {
			g := 0
			for g < len(groups) && !joins(groups[g].calls[0], c) {
				g++
			}
			if g == len(groups) {
				if g < cap(groups) {
					groups = groups[:g+1]
					groups[g].calls = groups[g].calls[:0]
				} else {
					groups = append(groups, takes{})
				}
			}
			groups[g].calls = append(groups[g].calls, c)
			continue
		}
		c.cmd = redis.NewStringCmd(ctx, c.args...)
		cmds = append(cmds, noRetry{c.cmd})
	}
	for i := range groups {
		g := &groups[i]
		if len(g.calls) == 1 {
			c := g.calls[0]
			c.cmd, g.cmd = redis.NewStringCmd(ctx, c.args...), nil
			cmds = append(cmds, noRetry{c.cmd})
			continue
		}
		g.args = takeBatch(g.args[:0], g)
		g.cmd = redis.NewStringCmd(ctx, g.args...)
		cmds = append(cmds, noRetry{g.cmd})
	}
	_ = w.pipe.BatchProcess(ctx, cmds...) // one append of them all
	_, _ = w.pipe.Exec(ctx)               // each command holds its own error
	for i := range groups {
		if g := &groups[i]; g.cmd != nil {
			w.ints = split(ctx, g.cmd, g.calls, w.ints)
			clear(g.args)
			g.cmd, g.mark.calls, g.mark.word = nil, nil, nil
		}
		clear(groups[i].calls)
	}
	clear(cmds)
	w.cmds, w.groups = cmds[:0], groups[:0]
	p.fo.checkCalls(calls)
}

// takeBatch appends to args one script call for the takes of g's calls,
// each of one bucket (a take with several keys, each alone, in order):
// the verb and script, the keys, the registry (g's mark, which marks each
// call written), the call's letters if any, then each take's policy and
// cost, the costs left out when every one is 1 (as fillArgs does). The
// other arguments are the calls' own.
func takeBatch(args []any, g *takes) []any {
	calls := g.calls
	head := calls[0]
	g.mark.word, g.mark.calls = head.mark.word, calls
	args = append(args, head.args[0], head.args[1], len(calls)+1)
	ones := true
	for _, c := range calls {
		args = append(args, c.args[3])
		ones = ones && c.ones
	}
	args = append(args, &g.mark)
	if head.letters != nil {
		args = append(args, head.letters)
	}
	for _, c := range calls {
		args = append(args, &c.pols[0])
		if !ones {
			args = append(args, &c.nums[0])
		}
	}
	return args
}

// split gives each of calls, which shared the script call cmd, cmd and
// its own reply in vals, as the script would have replied to it alone: the
// time, its admission twice (as the all-admitted flag and its own), its
// remaining, retry-after and reset-after, and its repair if the script
// reported one; or cmd's error. It reads cmd's integers into buf, which
// it returns.
func split(ctx context.Context, cmd *redis.StringCmd, calls []*call, buf []int64) []int64 {
	vals, err := buf[:0], cmd.Err()
	if err == nil {
		vals, err = ints(vals, cmd.Val())
	}
	n := len(calls)
	if err == nil && (len(vals) < 2+4*n || (len(vals)-2-4*n)%2 != 0) {
		err = fmt.Errorf("redisstore: script replied %d integers to %d takes, want %d and pairs", len(vals), n, 2+4*n)
	}
	if err != nil {
		if cmd.Err() == nil {
			cmd = redis.NewStringCmd(ctx)
			cmd.SetErr(err)
		}
		for _, c := range calls {
			c.cmd = cmd
		}
		return vals
	}
	repaired := vals[2+4*n:]
	out := make([]int64, 6*n)
	for i, c := range calls {
		v := out[6*i : 6*i+6 : 6*i+6]
		v[0], v[1] = vals[0], vals[2+4*i]
		copy(v[2:], vals[2+4*i:2+4*i+4])
		for j := 0; j+1 < len(repaired); j += 2 {
			if repaired[j] == int64(i+1) {
				v = append(v, 1, repaired[j+1])
			}
		}
		c.cmd, c.vals = cmd, v
	}
	return vals
}

// close refuses new calls, lets the writers send everything queued and
// waits for them to finish.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	// The writers have signalled every call: no call is listed, and none
	// can be, so the alarm is not set again once stopped.
	p.mu.Lock()
	if p.armed && p.alarm.Stop() {
		p.armed = false
		p.awg.Done()
	}
	p.mu.Unlock()
	p.awg.Wait()
}
