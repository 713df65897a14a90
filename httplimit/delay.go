package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Smoothing (Config.Delay), as NGINX's limit_req burst delay does: a
// request the bucket cannot admit now, but can within Delay, is admitted
// with a reservation (store.Store) and held for its exact delay, the
// time until its tokens exist, before its handler runs; a request that
// would need longer is refused with 429 and the exact Retry-After. The
// bucket serves reservations in the order they were made: requests held
// proceed one after the other at the policy's rate, and the never-exceed
// law holds at the times they proceed.
//
// The wait honours the request's context. A client that disconnects (or
// a deadline that passes) while its request is held cancels the
// reservation: its tokens come back exactly when it is the latest
// reservation on the key, which is the case for a client's only held
// request. One with later reservations behind it gives nothing back:
// they were given their times counting on its tokens, which refill as
// usual (algo.TokenBucket.Cancel says why). A request whose context has a
// deadline is held only if it can proceed before the deadline; otherwise
// it is refused at once, as one beyond Delay is.
//
// A Delay route's reservations are marked store.Request.Refundable, as a
// ChargeIf route's takes are (see charge.go): any of them may be
// cancelled, by the instance that holds its request.
//
// Delay applies to a route with a single Limit: a reservation on several
// buckets cannot be made atomically (a reservation admitted by one bucket
// and refused by the next could only be cancelled if it were still the
// latest), so New and With refuse Delay with several Limits. Put the
// other limits on a route of their own, or use Delay on the one that
// bursts.

// A calendar quota (algo.Quota) cannot be reserved: its count resets at
// the period's end, so there is no time within the period at which a
// request over it would fit, and algo refuses the operation
// (algo.ErrQuotaUnsupported). New and With therefore refuse Delay on a
// limit whose Policy is a quota, with an error wrapping ErrInvalidConfig
// and algo.ErrQuotaUnsupported that names the limit; a route that smooths bursts and counts a quota
// puts the quota on a route without Delay. A Limit with Resolve, whose
// policies are only known per request, cannot have Delay either (see
// checkResolve), so no reservation ever meets a quota at request time.

// checkDelayPolicies refuses Delay over a limit of ls whose policy is a
// calendar quota: its reservations could never be made.
func checkDelayPolicies(ls []limit, delay time.Duration) error {
	if delay == 0 {
		return nil
	}
	for _, l := range ls {
		if l.policy.IsQuota() {
			return fmt.Errorf("%w: Delay cannot hold requests of limit %q, a calendar quota (%v): %w",
				ErrInvalidConfig, l.name, l.policy, algo.ErrQuotaUnsupported)
		}
	}
	return nil
}

// checkDelay checks the route's Delay and builds what it needs: a
// ratebucket.Limiter for its single limit, whose timers hold the
// requests (the Config's Clock when it is a github.com/benbjohnson/clock
// Clock, such as clock.NewMock(), else the real clock's).
func (m *Middleware) checkDelay(delay time.Duration, clk store.Clock) error {
	switch {
	case delay == 0:
		return nil
	case delay < 0:
		return fmt.Errorf("%w: negative Delay %v", ErrInvalidConfig, delay)
	case len(m.limits) != 1:
		return fmt.Errorf("%w: Delay holds requests of a route with a single Limit; this one has %d (a reservation on several buckets cannot be made atomically): give the other limits a route of their own",
			ErrInvalidConfig, len(m.limits))
	}
	s := baseStore(m.store)
	timers, ok := clk.(clock.Clock)
	if !ok {
		timers = clock.New()
	}
	l := &m.limits[0]
	lim, err := ratebucket.NewLimiter(refundableReserver{s}, l.policy, ratebucket.Config{Clock: timers})
	if err != nil {
		return fmt.Errorf("%w: limit %q: %w", ErrInvalidConfig, l.name, err)
	}
	m.delay, m.reserver = delay, lim
	return nil
}

// refundableReserver is the store of a Delay route's Limiters: it marks
// every reservation, which a client that disconnects cancels,
// Refundable (see refundableStore).
type refundableReserver struct{ store.Store }

// Reserve reserves with the request marked Refundable.
func (s refundableReserver) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	req.Refundable = true
	return s.Store.Reserve(ctx, req, maxWait)
}

// reserve asks for q within the route's Delay: the answer as a take's,
// and the reservation to hold the request for. A reservation that would
// outlast the request's deadline is a refusal, as one beyond Delay is.
func (m *Middleware) reserve(ctx context.Context, q store.Request) (store.MultiResult, ratebucket.Reservation, error) {
	rsv, err := m.reserver.Reserve(ctx, q.Key, q.Cost, m.delay)
	if errors.Is(err, ratebucket.ErrWouldExceedDeadline) {
		err = nil // rsv is the refusal, with its RetryAfter
	}
	mr := store.MultiResult{Allowed: rsv.Allowed, Results: []algo.Result{rsv.Result}, Denied: -1}
	if !rsv.Allowed {
		mr.Denied, mr.RetryAfter = 0, rsv.RetryAfter
	}
	return mr, rsv, err
}

// hold keeps an admitted request until its reservation's time, and
// reports whether it may proceed. When the request's context ends first
// (the client left), the reservation is cancelled, the request is
// reported as Cancelled and nothing is written.
func (m *Middleware) hold(r *http.Request, ev *Event, rsv ratebucket.Reservation) bool {
	if rsv.Delay <= 0 {
		return true
	}
	ev.Delay = rsv.Delay
	if res, err := rsv.Wait(r.Context()); !res.Allowed {
		ev.Outcome, ev.Err = Cancelled, err
		m.observe(r, *ev)
		return false
	}
	return true
}
