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
// writer's reply is in, or when 8 of them (or MaxBatch, if smaller) are
// waiting and fewer than Writers writers run, in which case one of them
// starts another writer. A writer holding more than one call but fewer than MaxBatch yields
// for up to MaxDelay to collect more; a writer holding one call never waits.
//
// Each call gets its own result or error. A call whose context ends while
// it is queued is dropped and charges nothing; once its pipeline is sent, a
// call whose context ends returns the context's error (the script may have
// run, as with any timed-out call), and the late reply is discarded. A
// failed pipeline fails only the calls in it, and nothing is replayed
// except the commands that replied NOSCRIPT, which are sent again as EVAL.
// On Redis Cluster go-redis splits each pipeline by node.
type PipelineConfig struct {
	// Disabled turns auto-pipelining off: each call is its own round
	// trip.
	Disabled bool
	// MaxBatch bounds the calls in one pipeline. The default is 64.
	MaxBatch int
	// MaxDelay is how long a writer holding several calls, but fewer than
	// MaxBatch, waits for more before sending. The default is 20µs; a
	// negative value means it never waits.
	MaxDelay time.Duration
	// Writers bounds the pipelines in flight at once (each uses one
	// connection). The default is 4.
	Writers int
	// MaxQueued bounds the calls waiting for a writer. When it is reached
	// a call blocks until there is room or its context ends; then it
	// returns the context's error and charges nothing. The default is
	// 4096.
	MaxQueued int
}

// minLead is how many waiting calls start another writer while one has a
// pipeline in flight (or MaxBatch, if smaller). Starting one for every
// call that finds a writer slot free sent most pipelines nearly empty: at
// 64 goroutines, 4 writers averaged 9.5 calls per pipeline, and 15 with
// this rule, for about 1.2x the throughput (BENCHMARKS.md).
const minLead = 8

// call states.
const (
	queued int32 = iota
	sent
	dropped
)

// call is one queued script command. The writer that sends it owns args
// and cmd until it signals done.
type call struct {
	ctx   context.Context
	args  []any
	cmd   *redis.IntSliceCmd
	state atomic.Int32
	done  chan struct{} // buffered: the writer never blocks on a caller that left
}

// pipeliner queues calls and sends them in pipelines. Writers run only while
// calls are queued: none is left when the queue is empty, and Close waits
// for the last.
type pipeliner struct {
	rdb      redis.UniversalClient
	fo       *failover  // nil: not a cluster client
	fn       *functions // nil: EVALSHA
	maxBatch int
	delay    time.Duration
	maxW     int
	minLead  int           // see minLead
	slots    chan struct{} // one per queued call: the queue's bound
	batches  sync.Pool     // *[]*call of capacity maxBatch
	obs      batchObserver

	mu      sync.Mutex
	q       []*call
	writers int  // guarded by mu
	closed  bool // guarded by mu
	wg      sync.WaitGroup
}

