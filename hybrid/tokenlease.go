package hybrid

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/keyhash"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// LeasesConfig configures [Leases]. Instances is required; the zero value
// of every other field is its default.
type LeasesConfig struct {
	// Instances is how many instances share the primary's buckets. Each
	// holds at most algo.Policy.BatchCap(Lifetime, Instances) tokens of a
	// key at once, so the fleet holds at most min(capacity, rate·Lifetime):
	// that is the bound's excess over one bucket's, and it holds only while
	// no more than Instances instances lease. Required (at least 1).
	Instances int
	// Lifetime is L, how long a batch may be spent before what is left of
	// it is given back. The default is DefaultLifetime. A longer L saves
	// more calls on a key whose rate·L is below its capacity, at the price
	// of a larger excess (see Instances).
	Lifetime time.Duration
	// MinBatch is the threshold: a key is leased while its measured demand
	// over one Lifetime, and its cap, are at least MinBatch tokens; below
	// it every request is one primary call, as without Leases. The
	// default is DefaultMinBatch.
	MinBatch int64
	// Keys is the most keys whose demand is measured at once; further keys
	// are passed through unleased until idle keys are swept. The default
	// is DefaultLeaseKeys. A key takes about 59 bytes beyond the
	// primary's bucket, the header of its name included
	// (BenchmarkLeasedKeyHeap in bench/, 10,000 keys); a sweep that
	// forgets most keys gives their memory back. A key longer than
	// 32,767 bytes is never leased, nor are policies beyond the first
	// 65,535 that batches are taken under.
	Keys int
	// SweepEvery is how often a goroutine gives back the batches whose
	// Lifetime ended, or whose key's demand fell below MinBatch, and
	// forgets idle keys (see [Leases.Sweep]). The default is Lifetime; a
	// negative value starts no goroutine: batches are then given back by
	// the key's next call, by Sweep, or by Close.
	SweepEvery time.Duration
	// Clock times batches and demand. The default is the system clock.
	Clock store.Clock
	// Observer, when set, receives an observe.LeaseBatch for each batch
	// taken and given back, labelled with Name (default "leases"). It is
	// called with the key's shard locked, so the shard's other keys wait
	// for it: keep it quick (the adapters in contrib add to counters).
	Observer observe.Observer
	Name     string
}

// Leases is a [store.Store] that spends a hot key's tokens locally: for a
// key whose local demand is worth it, it takes a batch of tokens from the
// primary in one call (TakeAtMost), admits from the batch in process, and
// gives back what is left (Refund) when the batch's Lifetime ends or the
// demand falls. These are token leases, not the concurrency leases of
// AcquireLease. See "Token leases" in the package doc for the bound, the
// batch size and what each operation does.
//
// Make one with [NewLeases]: the zero value is not usable. A Leases is safe
// for simultaneous use by multiple goroutines and must not be copied. It
// starts one goroutine unless SweepEvery is negative; Close stops it.
type Leases struct {
	primary store.Store
	cfg     LeasesConfig
	// shards hold each measured key's lease (tokenlease_table.go); n
	// counts them, within cfg.Keys.
	shards [leaseShards]leaseShard
	seed   keyhash.Seed
	n      atomic.Int64
	pols   leasePolicies
	// A tick, the unit of an entry's times, is 1<<qs µs: 1 µs, or for a
	// Lifetime above 15 s the least power of two that makes 2^31 ticks at
	// least 140 Lifetimes (see longAgo). lt is the Lifetime in µs.
	qs     uint
	lt     int64
	closed atomic.Bool
	// nopause turns the pause on a dry key off: every request the batch
	// cannot cover calls the primary, as before issue 29. Set by
	// export_test.go only, for the test that the pause is what saves the
	// calls.
	nopause bool
	stop    chan struct{}
	done    chan struct{}

	calls, local, batches, returned, lost atomic.Int64
	ops                                   // Refund, TakeAtMost, Reserve…: see ops.go
	obs                                   observer
}

var _ store.Store = (*Leases)(nil)

