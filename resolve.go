package ratebucket

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Policies resolved per key, at runtime: a [Resolver] answers, for each
// key, the policy to apply (a tenant's plan, read from a database or a
// configuration service), so that the policy of a key is no longer fixed
// when the Limiter or the route is built. A [ResolverCache] in front of a
// slow resolver answers from memory for a bounded time, its TTL: a plan
// change is seen within TTL.
//
// The bucket of a key stays the same when its resolved policy changes
// (the key does not name the plan): the store applies the new policy to
// the bucket's state. A resolver that fails is never replaced by a
// default: the call fails with an error wrapping [ErrResolve], and the
// entry point decides what the request gets as it does for a store
// failure (httplimit: the route's FailMode).

// Resolved is a [Resolver]'s answer for one key.
type Resolved struct {
	// Policy is the policy to apply to the key's bucket. It must be
	// valid: the zero Policy, or any invalid one, fails the call with an
	// error wrapping both ErrResolve and algo.ErrInvalidPolicy.
	Policy algo.Policy
	// Cost, when positive, is what one request of the key costs under
	// this policy (a plan that prices its calls): it replaces the cost of
	// [Limiter.Allow] and of an HTTP request. Zero keeps the caller's
	// cost; a call that names its cost ([Limiter.Take], Refund, ...) keeps
	// it whatever Cost says. Negative is an error wrapping ErrResolve and
	// algo.ErrInvalidCost.
	Cost int64
	// Name names the resolved policy for observers (the plan: "free",
	// "pro"): it becomes the Policy label of the call when the caller set
	// none. It must come from configuration, never from the key, so that
	// labels stay of bounded cardinality. May be empty.
	Name string
}

// Resolver returns the policy to apply to key (a Limiter's key, without
// its prefix; httplimit passes the client's ID). It must be safe for
// simultaneous use. Its error is returned wrapped in [ErrResolve]; it may
// be slow (a database query): put a [ResolverCache] in front of it.
type Resolver func(ctx context.Context, key string) (Resolved, error)

// Resolve calls f(ctx, key). With it a Resolver, as a ResolverCache, has
// the method an httplimit.Limit's Resolve asks for.
func (f Resolver) Resolve(ctx context.Context, key string) (Resolved, error) { return f(ctx, key) }

// ErrResolve reports a call whose policy could not be resolved: the
// Resolver failed (the error wraps the resolver's, reachable with
// errors.Is and errors.As) or answered a policy or cost that is not
// valid. No store call was made and nothing was charged.
var ErrResolve = errors.New("ratebucket: cannot resolve the policy")

// resolve calls r for key and checks its answer: every error it returns
// wraps ErrResolve.
func resolve(ctx context.Context, r Resolver, key string) (Resolved, error) {
	res, err := r(ctx, key)
	switch {
	case err != nil:
		return Resolved{}, fmt.Errorf("%w: key %.64q: %w", ErrResolve, key, err)
	case res.Cost < 0:
		return Resolved{}, fmt.Errorf("%w: key %.64q: cost %d: %w", ErrResolve, key, res.Cost, algo.ErrInvalidCost)
	}
	if err := res.Policy.Validate(); err != nil {
		return Resolved{}, fmt.Errorf("%w: key %.64q: %w", ErrResolve, key, err)
	}
	return res, nil
}

// ErrInvalidCacheConfig reports a [CacheConfig] outside its documented
// bounds.
var ErrInvalidCacheConfig = errors.New("ratebucket: invalid ResolverCache configuration")

// CacheConfig configures a [ResolverCache]. The zero value is ready to
// use: 10,000 keys, answers kept one minute, errors not kept, the real
// clock.
type CacheConfig struct {
	// Size bounds the keys the cache holds; when full, it forgets the
	// key used least recently. Default 10,000.
	Size int
	// TTL is how long an answer is reused: the staleness bound. A plan
	// changed at the source is applied within TTL of the change, on
	// every instance. Default one minute.
	TTL time.Duration
	// ErrorTTL is how long a resolver's error is reused before the
	// resolver is asked again, to spare a failing source a request per
	// call. Default 0: errors are not kept, the next call asks again
	// (concurrent calls for one key still share one resolver call).
	ErrorTTL time.Duration
	// Clock reads the time that entries expire by. Default the real
	// clock; tests pass a manual one and need no sleep.
	Clock store.Clock
}

// ResolverCache is a bounded, optional cache in front of a slow
// [Resolver]. Its Resolve method is a Resolver:
//
//	plans, err := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: 30 * time.Second})
//	lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Resolver: plans.Resolve})
//
// An answer is reused for TTL after the resolver gave it, so a plan change
// is seen within TTL; errors are not reused unless ErrorTTL says so. The
// cache holds at most Size keys and forgets the least recently used.
// Concurrent calls for a key that is not cached share one call of the
// resolver (a caller whose context ends first stops waiting; a resolver
// call that failed only because its caller's context ended is retried by
// the others for themselves).
//
// A ResolverCache is safe for simultaneous use by multiple goroutines. The
// zero value is not usable: make one with [NewResolverCache]. It starts no
// goroutine and needs no Close.
type ResolverCache struct {
	r                 Resolver
	size              int
	ttl, errTTL       time.Duration
	clk               store.Clock
	mu                sync.Mutex
	lru               list.List // of *entry, most recently used first
	keys              map[string]*list.Element
	flight            map[string]*call
	hits, misses, err uint64
}

