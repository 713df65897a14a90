package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// DenyCacheConfig configures a [DenyCache]. The zero value is ready to use.
type DenyCacheConfig struct {
	// Clock is the local clock that measures how long ago the primary
	// answered. The default is the system clock, whose monotonic reading
	// makes elapsed times immune to wall-clock steps.
	Clock store.Clock
	// Size is the most keys remembered at once; beyond it the least
	// recently useful entry is evicted, which only costs a primary call.
	// The default is DefaultCacheSize. An entry takes about 150 bytes plus
	// the key.
	Size int
	// Shards is the number of independently locked parts of the cache,
	// rounded up to a power of two. The default is DefaultCacheShards.
	Shards int
	// ClockMargin is added to every elapsed time before the cache decides
	// to deny: it is the most the primary's clock may gain on Clock while
	// an entry lives. With redisstore's server clock it covers the
	// server's clock being stepped forward; with client clocks it must be
	// at least the largest skew between the instances sharing the store
	// (an instance whose clock is ahead refills buckets early). A larger
	// margin is safer and saves fewer calls (a request within the margin
	// of its retry instant goes to the primary); it never changes the
	// RetryAfter reported. A further 500 ppm of the elapsed time is added
	// for clock drift. The default is DefaultClockMargin; a negative value
	// means no margin and no drift allowance, right only when the primary
	// reads Clock itself (memstore, or redisstore with the same client
	// clock).
	ClockMargin time.Duration
	// Observer, when set, receives an observe.DenyCacheHit for each request
	// denied without a call to the primary, labelled with Name (default
	// "denycache") and the call's observe.Labels. Observe the
	// decisions themselves with observe.Wrap around the outermost store.
	Observer observe.Observer
	Name     string
	// Refunded, when set, reports the keys whose buckets may be given
	// tokens back by other instances (refunds, cancelled reservations)
	// through calls that are not marked Request.Refundable: the cache
	// keeps no entry for them, so it never denies them locally and they
	// cost a primary call each. httplimit's ChargeIf and Delay routes
	// mark their calls and need no entry here; name the keys that your
	// own code refunds, if it does not mark its takes. Without either, a
	// refund made elsewhere than through this cache may leave the cache
	// denying a request that the primary would now admit, for at most the
	// time the request's cost takes to refill, plus queued reservations',
	// after the primary's last answer for the key (see the package doc).
	// Default: none.
	Refunded func(key string) bool
}

// DenyCache is a [store.Store] that answers requests it can prove the
// primary store would deny without asking the primary; every other request
// goes to the primary, and its answer refreshes what the cache knows. See
// the package documentation for the bound it uses.
//
// DenyCache assumes the primary runs the token bucket (algo.TokenBucket,
// the default of every store here): a window algorithm refills all at once
// at the window's end, which the bound does not model.
//
// A DenyCache is safe for simultaneous use by multiple goroutines. It starts
// no goroutines.
type DenyCache struct {
	primary store.Store
	src     sourced // primary, when it is one of this package's wrappers
	clock   store.Clock
	margin  int64 // µs; negative: exact, no drift allowance
	cache   *boundCache
	closed  atomic.Bool
	calls   atomic.Int64
	denied  atomic.Int64
	seq     atomic.Uint64 // numbers primary calls in order of their start
	forgot  atomic.Uint64 // seq at the last Forget: older calls' answers are not learnt
	// latest is the latest reading of a Clock the caller supplied, Unix
	// µs; such clocks may step back. The system clock's monotonic
	// reading cannot, and is not tracked (no shared write per call).
	latest atomic.Int64
	track  bool
	obs    observer

	refunded func(key string) bool // DenyCacheConfig.Refunded
	ops                            // Refund, TakeAtMost, Reserve…: see ops.go
}

var (
	_ store.Store = (*DenyCache)(nil)
)

