package storetest_test

import (
	"context"
	"runtime"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Planted lease bugs, each for the Leases check to catch.
func init() {
	mutants["lease lives 1µs longer"] = "Leases"
	mutants["lease limit off by one"] = "Leases"
	mutants["release always reports true"] = "Leases"
	mutants["acquire not atomic"] = "Leases"
}

// lease applies op to key's leases under the store's lock: the simplest
// correct Leaser, unless a mutant says otherwise.
func (s *mapStore) lease(ctx context.Context, key, id string, op func(algo.Leases, int64) (algo.Leases, error)) error {
	if err := store.CheckLease(key, id, store.DefaultMaxKeyLen); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return store.ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	}
	if s.leases == nil {
		s.leases = map[string]algo.Leases{}
	}
	now := s.clk.Now().UnixMicro()
	l := s.leases[key]
	if s.mutant == "acquire not atomic" { // work on a copy, unlocked for a moment
		l = append(algo.Leases(nil), l...)
		s.mu.Unlock()
		for range 10 { // a window as wide as a round trip's, for others to run in
			runtime.Gosched()
		}
		s.mu.Lock()
	}
	l, err := op(l, now)
	if err == nil {
		s.leases[key] = l
	}
	return err
}

func (s *mapStore) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (res algo.LeaseResult, err error) {
	p = s.mutate(p)
	err = s.lease(ctx, key, id, func(l algo.Leases, now int64) (algo.Leases, error) {
		l, res, err = p.Acquire(l, now, id)
		return l, err
	})
	return res, err
}

func (s *mapStore) ReleaseLease(ctx context.Context, key, id string) (ok bool, err error) {
	err = s.lease(ctx, key, id, func(l algo.Leases, now int64) (algo.Leases, error) {
		l, ok, err = l.Release(now, id)
		return l, err
	})
	return ok || err == nil && s.mutant == "release always reports true", err
}

func (s *mapStore) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (ok bool, err error) {
	p = s.mutate(p)
	err = s.lease(ctx, key, id, func(l algo.Leases, now int64) (algo.Leases, error) {
		l, ok, err = p.Renew(l, now, id)
		return l, err
	})
	return ok, err
}

// mutate plants the policy bugs.
func (s *mapStore) mutate(p algo.LeasePolicy) algo.LeasePolicy {
	switch {
	case s.mutant == "lease limit off by one" && p.Limit > 1:
		p.Limit--
	case s.mutant == "lease lives 1µs longer" && p.TTL < algo.MaxLeaseTTL:
		p.TTL += time.Microsecond
	}
	return p
}