// lease is one key's demand and batch, 48 bytes in its shard's chunk,
// guarded by the shard's lock. A key's takes are serialized, including the
// TakeAtMost that fills its batch: the callers waiting meanwhile would
// otherwise each call the primary. So the entry is busy while a primary
// call is made for it, the shard's lock released, and the others wait
// (leaseShard). A direct Take (the key not leased, or a cost above the
// cap) is made with no lock held, so it never waits for another.
//
// Times are ticks relative to the shard's base (see longAgo): win, t0 and
// paused take 12 bytes where three int64 µs took 24, and the policy a
// 2-byte number (leasePolicies) where algo.Policy took 24.
type lease struct {
	key unsafe.Pointer // the key's bytes; nil in a free entry
	// The batch: left tokens taken under policy number pol at t0, and
	// the ResetAfter of the primary's answer, in µs (to 7 digits).
	// In a free entry, left is the next free entry's number+1.
	left int64
	klen uint16 // the key's length; bit 15 (busyBit): busy
	pol  uint16
	// The demand: cost asked in the window that began at win (up to
	// 2^32−1, where it stays), and the EWMA of the completed windows'
	// (each one Lifetime long), halved per window.
	n   uint32
	win int32
	t0  int32
	// paused is when the pause on the key ends: the last TakeAtMost
	// granted less than it asked (see pauseFor), and until then no
	// primary call is made for the key. noPause: no pause.
	paused int32
	demand float32
	reset  float32
	// spent counts admissions from the batch since the last report.
	spent uint32
}