// NewDenyCache returns a DenyCache in front of primary. It returns an error
// wrapping [ErrInvalidConfig] for a nil primary or a negative Size or
// Shards.
func NewDenyCache(primary store.Store, cfg DenyCacheConfig) (*DenyCache, error) {
	switch {
	case primary == nil:
		return nil, fmt.Errorf("%w: nil primary store", ErrInvalidConfig)
	case cfg.Size < 0 || cfg.Shards < 0:
		return nil, fmt.Errorf("%w: negative Size %d or Shards %d", ErrInvalidConfig, cfg.Size, cfg.Shards)
	}
	track := cfg.Clock != nil
	if !track {
		cfg.Clock = systemClock{}
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultCacheSize
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultCacheShards
	}
	margin := int64(-1) // exact: see bound.elapsed
	switch {
	case cfg.ClockMargin == 0:
		margin = DefaultClockMargin.Microseconds()
	case cfg.ClockMargin > 0:
		margin = (cfg.ClockMargin + time.Microsecond - 1).Microseconds() // rounded up
	}
	src, _ := primary.(sourced)
	c := &DenyCache{
		primary: primary,
		src:     src,
		clock:   cfg.Clock,
		margin:  margin,
		track:   track,
		cache:   newBoundCache(cfg.Size, min(cfg.Shards, cfg.Size)),
		obs:     newObserver(cfg.Observer, cfg.Name, defaultDenyCacheName),

		refunded: cfg.Refunded,
	}
	c.ops.run = c.opFrom
	return c, nil
}

// Take answers locally when the bound proves the primary would deny:
// Allowed false, RetryAfter the instant the primary itself would give
// absent other traffic (exact when the policy's Refill is 1, otherwise at
// most 1µs later), Remaining and ResetAfter likewise. Otherwise it returns
// the primary's answer and error. Bad input always reaches the primary, so
// its errors come back unchanged. After Close it returns [store.ErrClosed].
func (c *DenyCache) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if err := ctx.Err(); err != nil {
		return algo.Result{}, err
	}
	res, _, err := c.take(ctx, req)
	return res, err
}

// take is Take after the context check (see sourced). It checks no input:
// the primary does, and deny answers only what eligible admits.
func (c *DenyCache) take(ctx context.Context, r store.Request) (algo.Result, bool, error) {
	if c.closed.Load() {
		return algo.Result{}, false, store.ErrClosed
	}
	if res, ok := c.deny(r); ok {
		c.hit(ctx, -1)
		return res, false, nil
	}
	seq, t0 := c.seq.Add(1), c.now()
	c.calls.Add(1)
	var res algo.Result
	var err error
	primary := true
	if c.src != nil {
		res, primary, err = c.src.take(ctx, r)
	} else {
		res, err = c.primary.Take(ctx, r)
	}
	if r.Refundable {
		c.unlearn(r.Key) // it may have charged: what the cache knew is stale
	} else if err == nil && primary {
		c.learn(r.Key, r.Policy, r.Cost, seq, t0, res, res.Allowed, !res.Allowed || res.Remaining < max(r.Cost, 1))
	}
	return res, primary, err
}

// lookup returns the bound kept for a request that may be answered from
// the cache, with the elapsed times at now. The caller has checked that the
// cache is open.
func (c *DenyCache) lookup(key string, p algo.Policy, cost int64) (b bound, e, eff int64, ok bool) {
	if !eligible(key, p, cost) {
		return bound{}, 0, 0, false
	}
	if b, ok = c.cache.get(key); !ok || b.Policy() != p {
		return bound{}, 0, 0, false
	}
	e, eff = c.elapsed(&b, c.now())
	return b, e, eff, true
}

// deny returns the local denial of a request, when the bound proves one
// and pins its answer (see bound.decide). A request marked Refundable is
// never answered locally.
func (c *DenyCache) deny(r store.Request) (algo.Result, bool) {
	if r.Refundable {
		return algo.Result{}, false
	}
	b, e, eff, ok := c.lookup(r.Key, r.Policy, r.Cost)
	if !ok {
		return algo.Result{}, false
	}
	res, ok := b.Decide(r.Cost, e, eff)
	if ok {
		c.denied.Add(1)
	}
	return res, ok
}