func newPipeliner(rdb redis.UniversalClient, cfg PipelineConfig, fo *failover) (*pipeliner, error) {
	if cfg.MaxBatch < 0 || cfg.Writers < 0 || cfg.MaxQueued < 0 {
		return nil, fmt.Errorf("%w: MaxBatch %d, Writers %d, MaxQueued %d", ErrInvalidConfig, cfg.MaxBatch, cfg.Writers, cfg.MaxQueued)
	}
	p := &pipeliner{rdb: rdb, fo: fo, maxBatch: cfg.MaxBatch, delay: cfg.MaxDelay, maxW: cfg.Writers}
	if p.maxBatch == 0 {
		p.maxBatch = DefaultMaxBatch
	}
	if p.delay == 0 {
		p.delay = DefaultMaxDelay
	}
	if p.maxW == 0 {
		p.maxW = DefaultWriters
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	p.minLead = min(minLead, p.maxBatch)
	p.slots = make(chan struct{}, cfg.MaxQueued)
	p.batches.New = func() any { b := make([]*call, 0, p.maxBatch); return &b }
	return p, nil
}

// do queues the command args and returns its reply once it arrives, or
// the context's error when ctx ends first.
func (p *pipeliner) do(ctx context.Context, args []any) (*redis.IntSliceCmd, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("redisstore: %w while the pipeline queue was full (nothing charged)", ctx.Err())
	}
	c := &call{ctx: ctx, args: args, done: make(chan struct{}, 1)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, store.ErrClosed
	}
	p.q = append(p.q, c)
	lead := p.writers == 0 || (p.writers < p.maxW && len(p.q) >= p.minLead)
	if lead {
		p.writers++
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if lead {
		p.work(true)
	}
	select {
	case <-c.done:
		return c.cmd, nil
	case <-ctx.Done():
	}
	if c.state.CompareAndSwap(queued, dropped) {
		return nil, fmt.Errorf("redisstore: %w before the pipeline was sent (nothing charged)", ctx.Err())
	}
	select {
	case <-c.done:
		return c.cmd, nil
	default:
		return nil, fmt.Errorf("redisstore: %w after the pipeline was sent (the script may have run)", ctx.Err())
	}
}

// work is a writer: it sends batches until the queue is empty. Run inline
// by a caller, it sends one batch and hands any rest to a goroutine, so
// that the caller is not kept sending for others.
func (p *pipeliner) work(inline bool) {
	bp := p.batches.Get().(*[]*call)
	defer p.batches.Put(bp)
	batch := *bp
	for {
		batch = p.next(batch[:0])
		*bp = batch
		if len(batch) == 0 {
			return
		}
		p.flush(batch)
		clear(batch)
		if inline {
			p.mu.Lock()
			more := len(p.q) > 0
			if !more {
				p.exit()
			}
			p.mu.Unlock()
			if more {
				go p.work(false)
			}
			return
		}
	}
}

// exit ends a writer; p.mu is held.
func (p *pipeliner) exit() {
	p.writers--
	p.wg.Done()
}

// next returns the next batch, or none (and ends the writer) when the
// queue is empty.
func (p *pipeliner) next(batch []*call) []*call {
	p.mu.Lock()
	batch = p.pop(batch)
	if len(batch) == 0 {
		p.exit()
	}
	p.mu.Unlock()
	if len(batch) > 1 && p.delay > 0 {
		end := time.Now().Add(p.delay)
		for len(batch) < p.maxBatch && time.Now().Before(end) {
			runtime.Gosched()
			p.mu.Lock()
			batch = p.pop(batch)
			p.mu.Unlock()
		}
	}
	return batch
}

// pop moves queued calls to batch, up to maxBatch; p.mu is held.
func (p *pipeliner) pop(batch []*call) []*call {
	n := min(len(p.q), p.maxBatch-len(batch))
	batch = append(batch, p.q[:n]...)
	clear(p.q[:n])
	p.q = p.q[n:]
	if len(p.q) == 0 {
		p.q = p.q[:0:0] // let the backing array go once drained
	}
	for range n {
		<-p.slots
	}
	return batch
}

// flush sends the calls of batch still wanted in one pipeline, then the
// ones that replied NOSCRIPT as EVAL in another (or, with Functions, the
// ones that found no library, once it is loaded), and signals each caller.
func (p *pipeliner) flush(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	bounded := true
	now := time.Now()
	for _, c := range batch {
		dl, ok := c.ctx.Deadline()
		if (ok && !now.Before(dl)) || c.ctx.Err() != nil {
			// Its context has ended, or is about to (the deadline has
			// passed, its timer not yet fired): nothing is sent for it,
			// and its caller, still queued, returns the context's error
			// with nothing charged.
			continue
		}
		if !c.state.CompareAndSwap(queued, sent) {
			continue // the caller left: nothing is sent for it
		}
		live = append(live, c)
		if !ok {
			bounded = false
		} else if dl.After(deadline) {
			deadline = dl
		}
	}
	if len(live) == 0 {
		return
	}
	p.obs.batch(len(live))
	ctx := live[0].ctx // alone, a call is sent under its own context
	if len(live) > 1 {
		var cancel context.CancelFunc = func() {}
		ctx = context.Background()
		if bounded {
			ctx, cancel = context.WithDeadline(ctx, deadline)
		}
		defer cancel()
	}
	p.exec(ctx, live, func(*call) bool { return true })
	if again := p.fn.pick(ctx, live); again != nil { // NOSCRIPT, or no function library
		p.exec(ctx, live, again)
	}
	for _, c := range live {
		c.done <- struct{}{}
	}
}

// exec sends, in one pipeline, a fresh command for each call that pick
// selects. A single command is sent as a plain call, which costs less.
func (p *pipeliner) exec(ctx context.Context, calls []*call, pick func(*call) bool) {
	if len(calls) == 1 {
		if c := calls[0]; pick(c) {
			c.cmd = redis.NewIntSliceCmd(ctx, c.args...)
			_ = p.rdb.Process(ctx, noRetry{c.cmd})
			p.fo.check(c.cmd.Err())
		}
		return
	}
	pipe := p.rdb.Pipeline()
	for _, c := range calls {
		if pick(c) {
			c.cmd = redis.NewIntSliceCmd(ctx, c.args...)
			_ = pipe.Process(ctx, noRetry{c.cmd})
		}
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
	p.fo.checkCalls(calls)
}

// close refuses new calls, lets the writers send everything queued and
// waits for them to finish.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
