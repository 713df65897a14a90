package ratebucket

import (
	"context"
	"fmt"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// ConcurrencyConfig configures a [ConcurrencyLimiter]. The zero value is
// ready to use: no prefix.
type ConcurrencyConfig struct {
	// Prefix is prepended to every key, as [Config.Prefix] is. The
	// default is no prefix.
	Prefix string
}

// Lease is the answer to [ConcurrencyLimiter.Acquire]: a held lease when
// Allowed, else a denial with its RetryAfter.
type Lease struct {
	// Key is the key passed to Acquire, without the limiter's prefix.
	Key string
	// ID identifies the lease; empty when denied. Keep it (with Key) to
	// release or renew the lease, from this process or another.
	ID string
	algo.LeaseResult
}

// ConcurrencyLimiter is what users hold to bound how many requests of a key
// run at once: a [algo.LeasePolicy] and a key prefix bound to a [store.Store].
//
//	lim, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 10, TTL: time.Minute}, ratebucket.ConcurrencyConfig{})
//	...
//	lease, err := lim.Acquire(ctx, userID)
//	if err == nil && !lease.Allowed {
//		// reject: 10 requests of userID are in flight; lease.RetryAfter
//		// is when the earliest lease expires at the latest
//	}
//	defer lim.Release(context.WithoutCancel(ctx), lease)
//
// Release each lease when its work ends; a lease not released (its holder
// crashed, or forgot) frees its slot when its TTL runs out. Work that can
// outlast the TTL renews its lease, every third of a TTL say.
//
// A ConcurrencyLimiter holds no state of its own, so it is safe for
// concurrent use by multiple goroutines, and any number of them may share
// a Store. The zero value is not usable: its methods return [ErrNilStore].
// Make one with [NewConcurrencyLimiter].
type ConcurrencyLimiter struct {
	l      store.Store
	p      algo.LeasePolicy
	prefix string
}

// NewConcurrencyLimiter returns a ConcurrencyLimiter applying p to keys in
// l. It returns an error wrapping algo.ErrInvalidLeasePolicy when p is
// invalid, and [ErrNilStore] when l is nil.
func NewConcurrencyLimiter(l store.Store, p algo.LeasePolicy, cfg ConcurrencyConfig) (*ConcurrencyLimiter, error) {
	if l == nil {
		return nil, ErrNilStore
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("ratebucket: NewConcurrencyLimiter: %w", err)
	}
	return &ConcurrencyLimiter{l: l, p: p, prefix: cfg.Prefix}, nil
}

// Policy returns the limiter's policy.
func (c *ConcurrencyLimiter) Policy() algo.LeasePolicy { return c.p }

// Acquire asks for a lease on key under a fresh id ([store.NewLeaseID]). It does
// not wait: a denial is a Lease with Allowed false, and RetryAfter is the
// time until the earliest lease expires (an upper bound: a holder may
// release sooner). An empty key is refused with [store.ErrEmptyKey], prefix or
// not. Other errors are the Store's; on an error no lease is held.
func (c *ConcurrencyLimiter) Acquire(ctx context.Context, key string) (Lease, error) {
	return c.AcquireID(ctx, key, store.NewLeaseID())
}

// AcquireID is Acquire with an id of the caller's choosing, such as a job's
// id, at most 64 bytes. Acquiring an id that holds a live lease renews
// that lease instead of taking a second slot, so a caller that retries
// AcquireID after losing an answer (a timeout to Redis) holds one lease.
// Ids are per key: the same id on two keys names two leases.
func (c *ConcurrencyLimiter) AcquireID(ctx context.Context, key, id string) (Lease, error) {
	if err := c.check(key); err != nil {
		return Lease{}, err
	}
	res, err := c.l.AcquireLease(ctx, c.prefix+key, c.p, id)
	if err != nil {
		return Lease{}, err
	}
	l := Lease{Key: key, LeaseResult: res}
	if res.Allowed {
		l.ID = id
	}
	return l, nil
}

// Release frees the lease and reports whether it was live. Releasing a
// lease twice, or one that expired, reports false with a nil error, and so
// does releasing a denied Lease (one with no ID), so that a deferred
// Release needs no condition.
//
// Release with a context that outlives the request, such as
// context.WithoutCancel(ctx): with the request's own, a client that hangs
// up would make Release fail with context.Canceled, and its slot would stay
// taken until the TTL.
func (c *ConcurrencyLimiter) Release(ctx context.Context, l Lease) (bool, error) {
	if err := c.check(l.Key); err != nil || l.ID == "" && !l.Allowed {
		return false, err
	}
	return c.l.ReleaseLease(ctx, c.prefix+l.Key, l.ID)
}

// Renew extends the lease to expire a TTL from now and reports whether it
// was live; a lease that had expired is not renewed (report false), and its
// holder must Acquire again.
func (c *ConcurrencyLimiter) Renew(ctx context.Context, l Lease) (bool, error) {
	if err := c.check(l.Key); err != nil {
		return false, err
	}
	return c.l.RenewLease(ctx, c.prefix+l.Key, c.p, l.ID)
}

// check refuses the zero limiter and an empty key.
func (c *ConcurrencyLimiter) check(key string) error {
	switch {
	case c == nil || c.l == nil:
		return ErrNilStore
	case key == "":
		return store.ErrEmptyKey
	}
	return nil
}