// denyDown is deny for a Fallback whose primary is failing: a request the
// bound proves denied stays denied when Redis is down, with the exact answer
// when there is one and the bound's own otherwise. A call marked
// refundable is never answered locally.
func (c *DenyCache) denyDown(r store.Request) (algo.Result, bool) {
	if r.Refundable || c.closed.Load() {
		return algo.Result{}, false
	}
	b, e, eff, ok := c.lookup(r.Key, r.Policy, r.Cost)
	if !ok || !b.Denies(r.Cost, eff) {
		return algo.Result{}, false
	}
	c.denied.Add(1)
	if res, ok := b.Decide(r.Cost, e, eff); ok {
		return res, true
	}
	return b.Bounded(r.Cost, eff), true
}

// charge records a request of cost admitted by a Fallback's local store
// while the primary is failing, so that the bound keeps counting what this
// instance admitted: an abuser then gets no more than Redis's own refill
// would give it. The charged bound is dropped when the primary is back
// (forgetLocal), since the primary never saw these admissions. A call
// marked refundable is not counted: its key keeps no entry.
func (c *DenyCache) charge(r store.Request) {
	if !eligible(r.Key, r.Policy, r.Cost) || r.Refundable {
		return
	}
	c.cache.update(r.Key, func(b *bound) {
		if b.Policy() == r.Policy {
			b.charge(r.Cost)
		}
	})
}

// forgetLocal drops the bounds charged by charge.
func (c *DenyCache) forgetLocal() { c.cache.dropLocal() }

// TakeMulti denies locally when every request has an entry and at least one
// is certainly denied; Results then hold, for each bucket, what the primary
// would answer for it alone absent other traffic. Otherwise the primary
// decides.
func (c *DenyCache) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	if err := ctx.Err(); err != nil {
		return store.MultiResult{}, err
	}
	mr, _, err := c.takeMulti(ctx, reqs)
	return mr, err
}

// takeMulti is TakeMulti after the context check (see sourced).
func (c *DenyCache) takeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, bool, error) {
	if c.closed.Load() {
		return store.MultiResult{}, false, store.ErrClosed
	}
	if mr, ok := c.denyMulti(reqs); ok {
		c.hit(ctx, mr.Denied)
		return mr, false, nil
	}
	seq, t0 := c.seq.Add(1), c.now()
	c.calls.Add(1)
	var mr store.MultiResult
	var err error
	primary := true
	if c.src != nil {
		mr, primary, err = c.src.takeMulti(ctx, reqs)
	} else {
		mr, err = c.primary.TakeMulti(ctx, reqs)
	}
	if refundable(reqs) {
		for _, r := range reqs {
			c.unlearn(r.Key)
		}
	} else if err == nil && primary && len(mr.Results) == len(reqs) {
		// Remember every bucket of a request that one bucket would deny
		// if made again now: a local denial needs them all.
		insert := false
		for i, r := range reqs {
			insert = insert || !mr.Results[i].Allowed || mr.Results[i].Remaining < max(r.Cost, 1)
		}
		for i, r := range reqs {
			c.learn(r.Key, r.Policy, r.Cost, seq, t0, mr.Results[i], mr.Allowed, insert)
		}
	}
	return mr, primary, err
}

// denyMulti returns the local answer to reqs, if the cache can prove a
// denial. A call marked refundable is never answered locally. The caller
// has checked that the cache is open.
func (c *DenyCache) denyMulti(reqs []store.Request) (store.MultiResult, bool) {
	if len(reqs) == 0 || refundable(reqs) {
		return store.MultiResult{}, false
	}
	now := c.now()
	mr := store.MultiResult{Results: make([]algo.Result, len(reqs)), Denied: -1}
	for i, r := range reqs {
		b, ok := c.cache.get(r.Key)
		if !eligible(r.Key, r.Policy, r.Cost) || !ok || b.Policy() != r.Policy {
			return store.MultiResult{}, false
		}
		e, eff := c.elapsed(&b, now)
		res, ok := b.Pinned(r.Cost, e)
		if !ok {
			return store.MultiResult{}, false // not pinned to the µs
		}
		if b.Denies(r.Cost, eff) && !res.Allowed {
			mr.Denied = i // marks that some bucket is certainly denied
		}
		mr.Results[i] = res
	}
	// Bad input (a key named twice, say) is the primary's to report: the
	// requests are checked only when the cache would answer them.
	if mr.Denied < 0 || store.CheckRequests(reqs, store.MaxKeyLen(-1)) != nil {
		return store.MultiResult{}, false
	}
	mr.Denied = -1
	for i, res := range mr.Results {
		if !res.Allowed && (mr.Denied < 0 || res.RetryAfter > mr.RetryAfter) {
			mr.Denied, mr.RetryAfter = i, res.RetryAfter
		}
	}
	c.denied.Add(1)
	return mr, true
}

