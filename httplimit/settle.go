package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Charging the cost a response reports (Config.Settle), for work whose
// cost is known only after it is done: an LLM proxy's tokens, a query's
// rows, a download's bytes. An admitted request holds an estimate
// (store.Store.Hold): the route's Cost or CostBy, or, when it sets
// neither, the 95th percentile of the costs its last requests settled
// at. When its handler has returned, the actual cost (from a response
// header or a function of the response) settles the hold: the difference
// goes back, or the extra is charged, into debt of at most one full
// bucket, which the next requests wait out, each told the exact
// Retry-After (algo.Policy.SettleBound states what that admits).
//
// The settle is one store call after the handler returns, as a ChargeIf
// refund is; it is reported to the Observer as a second Event (Outcome
// [Settled], Cost the actual cost, Err if it failed). A handler that
// panics or hijacks the connection leaves its hold open: it settles at its
// estimate when the hold's TTL passes. A request served while the store
// failed was never held, and is not settled.
//
// Settle applies to a route with a single Limit, as Delay does (a hold
// is made on one bucket), and not with Delay, ChargeIf, a shadow limit or
// a calendar quota.

// settler is a settled route's state: where its responses report their
// cost, its hold TTL, and the running estimate of a route that sets no
// cost.
type settler struct {
	header   string
	cost     func(status int, h http.Header) (int64, bool)
	ttl      time.Duration
	estimate *p95 // nil when the route has a Cost or CostBy
}

// actual returns the cost the response reports.
func (s *settler) actual(status int, h http.Header) (int64, bool) {
	if s.cost != nil {
		return s.cost(status, h)
	}
	n, err := strconv.ParseInt(h.Get(s.header), 10, 64)
	return n, err == nil && n >= 0
}

// checkSettle checks the route's Settle fields and builds its settler.
func (m *Middleware) checkSettle(cfg Config) error {
	if cfg.Settle == "" && cfg.SettleCost == nil {
		if cfg.SettleTTL != 0 {
			return fmt.Errorf("%w: SettleTTL %v without Settle or SettleCost", ErrInvalidConfig, cfg.SettleTTL)
		}
		return nil
	}
	s := &settler{header: cfg.Settle, cost: cfg.SettleCost, ttl: cfg.SettleTTL}
	if s.ttl == 0 {
		s.ttl = 5 * time.Minute
	}
	switch {
	case s.ttl < time.Microsecond || s.ttl > algo.MaxHoldTTL:
		return fmt.Errorf("%w: SettleTTL %v outside [1µs, %v]", ErrInvalidConfig, s.ttl, algo.MaxHoldTTL)
	case len(m.limits) != 1:
		return fmt.Errorf("%w: Settle charges requests of a route with a single Limit; this one has %d", ErrInvalidConfig, len(m.limits))
	case cfg.Delay != 0 || cfg.ChargeIf != nil || m.shadow:
		return fmt.Errorf("%w: Settle cannot go with Delay, ChargeIf or a shadow limit", ErrInvalidConfig)
	case m.limits[0].policy.IsQuota():
		return fmt.Errorf("%w: Settle cannot hold requests of limit %q, a calendar quota: %w", ErrInvalidConfig, m.limits[0].name, algo.ErrQuotaUnsupported)
	}
	if cfg.Cost == 0 && cfg.CostBy == nil {
		s.estimate = &p95{}
	}
	m.settle = s
	return nil
}

// holdCost holds q's cost (the estimate) for the route's TTL: the answer
// as a take's, and the hold to settle.
func (m *Middleware) holdCost(ctx context.Context, q store.Request) (store.MultiResult, algo.Hold, error) {
	q.Refundable = true // settled by the instance that holds it
	h, res, err := baseStore(m.store).Hold(ctx, q, m.settle.ttl)
	mr := store.MultiResult{Allowed: res.Allowed, Results: []algo.Result{res}, Denied: -1}
	if !res.Allowed {
		mr.Denied, mr.RetryAfter = 0, res.RetryAfter
	}
	return mr, h, err
}

// serveSettled serves an admitted request that holds h on q's bucket, then
// settles the hold at the cost the response reports.
func (m *Middleware) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, ev Event, q store.Request, h algo.Hold) {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r) // a panic leaves from here: the hold settles at its TTL
	if sw.hijacked {
		return
	}
	actual, ok := m.settle.actual(sw.final(), sw.Header())
	if !ok {
		actual = h.Estimate
	}
	ctx := context.WithoutCancel(m.labelled(r)) // the client may have left
	start := m.clock.Now()
	_, err := baseStore(m.store).Settle(ctx, q.Key, q.Policy, h, actual)
	if err == nil && m.settle.estimate != nil {
		m.settle.estimate.add(actual)
	}
	ev.Outcome, ev.Cost, ev.Latency, ev.Err = Settled, actual, m.clock.Now().Sub(start), err
	if err != nil {
		m.log.log(ctx, slog.LevelError, "httplimit: settle failed; the request stays charged its estimate",
			slog.String("pattern", r.Pattern), slog.Any("error", err))
	}
	m.observe(r, ev)
}

// p95 is a route's running estimate: the 95th percentile of the last
// len(ring) costs settled, in bounded memory (1 KiB). It is recomputed on
// each settle by sorting a copy of the ring (128 numbers, about 2 µs),
// off the request's path to the store.
type p95 struct {
	mu   sync.Mutex
	ring [128]int64
	n    int   // costs recorded, at most len(ring)
	next int   // where the next cost goes
	est  int64 // the current estimate
}

// value returns the estimate: 1 until a cost has been settled.
func (e *p95) value() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		return 1
	}
	return e.est
}

// add records a settled cost and recomputes the estimate.
func (e *p95) add(cost int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ring[e.next] = cost
	e.next = (e.next + 1) % len(e.ring)
	e.n = min(e.n+1, len(e.ring))
	var sorted [len(e.ring)]int64
	s := sorted[:e.n]
	copy(s, e.ring[:e.n])
	slices.Sort(s)
	e.est = s[(len(s)*95+99)/100-1]
}