type entry struct {
	key  string
	res  Resolved
	err  error
	till time.Time
}

// call is one resolver call that concurrent misses of its key share.
type call struct {
	done chan struct{}
	res  Resolved
	err  error
}

// NewResolverCache returns a cache in front of r, or an error wrapping
// [ErrInvalidCacheConfig] for a nil r or a negative Size, TTL or ErrorTTL.
func NewResolverCache(r Resolver, cfg CacheConfig) (*ResolverCache, error) {
	switch {
	case r == nil:
		return nil, fmt.Errorf("%w: nil Resolver", ErrInvalidCacheConfig)
	case cfg.Size < 0 || cfg.TTL < 0 || cfg.ErrorTTL < 0:
		return nil, fmt.Errorf("%w: negative Size %d, TTL %v or ErrorTTL %v", ErrInvalidCacheConfig, cfg.Size, cfg.TTL, cfg.ErrorTTL)
	}
	c := &ResolverCache{r: r, size: cfg.Size, ttl: cfg.TTL, errTTL: cfg.ErrorTTL, clk: cfg.Clock,
		keys: map[string]*list.Element{}, flight: map[string]*call{}}
	if c.size == 0 {
		c.size = 10_000
	}
	if c.ttl == 0 {
		c.ttl = time.Minute
	}
	if c.clk == nil {
		c.clk = realClock{}
	}
	return c, nil
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Resolve answers key's policy from the cache while its entry is fresh,
// and otherwise asks the resolver (once for concurrent callers) and
// keeps the answer for TTL. It returns the resolver's error as it is:
// callers such as a Limiter wrap it in ErrResolve.
func (c *ResolverCache) Resolve(ctx context.Context, key string) (Resolved, error) {
	now := c.clk.Now()
	c.mu.Lock()
	if el, ok := c.keys[key]; ok {
		e := el.Value.(*entry)
		if now.Before(e.till) {
			c.lru.MoveToFront(el)
			c.hits++
			c.mu.Unlock()
			return e.res, e.err
		}
	}
	c.misses++
	if f, ok := c.flight[key]; ok {
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return Resolved{}, ctx.Err()
		}
		if f.err != nil && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
			return c.r(ctx, key) // the leader's context ended, not ours
		}
		return f.res, f.err
	}
	f := &call{done: make(chan struct{}), err: errResolverPanicked}
	c.flight[key] = f
	c.mu.Unlock()
	defer c.land(ctx, key, f) // also if r panics: the waiters then see errResolverPanicked
	f.res, f.err = c.r(ctx, key)
	return f.res, f.err
}

// errResolverPanicked is what callers waiting on a resolver call that
// panicked get (the panic goes on in the caller that made the call).
var errResolverPanicked = errors.New("ratebucket: the resolver panicked")

// land ends the resolver call f for key: it keeps its answer for TTL
// (an error for ErrorTTL, and not when the caller's context ended) and
// wakes the callers waiting for it.
func (c *ResolverCache) land(ctx context.Context, key string, f *call) {
	defer close(f.done)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.flight, key)
	ttl := c.ttl
	if f.err != nil {
		c.err++
		if ttl = c.errTTL; ttl == 0 || ctx.Err() != nil {
			return
		}
	}
	c.put(&entry{key: key, res: f.res, err: f.err, till: c.clk.Now().Add(ttl)})
}

// put stores e, forgetting the least recently used key when full. c.mu
// is held.
func (c *ResolverCache) put(e *entry) {
	if el, ok := c.keys[e.key]; ok {
		el.Value = e
		c.lru.MoveToFront(el)
		return
	}
	for c.lru.Len() >= c.size {
		old := c.lru.Back()
		delete(c.keys, old.Value.(*entry).key)
		c.lru.Remove(old)
	}
	c.keys[e.key] = c.lru.PushFront(e)
}

// Forget drops key's entry, so that the next call asks the resolver: for
// an application that knows a plan just changed.
func (c *ResolverCache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.keys[key]; ok {
		delete(c.keys, key)
		c.lru.Remove(el)
	}
}

// CacheStats counts a [ResolverCache]'s calls since it was made.
type CacheStats struct {
	// Keys is how many keys the cache holds now, at most Size.
	Keys int
	// Hits counts calls answered from the cache, Misses the others
	// (each asked the resolver or waited for a call of it), Errors the
	// resolver calls that failed.
	Hits, Misses, Errors uint64
}

// Stats returns the cache's counts.
func (c *ResolverCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Keys: c.lru.Len(), Hits: c.hits, Misses: c.misses, Errors: c.err}
}