// NewLeases returns a Leases in front of primary. It returns an error
// wrapping [ErrInvalidConfig] naming the field for a nil primary, an
// Instances below 1, or a negative Lifetime, MinBatch or Keys.
func NewLeases(primary store.Store, cfg LeasesConfig) (*Leases, error) {
	switch {
	case primary == nil:
		return nil, fmt.Errorf("%w: nil primary store", ErrInvalidConfig)
	case cfg.Instances < 1:
		return nil, fmt.Errorf("%w: Instances %d: the instances sharing the primary, at least 1", ErrInvalidConfig, cfg.Instances)
	case cfg.Lifetime < 0:
		return nil, fmt.Errorf("%w: negative Lifetime %v", ErrInvalidConfig, cfg.Lifetime)
	case cfg.MinBatch < 0:
		return nil, fmt.Errorf("%w: negative MinBatch %d", ErrInvalidConfig, cfg.MinBatch)
	case cfg.Keys < 0:
		return nil, fmt.Errorf("%w: negative Keys %d", ErrInvalidConfig, cfg.Keys)
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = DefaultLifetime
	}
	if cfg.MinBatch == 0 {
		cfg.MinBatch = DefaultMinBatch
	}
	if cfg.Keys == 0 {
		cfg.Keys = DefaultLeaseKeys
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = cfg.Lifetime
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	l := &Leases{primary: primary, cfg: cfg, obs: newObserver(cfg.Observer, cfg.Name, defaultLeasesName),
		seed: keyhash.New(), lt: cfg.Lifetime.Microseconds()}
	for 1<<(31+l.qs) < 140*l.lt {
		l.qs++
	}
	for i := range l.shards {
		l.shards[i].init()
	}
	l.ops.run = l.opFrom
	if cfg.SweepEvery > 0 {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.sweeper()
	}
	return l, nil
}

// Take admits from the key's batch when it holds cost tokens; otherwise,
// for a leased key, it tops the batch up with one TakeAtMost and admits
// from it, or denies when the primary has not enough, and then denies
// without a call for a pause (see pauseFor); for any other key it is the
// primary's Take. See the package doc.
//
// An admission from the batch answers with the batch's tokens left as
// Remaining and the ResetAfter of the primary's answer that granted it,
// kept as a float32 of µs: exact up to 16.7 s, to about 7 significant
// digits beyond.
//
// An admission from the batch makes no call and allocates nothing: 583
// instructions per Take against memstore's own 512 (BenchmarkLeases under
// callgrind, 2026-12-06; 594 with the sync.Map of *lease this replaced);
// one hash, the shard's mutex taken once.
func (l *Leases) Take(ctx context.Context, r store.Request) (algo.Result, error) {
	if err := ctx.Err(); err != nil {
		return algo.Result{}, err
	}
	res, _, err := l.take(ctx, r)
	return res, err
}

// take is Take after the context check (see sourced): only the answers of
// the primary's Take are the primary's.
func (l *Leases) take(ctx context.Context, r store.Request) (algo.Result, bool, error) {
	if l.closed.Load() {
		return algo.Result{}, false, store.ErrClosed
	}
	if r.Cost <= 0 || r.Policy.Unit() == 0 {
		return l.direct(ctx, r) // a peek, a quota, or bad input
	}
	// A direct call is made after the shard's lock is released: a key
	// that is not leased then reaches the primary from every caller at
	// once, which redisstore's pipeline groups into one round trip.
	h := l.hash(r.Key)
	sh := l.shardOf(h)
	sh.mu.Lock()
	e := sh.hold(l, h, r.Key, true)
	if e == nil {
		sh.mu.Unlock()
		return l.direct(ctx, r)
	}
	now := sh.ticks(l)
	want, ok := l.leased(ctx, sh, e, r, now)
	if !ok {
		sh.release(e)
		return l.direct(ctx, r)
	}
	if r.Cost <= e.left {
		// e is not busy: leased gave nothing back, or e.left would be 0.
		res := l.spend(e, r.Cost)
		sh.mu.Unlock()
		return res, false, nil
	}
	res, ok, err := l.topUp(ctx, sh, e, r, now, want)
	sh.release(e)
	if !ok {
		return l.direct(ctx, r)
	}
	return res, false, err
}

// topUp is take for a leased key whose batch cannot cover r: it denies
// during a pause, else tops the batch up with one TakeAtMost for want
// tokens (r's cost at least) and admits from it, or denies. It reports
// false when r is to be the primary's Take instead. Called with sh.mu
// held, e held.
func (l *Leases) topUp(ctx context.Context, sh *leaseShard, e *lease, r store.Request, now, want int64) (algo.Result, bool, error) {
	if wait := l.pausing(sh, e, now); wait > 0 {
		// The bucket was dry less than a pause ago: denied here, no
		// call, nothing charged.
		return algo.Result{RetryAfter: max(wait, tokensIn(r.Policy, r.Cost-e.left)),
			ResetAfter: tokensIn(r.Policy, r.Policy.Capacity())}, true, nil
	}
	pol := e.pol
	if l.pols.of(pol) != r.Policy {
		pol = l.pols.id(r.Policy)
	}
	if pol == 0 {
		return algo.Result{}, false, nil // no number left for the policy
	}
	ask := max(want, r.Cost) - e.left // the batch stays within the cap
	l.calls.Add(1)
	var (
		g   int64
		res algo.Result
		err error
	)
	sh.unlocked(e, func() {
		g, res, err = l.primary.TakeAtMost(ctx, store.Request{Key: r.Key, Policy: r.Policy, Cost: ask, Refundable: r.Refundable})
	})
	if err != nil {
		return algo.Result{}, true, err
	}
	if g > 0 {
		l.batches.Add(1)
		e.pol, e.left, e.t0, e.reset = pol, e.left+g, sh.rel(now, sh.base), float32(res.ResetAfter.Microseconds())
		l.obs.leaseBatch(e, observe.LeaseBatch{Taken: g})
	}
	var w time.Duration
	if g < ask && !l.nopause {
		// The bucket is dry. If e.left > 0, e.pol is r.Policy's already
		// (leased gave back a batch of another policy).
		w = l.pauseFor(r.Policy, g)
		e.pol, e.paused = pol, sh.rel(now+(w.Microseconds()+1<<l.qs-1)>>l.qs, sh.base)
	}
	if r.Cost <= e.left {
		return l.spend(e, r.Cost), true, nil
	}
	// Denied. res is the primary's answer for one token (granted 0), or
	// for the g tokens it had: what the batch lacks takes longer, and
	// the pause longer still.
	res.Allowed, res.Remaining = false, 0
	if lack := r.Cost - e.left; g > 0 || lack > 1 {
		res.RetryAfter = max(res.RetryAfter, tokensIn(r.Policy, lack))
	}
	res.RetryAfter = max(res.RetryAfter, w)
	return res, true, nil
}

// pauseFor returns w, how long an instance whose TakeAtMost under p came
// back short, granting g tokens, makes no further call for the key: the
// time the bucket takes to refill g for each of the N Instances, within
// [L/32, L/2]: min(L/2, max(L/32, tokensIn(g)·N)).
//
// Why this w. Without a pause every request the batch cannot cover calls
// the primary, and on a saturated key each such call grants the few
// tokens refilled since the last: 0.25 calls per admitted on
// leasebench's global load (7.6 in TestLeasesSaturatedCalls/unpaced, 200 ms).
// A pause only removes calls: no token is taken or
// admitted by it, so the bound (BatchBound) holds as before.
//
// The pause follows what was granted, not what was asked. A pause fixed by
// the ask caps an instance's intake at ask/w whatever it got: at r/N
// (w = tokensIn(ask)·N) the fleet took at most the rate, and every short
// grant left tokens to spill at the bucket's capacity (bench/HISTORY.md,
// "A pause tried at 22:52": 33k/s of 60k); at 2r/N the fleet phase-locks,
// an instance whose pause ends just after another's call always finding
// the bucket dry (one of 3 got 2% of the admissions in
// TestLeasesSaturatedCalls; with the pause drawn in [w/2, w], shares of
// one L ranged 0.16 to 0.68 in TestLeasesFair). Paced by its grant, an
// instance that took much waits while the others take their share of the
// refill, and one that found the bucket dry is back after L/32 for what
// refilled since: no instance is locked out, tokens wait in the bucket at
// most L/32 past a pause, and the shares of each L stay within 1/N ±10%
// (TestLeasesFair). The floor bounds the calls; the cap of L/2 keeps a
// pause within a batch's lifetime.
//
// Calls on a saturated key: a short grant is followed by a pause of at
// least L/32, so the fleet makes at most 32N/L of them a second; a full
// grant brings ask tokens. Calls per admitted are at most 32N/(r·L) +
// 1/ask: 0.019 for N 3, r 50,000/s, L 100ms (ask 1,666). In practice a
// grant is a fair share of the refill over the pause, about r·w/N, so
// about N/(r·w): TestLeasesSaturatedCalls measures 0.004 there.
func (l *Leases) pauseFor(p algo.Policy, g int64) time.Duration {
	return min(l.cfg.Lifetime/2, max(l.cfg.Lifetime/32, tokensIn(p, g)*time.Duration(l.cfg.Instances)))
}

// pausing returns how long e's pause lasts from now (ticks), or 0. A pause
// longer than L/2 (the clock went back) ends at once.
func (l *Leases) pausing(sh *leaseShard, e *lease, now int64) time.Duration {
	if e.paused == noPause {
		return 0
	}
	d := time.Duration((sh.abs(e.paused)-now)<<l.qs) * time.Microsecond
	if d <= 0 || d > l.cfg.Lifetime/2 {
		e.paused = noPause
		return 0
	}
	return d
}

// leased counts r's demand on e, of shard sh, at now (ticks) and reports
// whether r is to be taken from e's batch (topped up if need be) rather
// than by the primary's Take, with the batch's size: the demand, within
// the cap. It gives the batch back on a policy change, at the end of its
// Lifetime and when the demand falls. Called with sh.mu held, e held; it
// makes no call but those refunds.
func (l *Leases) leased(ctx context.Context, sh *leaseShard, e *lease, r store.Request, now int64) (int64, bool) {
	want := l.measure(sh, e, now, r.Cost)
	changed := l.pols.of(e.pol) != r.Policy
	if changed && e.paused != noPause {
		e.paused = noPause // the pause was on the old policy's bucket
	}
	if e.left > 0 && (changed || l.expired(sh, e, now)) {
		l.void(ctx, sh, e) // a policy change, or the Lifetime ended
	}
	if r.Cost <= e.left {
		return want, true
	}
	cap := r.Policy.BatchCap(l.cfg.Lifetime, l.cfg.Instances)
	want = min(want, cap)
	if want < l.cfg.MinBatch {
		l.void(ctx, sh, e) // demand fell, if anything is left
		return want, false
	}
	return want, r.Cost <= cap // else no batch can hold it; the batch stays
}

// tokensIn returns how long the bucket of p takes to refill n tokens.
func tokensIn(p algo.Policy, n int64) time.Duration {
	return time.Duration((n*p.Unit()+p.Refill()-1)/p.Refill()) * time.Microsecond
}

// spend admits cost from e's batch: the answer describes the batch.
func (l *Leases) spend(e *lease, cost int64) algo.Result {
	e.left -= cost
	if e.spent++; e.spent == math.MaxUint32 {
		l.reportSpent(e)
	}
	l.local.Add(1)
	return algo.Result{Allowed: true, Remaining: e.left,
		ResetAfter: time.Duration(e.reset) * time.Microsecond}
}

// reportSpent reports the admissions from e's batch before their count
// wraps. (Not inlined: spend is, without it.)
//
//go:noinline
func (l *Leases) reportSpent(e *lease) { l.obs.leaseBatch(e, observe.LeaseBatch{}) }

// direct is the primary's Take.
func (l *Leases) direct(ctx context.Context, r store.Request) (algo.Result, bool, error) {
	l.calls.Add(1)
	if s, ok := l.primary.(sourced); ok {
		return s.take(ctx, r)
	}
	res, err := l.primary.Take(ctx, r)
	return res, true, err
}

// expired reports whether e's batch may no longer be spent at now
// (ticks): its Lifetime ended, or the clock went back past its start.
func (l *Leases) expired(sh *leaseShard, e *lease, now int64) bool {
	d := (now - sh.abs(e.t0)) << l.qs
	return d < 0 || d >= l.lt
}

// void gives e's batch back to the primary under the policy it was taken
// under, exactly once: a refund that fails loses the tokens (they are never
// admitted here again; the bucket refills them). Called with sh.mu held
// and e held, which it leaves busy if it made the call.
func (l *Leases) void(ctx context.Context, sh *leaseShard, e *lease) {
	n := e.left
	if n == 0 {
		l.obs.spentOut(e)
		return
	}
	e.left = 0
	l.calls.Add(1)
	r := store.Request{Key: e.keyString(), Policy: l.pols.of(e.pol), Cost: n}
	var err error
	sh.unlocked(e, func() { _, err = l.primary.Refund(context.WithoutCancel(ctx), r) })
	if err != nil {
		l.lost.Add(n)
		l.obs.leaseBatch(e, observe.LeaseBatch{Lost: n})
		return
	}
	l.returned.Add(n)
	l.obs.leaseBatch(e, observe.LeaseBatch{Returned: n})
}

// measure counts cost asked on e, of shard sh, at now (ticks), and returns
// the demand: tokens per Lifetime, the larger of the EWMA and the current
// window's count, rounded up. Windows are Lifetime long; each completed
// window is averaged in with weight ½, and each window without demand
// halves the EWMA.
func (l *Leases) measure(sh *leaseShard, e *lease, now, cost int64) int64 {
	if d := time.Duration((now-sh.abs(e.win))<<l.qs) * time.Microsecond; d >= l.cfg.Lifetime || d < 0 {
		k := int64(1)
		if d > 0 {
			k = int64(d / l.cfg.Lifetime)
		}
		e.demand = (e.demand + float32(e.n)) / 2
		for i := int64(1); i < k && e.demand > 0; i++ {
			e.demand /= 2
		}
		if e.demand < 1e-3 {
			e.demand = 0 // idle: the key may be forgotten
		}
		e.win, e.n = sh.rel(now, sh.base), 0
	}
	e.n = uint32(min(int64(e.n)+cost, math.MaxUint32))
	return max(int64(e.demand+0.999), int64(e.n))
}

// TakeMulti passes the call to the primary unleased: a multi-limit take is
// atomic across its buckets, which a batch of one key cannot be part of.
// A key's batch is left as it is (its tokens are this instance's).
func (l *Leases) TakeMulti(ctx context.Context, rs []store.Request) (store.MultiResult, error) {
	if err := ctx.Err(); err != nil {
		return store.MultiResult{}, err
	}
	mr, _, err := l.takeMulti(ctx, rs)
	return mr, err
}

// takeMulti is TakeMulti after the context check (see sourced).
func (l *Leases) takeMulti(ctx context.Context, rs []store.Request) (store.MultiResult, bool, error) {
	if l.closed.Load() {
		return store.MultiResult{}, false, store.ErrClosed
	}
	l.calls.Add(1)
	if s, ok := l.primary.(sourced); ok {
		return s.takeMulti(ctx, rs)
	}
	mr, err := l.primary.TakeMulti(ctx, rs)
	return mr, true, err
}

// opFrom passes o to the primary. A reservation or a hold on a key first
// gives its batch back, so it waits only for tokens nobody holds.
func (l *Leases) opFrom(ctx context.Context, o op) (opResult, bool, error) {
	if l.closed.Load() {
		return opResult{}, false, store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return opResult{}, false, err
	}
	if o.kind == opReserve || o.kind == opHold {
		h := l.hash(o.key)
		sh := l.shardOf(h)
		sh.mu.Lock()
		if e := sh.hold(l, h, o.key, false); e != nil {
			l.void(ctx, sh, e)
			e.idle(sh)
		}
		sh.mu.Unlock()
	}
	l.calls.Add(1)
	return opOn(ctx, l.primary, o)
}

// AcquireLease passes the concurrency lease call to the primary.
func (l *Leases) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	if l.closed.Load() {
		return algo.LeaseResult{}, store.ErrClosed
	}
	return l.primary.AcquireLease(ctx, key, p, id)
}

