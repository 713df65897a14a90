package hybrid

import (
	"context"
	"fmt"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Concurrency leases (store.Store) on both wrappers, so that a route
// limited by a Fallback or a DenyCache can hold leases too (httplimit's
// Concurrency). A lease is no bucket: the DenyCache has no bound to learn
// from one and passes every lease call to its primary. The Fallback sends
// each through its breaker, like a Take, and answers by Mode what the
// primary cannot:
//
//   - LocalFallback: the local store keeps the lease, under the policy's
//     share (Limit divided by Instances, rounded down, at least 1), so a
//     fleet of N holds about Limit in flight while the primary is down.
//     The local store must be a store.Store (memstore is).
//   - FailClosed: an error wrapping ErrOpen.
//   - FailOpen: admitted, with no lease held anywhere (Remaining is
//     Limit−1); its release or renewal fails with ErrOpen while the
//     primary is down, and is a no-op reporting false once it is back.
//
// A release or renewal goes to the primary first. Under LocalFallback, one
// the primary does not hold live (a lease taken locally during an outage)
// goes to the local store as well, so a lease is released where it was
// taken; one taken on the primary before the outage and released during
// it frees its primary slot at its TTL.

// leaserOf returns s as a store.Store, or an error wrapping
// store.ErrUnsupported when it keeps no leases.
func leaserOf(s store.Store) (store.Store, error) { return s, nil }

// AcquireLease passes the call to the primary: see store.Store. It returns
// an error wrapping store.ErrUnsupported when the primary keeps no leases,
// and store.ErrClosed after Close.
func (c *DenyCache) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	l, err := c.leaser()
	if err != nil {
		return algo.LeaseResult{}, err
	}
	return l.AcquireLease(ctx, key, p, id)
}

// ReleaseLease passes the call to the primary: see AcquireLease.
func (c *DenyCache) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	l, err := c.leaser()
	if err != nil {
		return false, err
	}
	return l.ReleaseLease(ctx, key, id)
}

// RenewLease passes the call to the primary: see AcquireLease.
func (c *DenyCache) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	l, err := c.leaser()
	if err != nil {
		return false, err
	}
	return l.RenewLease(ctx, key, p, id)
}

// leaser returns the primary as a store.Store, or the error of a call.
func (c *DenyCache) leaser() (store.Store, error) {
	if c.closed.Load() {
		return nil, store.ErrClosed
	}
	return leaserOf(c.primary)
}

// shareLease is this instance's share of p while the primary is down:
// Limit divided by instances, rounded down, at least 1.
func shareLease(p algo.LeasePolicy, instances int) algo.LeasePolicy {
	p.Limit = max(1, p.Limit/int64(max(instances, 1)))
	return p
}

// AcquireLease asks the primary through the breaker, or answers by Mode:
// see the package doc and store.Store.
func (f *Fallback) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	res, _, err := guard(f, ctx,
		func(ctx context.Context) (algo.LeaseResult, bool, error) {
			l, err := leaserOf(f.primary)
			if err != nil {
				return algo.LeaseResult{}, false, err
			}
			res, err := l.AcquireLease(ctx, key, p, id)
			return res, true, err
		},
		func(cause error) (algo.LeaseResult, error) {
			if err := f.checkLease(key, id, &p); err != nil {
				return algo.LeaseResult{}, err
			}
			switch f.cfg.Mode {
			case FailOpen:
				return algo.LeaseResult{Allowed: true, Limit: p.Limit, Remaining: p.Limit - 1}, nil
			case FailClosed:
				return algo.LeaseResult{}, f.openErr(cause)
			}
			l, err := leaserOf(f.local)
			if err != nil {
				return algo.LeaseResult{}, err
			}
			return l.AcquireLease(ctx, key, shareLease(p, f.cfg.Instances), id)
		})
	return res, err
}

// ReleaseLease asks the primary through the breaker and, under
// LocalFallback, the local store for a lease the primary does not hold:
// see the package doc and store.Store.
func (f *Fallback) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	return f.leaseOp(ctx, key, id, nil, func(ctx context.Context, l store.Store, _ *algo.LeasePolicy) (bool, error) {
		return l.ReleaseLease(ctx, key, id)
	})
}

// RenewLease asks the primary through the breaker and, under
// LocalFallback, the local store for a lease the primary does not hold
// (with the share of p the local store acquired it under): see the
// package doc and store.Store.
func (f *Fallback) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	return f.leaseOp(ctx, key, id, &p, func(ctx context.Context, l store.Store, p *algo.LeasePolicy) (bool, error) {
		return l.RenewLease(ctx, key, *p, id)
	})
}

// leaseOp runs a release or a renewal (call, with policy p for a renewal)
// on the primary through the breaker; under LocalFallback, a lease the
// primary does not hold live, or a call the primary cannot answer, goes to
// the local store, under p's share.
func (f *Fallback) leaseOp(ctx context.Context, key, id string, p *algo.LeasePolicy,
	call func(context.Context, store.Store, *algo.LeasePolicy) (bool, error)) (bool, error) {
	local := func(ctx context.Context) (bool, error) {
		l, err := leaserOf(f.local)
		if err != nil {
			return false, err
		}
		var q *algo.LeasePolicy
		if p != nil {
			s := shareLease(*p, f.cfg.Instances)
			q = &s
		}
		return call(ctx, l, q)
	}
	ok, _, err := guard(f, ctx,
		func(ctx context.Context) (bool, bool, error) {
			l, err := leaserOf(f.primary)
			if err != nil {
				return false, false, err
			}
			ok, err := call(ctx, l, p)
			if err == nil && !ok && f.cfg.Mode == LocalFallback {
				// Perhaps taken locally during an outage: the answer
				// is still the primary's, which is healthy.
				ok, _ = local(ctx)
			}
			return ok, true, err
		},
		func(cause error) (bool, error) {
			if err := f.checkLease(key, id, p); err != nil {
				return false, err
			}
			if f.cfg.Mode != LocalFallback {
				return false, f.openErr(cause)
			}
			return local(ctx)
		})
	return ok, err
}

// checkLease validates a lease call's input as the stores do, for the
// answers the Fallback gives itself (p is nil for a release).
func (f *Fallback) checkLease(key, id string, p *algo.LeasePolicy) error {
	if err := store.CheckLease(key, id, store.MaxKeyLen(f.cfg.MaxKeyLen)); err != nil {
		return fmt.Errorf("hybrid: %w", err)
	}
	if p != nil {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("hybrid: %w", err)
		}
	}
	return nil
}
