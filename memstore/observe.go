package memstore

import (
	"context"
	"io"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

var _ store.SelfCounter = (*Store)(nil)

// CountTakes implements store.SelfCounter: store.Observe calls it when a
// Store is observed by a store.DecisionCounter (the Prometheus and
// OpenTelemetry adapters), and returns what it returns. A Take through
// the result is the Store's own, counted by tap, with no interface call
// in between; every other operation, and the one Take in 64 that is
// timed, goes through rest, Observe's wrapper.
func (s *Store) CountTakes(rest store.Store, tap *store.TakeTap) store.Store {
	r, ok := rest.(fullStore)
	if !ok { // not the wrapper of a Store: keep it
		return rest
	}
	return &counted{s: s, rest: r, tap: tap}
}

// fullStore is every interface a Store implements, as Observe's wrapper
// shows them.
type fullStore interface {
	store.Store
	store.MultiTaker
	store.Refunder
	store.AtMostTaker
	store.Reserver
	store.Leaser
	store.FailureReporter
	io.Closer
}

// counted is an observed Store whose Takes it counts itself.
type counted struct {
	s    *Store
	rest fullStore
	tap  *store.TakeTap
}

func (c *counted) Take(ctx context.Context, key string, p algo.Policy, cost int64) (algo.Result, error) {
	if !c.tap.Counting() {
		return c.rest.Take(ctx, key, p, cost)
	}
	res, err := c.s.Take(ctx, key, p, cost)
	c.tap.Count(ctx, cost, res.Allowed, err)
	return res, err
}

func (c *counted) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	return c.rest.TakeMulti(ctx, reqs)
}

func (c *counted) Refund(ctx context.Context, key string, p algo.Policy, n int64) (algo.Result, error) {
	return c.rest.Refund(ctx, key, p, n)
}

func (c *counted) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	return c.rest.RefundMulti(ctx, reqs)
}

func (c *counted) TakeAtMost(ctx context.Context, key string, p algo.Policy, n int64) (int64, algo.Result, error) {
	return c.rest.TakeAtMost(ctx, key, p, n)
}

func (c *counted) Reserve(ctx context.Context, key string, p algo.Policy, cost int64, maxWait time.Duration) (algo.Reservation, error) {
	return c.rest.Reserve(ctx, key, p, cost, maxWait)
}

func (c *counted) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	return c.rest.CancelReservation(ctx, key, p, t)
}

func (c *counted) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	return c.rest.AcquireLease(ctx, key, p, id)
}

func (c *counted) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	return c.rest.ReleaseLease(ctx, key, id)
}

func (c *counted) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	return c.rest.RenewLease(ctx, key, p, id)
}

func (c *counted) Close() error { return c.rest.Close() }

func (c *counted) ReportFailure(ctx context.Context, op store.Op, cost int64, err error) {
	c.rest.ReportFailure(ctx, op, cost, err)
}