// ReleaseLease passes the call to the primary: see AcquireLease.
func (l *Leases) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	if l.closed.Load() {
		return false, store.ErrClosed
	}
	return l.primary.ReleaseLease(ctx, key, id)
}

// RenewLease passes the call to the primary: see AcquireLease.
func (l *Leases) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	if l.closed.Load() {
		return false, store.ErrClosed
	}
	return l.primary.RenewLease(ctx, key, p, id)
}

// Sweep gives back the batches whose Lifetime ended or whose key's demand
// fell below MinBatch, and forgets the keys without a batch or demand. It
// returns the tokens given back. The SweepEvery goroutine calls it; call it
// yourself when SweepEvery is negative.
func (l *Leases) Sweep(ctx context.Context) int64 {
	return l.sweep(ctx, false)
}

// sweep is Sweep, or with all set Close's: every batch back.
func (l *Leases) sweep(ctx context.Context, all bool) int64 {
	before := l.returned.Load()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		// Entries never move; one freed or added while the lock is
		// released for a refund is seen or not.
		for j := uint32(0); j < sh.next; j++ {
			e := sh.at(j)
			if e.key == nil || !sh.wait(e) {
				continue
			}
			now := sh.ticks(l)
			want := min(l.measure(sh, e, now, 0), l.pols.of(e.pol).BatchCap(l.cfg.Lifetime, l.cfg.Instances))
			if all || l.expired(sh, e, now) || want < l.cfg.MinBatch {
				l.void(ctx, sh, e)
				e.idle(sh)
			}
			if e.left == 0 && e.n == 0 && e.demand == 0 {
				_, k := sh.find(l.hash(e.keyString()), e.keyString())
				sh.remove(l, k)
				l.n.Add(-1)
			}
		}
		sh.compact(l)
		sh.mu.Unlock()
	}
	return l.returned.Load() - before
}

// sweeper calls Sweep every SweepEvery until Close.
func (l *Leases) sweeper() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.Sweep(context.Background())
		}
	}
}

// Stats returns counts of what the Leases did: Calls, Entries and the
// token-lease fields of [Stats].
func (l *Leases) Stats() Stats {
	st := Stats{Calls: l.calls.Load(), Local: l.local.Load(), Batches: l.batches.Load(),
		Returned: l.returned.Load(), Lost: l.lost.Load()}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for j := uint32(0); j < sh.next; j++ {
			if e := sh.at(j); e.key != nil && sh.wait(e) {
				st.Entries++
				st.Held += e.left
			}
		}
		sh.mu.Unlock()
	}
	return st
}

// Close stops the sweeping goroutine and gives every batch back (what
// fails to go back is lost, see Stats); later calls return
// [store.ErrClosed]. It does not close the primary, which belongs to the
// caller. Close is idempotent.
func (l *Leases) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	l.sweep(context.Background(), true)
	return nil
}

// Primary returns the store the Leases is in front of.
func (l *Leases) Primary() store.Store { return l.primary }