// denyDownMulti is denyMulti for a Fallback whose primary is failing.
func (c *DenyCache) denyDownMulti(reqs []store.Request) (store.MultiResult, bool) {
	if c.closed.Load() {
		return store.MultiResult{}, false
	}
	return c.denyMulti(reqs)
}

// refundable reports whether any of reqs is marked Refundable.
func refundable(reqs []store.Request) bool {
	for _, r := range reqs {
		if r.Refundable {
			return true
		}
	}
	return false
}

// now reads the clock and keeps the latest reading.
func (c *DenyCache) now() time.Time {
	now := c.clock.Now()
	if !c.track {
		return now
	}
	us := now.UnixMicro()
	for l := c.latest.Load(); us > l && !c.latest.CompareAndSwap(l, us); l = c.latest.Load() {
	}
	return now
}

// elapsed returns b.elapsed at now, or e = −1 (no local answer) while the
// clock reads earlier than its latest reading: a primary that forgets full
// buckets (memstore, Redis expiry) may have forgotten this one by the latest
// time and would answer from a full bucket, even at an earlier time.
func (c *DenyCache) elapsed(b *bound, now time.Time) (e, eff int64) {
	if c.track && c.latest.Load() > now.UnixMicro() {
		return -1, 0
	}
	return b.elapsed(now, c.margin)
}

// learn records the bound implied by res. insert says whether to create an
// entry for a key without one: only when the same request made again now
// would be denied, so keys well under their limit cost no memory. An
// existing entry is always refreshed.
func (c *DenyCache) learn(key string, p algo.Policy, cost int64, seq uint64, t0 time.Time, res algo.Result, charged, insert bool) {
	if p.Unit() <= 0 || c.refunded != nil && c.refunded(key) {
		return // a quota: no bound to keep (the primary validated the rest)
	}
	if seq <= c.forgot.Load() {
		return // started before a Forget: may describe the state before a reset
	}
	b, ok := learn(p, t0, cost, res, charged)
	if !ok {
		return
	}
	b.seq = seq
	c.cache.put(key, b, c.clock.Now(), c.margin, insert, &c.forgot)
}

// unlearn drops the entry of a key charged by a call the cache does not
// learn from (a reservation, or a call marked refundable), so that later
// answers come from the primary, or from an entry learnt from a later
// answer. Calls in flight may still put back an entry learnt from a state
// before the charge: it overstates the bucket's tokens, as an entry does
// when other instances take, so it never denies what the primary admits.
func (c *DenyCache) unlearn(key string) { c.cache.drop(key) }

// Forget drops what the cache knows about keys. Call it after resetting
// keys in the primary (redisstore's Reset): a reset adds tokens the cache
// cannot see, so until then it may deny what the primary would admit.
// Answers to calls already in flight are not learnt either.
func (c *DenyCache) Forget(keys ...string) { c.invalidate(keys...) }

// Stats returns counts of what the cache did: Calls, Denied, Entries and
// Evictions of [Stats].
func (c *DenyCache) Stats() Stats {
	n, ev := c.cache.stats()
	return Stats{Calls: c.calls.Load(), Denied: c.denied.Load(), Entries: n, Evictions: ev}
}

// Primary returns the store the cache is in front of.
func (c *DenyCache) Primary() store.Store { return c.primary }

// Close drops every entry; later calls return [store.ErrClosed]. It does not
// close the primary, which belongs to the caller. Close is idempotent.
func (c *DenyCache) Close() error {
	c.closed.Store(true)
	c.cache.clear()
	return nil
}

// eligible reports whether a request may be answered from the cache: the
// inputs a store would reject (empty key, bad cost) always go to the
// primary so that its error comes back.
func eligible(key string, p algo.Policy, cost int64) bool {
	return key != "" && cost > 0 && cost <= p.Capacity() && p.Unit() > 0
}
