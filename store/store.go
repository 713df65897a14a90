// Package store is the contract between ratebucket's users and its backends.
//
// A [Store] keeps bucket state for many keys and applies the token-bucket
// math of package algo to them atomically. Backends (memstore in-process,
// redisstore across a fleet) implement it; everything above (the [Limiter],
// httplimit, sim) talks to this interface only.
//
// # Around a take: refund, take at most, reserve
//
// Over a store that implements the optional interfaces ([Refunder],
// [AtMostTaker], [Reserver]), a Limiter also gives tokens back, grants part
// of a batch, and admits a request after an exact, bounded delay instead of
// refusing it (a store without one returns [ErrUnsupported]):
//
//	res, err := lim.Refund(ctx, userID, 1)          // the upload failed: its token back
//	n, res, err := lim.TakeAtMost(ctx, jobID, 500)  // a batch takes what there is, up to 500
//	r, err := lim.Reserve(ctx, userID, 1, 2*time.Second)
//	res, err = r.Wait(ctx) // held r.Delay; if ctx ends first, cancelled and its tokens back
//
// A refund never raises a bucket above its capacity; a take at most n that
// grants nothing is a denial with the exact wait for one token;
// reservations are served in the order they were made, so a large one is
// not starved by small ones, and a cancelled one gives its tokens back
// exactly while it is the latest on its key. [Limiter.Wait] reserves and
// waits.
//
// # At most N in flight
//
// A [Limiter] bounds how often; a [ConcurrencyLimiter] bounds how many at
// once, over a store that implements [Leaser]. Acquire before the work,
// Release after; a lease not released (its holder crashed) frees its slot
// when its TTL runs out, and a holder that runs longer renews it:
//
//	lim, err := store.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 10, TTL: time.Minute}, store.ConcurrencyConfig{})
//	lease, err := lim.Acquire(ctx, userID) // lease.Allowed, or lease.RetryAfter
//	defer lim.Release(context.WithoutCancel(ctx), lease)
//
// # Policies per key, and shadow limits
//
// A [Resolver] chooses a key's policy at runtime, for example from the
// tenant's plan, and may price its requests; a [ResolverCache] in front of
// a slow one is bounded (Size keys) and stale for at most its TTL. A
// resolver that fails fails the call with [ErrResolve], never a default:
//
//	plans, err := store.NewResolverCache(tenantPlan, store.CacheConfig{TTL: 30 * time.Second})
//	lim, err := store.NewLimiter(s, algo.Policy{}, store.LimiterConfig{Resolver: plans.Resolve})
//
// A shadow Limiter (LimiterConfig.Shadow) charges its own bucket as an
// enforced one would and reports its refusals as [OutcomeShadowDenied],
// but never refuses its caller: how a new limit is rolled out safely.
//
// # Observing
//
// [Observe] wraps any store to report its decisions (allowed, denied,
// shadow-denied, error, with the store call's latency) to an [Observer],
// keeping the store's optional interfaces; entry points name each call's
// policy and route with [WithLabels], and components report what only they
// see (hybrid's breaker and deny cache, redisstore's pipeline) to the same
// Observer through their Config. contrib/prometheus and contrib/otel are
// ready Observers:
//
//	s := store.Observe(rs, "redis", obs) // obs: any Observer
package store

import (
	"context"
	"errors"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// Store applies requests to buckets. Implementations are safe for
// simultaneous use by multiple goroutines.
type Store interface {
	// Take applies cost tokens to the bucket at key under policy p,
	// atomically, and returns the decision. cost 0 peeks.
	//
	// The error is non-nil only when no decision was made: bad input
	// ([ErrEmptyKey], [ErrKeyTooLong], algo.ErrInvalidPolicy,
	// algo.ErrInvalidCost, algo.ErrCostExceedsCapacity: see
	// [CheckRequest]), a closed store ([ErrClosed]), a
	// context that ended, or a backend failure (wrapping the backend's
	// error). A denial is not an error: it is a Result with Allowed false.
	//
	// A key's policy may change between calls (a tenant's plan changes):
	// the first call under the new policy converts the bucket exactly, by
	// algo.TokenBucket.Rebase under the store's rule (keep the tokens, by
	// default, or keep the fraction of a full bucket); memstore and
	// redisstore do, and say what their Config.OnPolicyChange chooses.
	// Keys that are different limits (a burst limit and a quota of one
	// client) must still be different keys: a Limiter's prefix is the
	// usual way to keep them apart.
	Take(ctx context.Context, key string, p algo.Policy, cost int64) (algo.Result, error)
}

// Request is one bucket of a multi-limit take.
type Request struct {
	Key    string
	Policy algo.Policy
	Cost   int64
}

// MultiResult is the answer to a multi-limit take.
type MultiResult struct {
	// Allowed reports whether every bucket admitted the request; only
	// then is any bucket charged.
	Allowed bool
	// Results holds one Result per Request, in order. When Allowed, each
	// reflects the charge; when denied, nothing was charged and each is
	// what that bucket alone would have answered.
	Results []algo.Result
	// Denied is the index of the request that denied with the longest
	// retry-after, or -1 when Allowed.
	Denied int
	// RetryAfter is the longest retry-after among the denying buckets:
	// the earliest the whole request could be admitted. Zero when Allowed.
	RetryAfter time.Duration
}

// MultiTaker is implemented by stores that can take from several buckets
// atomically: all admit and all are charged, or none is charged.
type MultiTaker interface {
	TakeMulti(ctx context.Context, reqs []Request) (MultiResult, error)
}

// Clock is the narrowest clock a store needs. A
// github.com/benbjohnson/clock Clock satisfies it, so users pass clock.New()
// or clock.NewMock().
type Clock interface {
	Now() time.Time
}

// Errors shared by all stores. Match them with errors.Is; backends wrap them
// with detail.
var (
	// ErrEmptyKey reports an empty key: an empty key would put every
	// caller in one shared bucket, so it is refused.
	ErrEmptyKey = errors.New("store: empty key")
	// ErrClosed reports a call on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrCorruptState reports a stored value that is not a bucket
	// (wrong type, or garbage written by someone else). A store may
	// repair such a key (redisstore does by default, as an empty bucket)
	// and report the repair with an error matching this one; a store that
	// keeps it returns this error until the key is reset (deleted).
	ErrCorruptState = errors.New("store: corrupt bucket state")
	// ErrNotTogether reports a multi-limit take whose buckets the store
	// cannot take in one atomic step: a store that spreads keys over
	// several servers keeps only the keys of one group together. Make the
	// keys with [GroupKey] and one group, or take the buckets one at a
	// time.
	ErrNotTogether = errors.New("store: keys cannot be taken together")
)

// Re-exported so callers of a Store need not import algo to match them.
var (
	ErrInvalidPolicy       = algo.ErrInvalidPolicy
	ErrInvalidCost         = algo.ErrInvalidCost
	ErrCostExceedsCapacity = algo.ErrCostExceedsCapacity
)

// ErrDuplicateKey reports a multi-limit take that names the same key twice.
// A [MultiTaker] may refuse such a request with this error, or treat the
// repeats as one request of their combined cost; it documents which.
var ErrDuplicateKey = errors.New("store: duplicate key in a multi-limit take")
