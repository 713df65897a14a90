package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Middleware limits the requests of the handlers it wraps. Build one with
// [New], derive per-route variants with [Middleware.With], and wrap
// handlers with [Middleware.Handler]. A Middleware is immutable and safe for
// simultaneous use by multiple goroutines.
//
// For each request it: skips it if the skip predicate says so; finds each
// limit's key and policy (or asks the limit's Resolve for it), and
// the cost; takes each shadow limit's bucket on its own (see
// Limit.Shadow); with a [Concurrency] limit,
// takes a lease first (refused: 429 at once, no bucket charged; admitted:
// the lease is given back when the request is done); takes the cost from
// every limit's bucket (atomically where the store allows); then either
// serves the request with the rate-limit headers set, or answers 429 Too Many
// Requests with the headers, Retry-After (whole seconds, rounded up, never
// 0) and the Denied handler's body. A store error is never a 429: the
// route's FailMode decides (serve, or 503 with Retry-After), and the error
// is logged at most once per Config.LogEvery; so does a Resolve that
// fails. A request without a key gets 400, one that does not fit the
// configuration 500 (see Config.Error).
type Middleware struct {
	cfg       Config // as configured, defaults not filled in: With starts from it
	store     store.Store
	limits    []limit
	labels    observe.Labels                 // of every store call, but the route
	conc      *limit                         // the Concurrency limit, or nil
	inflight  *ratebucket.ConcurrencyLimiter // its leases, when conc is set
	key       KeyFunc
	cost      func(*http.Request) int64 // nil: fixedCost
	fixedCost int64
	skip      func(*http.Request) bool
	fail      FailMode
	headers   Headers
	denied    func(http.ResponseWriter, *http.Request, Decision)
	onError   func(http.ResponseWriter, *http.Request, error)
	observer  func(context.Context, Event)
	chargeIf  func(status int) bool
	refunder  store.Store // store's, when chargeIf is set
	delay     time.Duration
	reserver  *ratebucket.Limiter // of the single limit, when delay is set
	settle    *settler            // when Config.Settle is set
	shadow    bool                // some limit is a shadow limit
	leases    *hybrid.Leases      // over the Store, when Config.Leases is set; shared by routes
	log       *logThrottle
	clock     store.Clock
}

// New returns a Middleware for cfg, or an error wrapping [ErrInvalidConfig]
// that says what is wrong. It checks the whole Config before it builds
// anything (the default store included).
func New(cfg Config) (*Middleware, error) { return build(cfg, nil) }

// With returns the middleware of one route: m's Config with the fields that
// route sets replacing m's (fields left zero keep m's):
//
//	upload, err := mw.With(httplimit.Config{Cost: 10})
//	login, err := mw.With(httplimit.Config{Fail: httplimit.FailClosed(time.Second)})
//	mux.Handle("POST /upload", upload.Handler(uploadHandler))
//
// A route shares m's Store, Prefix, Clock, Leases and log throttle, so a
// client's tokens are shared across the routes of one limit; a route that
// sets Store, Prefix, Clock, Logger, LogEvery or Leases is refused (build another
// Middleware with New for that). Setting Cost clears an inherited CostBy.
// Errors wrap [ErrInvalidConfig]; a cost that cannot fit a capacity also
// wraps algo.ErrCostExceedsCapacity.
func (m *Middleware) With(route Config) (*Middleware, error) {
	if route.Store != nil || route.Prefix != "" || route.Clock != nil || route.Logger != nil || route.LogEvery != 0 || route.Leases != nil {
		return nil, fmt.Errorf("%w: With: a route shares its parent's Store, Prefix, Clock, Logger, LogEvery and Leases; use New for others", ErrInvalidConfig)
	}
	c := m.cfg
	if len(route.Limits) > 0 {
		c.Limits = route.Limits
	}
	if route.Cost != 0 {
		c.Cost, c.CostBy = route.Cost, nil
	}
	set(&c.Key, route.Key)
	set(&c.CostBy, route.CostBy)
	set(&c.Skip, route.Skip)
	set(&c.Fail, route.Fail)
	set(&c.Headers, route.Headers)
	set(&c.Denied, route.Denied)
	set(&c.Error, route.Error)
	set(&c.Observer, route.Observer)
	set(&c.Concurrency, route.Concurrency)
	set(&c.ChargeIf, route.ChargeIf)
	set(&c.Delay, route.Delay)
	set(&c.Settle, route.Settle)
	set(&c.SettleCost, route.SettleCost)
	set(&c.SettleTTL, route.SettleTTL)
	return build(c, m)
}

// set replaces *dst with v unless v is its type's zero value.
func set[T any](dst *T, v T) {
	if !reflect.ValueOf(&v).Elem().IsZero() {
		*dst = v
	}
}

// build checks cfg and returns its Middleware; a route (parent not nil)
// shares the parent's store and log throttle.
func build(cfg Config, parent *Middleware) (*Middleware, error) {
	m := &Middleware{
		cfg: cfg, key: cfg.Key, cost: cfg.CostBy, fixedCost: cfg.Cost, skip: cfg.Skip, fail: cfg.Fail,
		denied: cfg.Denied, onError: cfg.Error, observer: cfg.Observer, clock: cfg.Clock, chargeIf: cfg.ChargeIf,
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = defaultPrefix
	}
	if m.key == nil {
		m.key = IP
	}
	if m.fail == nil {
		m.fail = FailOpen
	}
	if m.denied == nil {
		m.denied = jsonDenied
	}
	if m.onError == nil {
		m.onError = defaultError
	}
	if m.clock == nil {
		m.clock = realClock{}
	}
	if m.fixedCost == 0 {
		m.fixedCost = 1
	}
	every := cfg.LogEvery
	if every == 0 {
		every = 10 * time.Second
	}
	if err := algo.Per(1, every).Burst(1).Validate(); err != nil {
		return nil, fmt.Errorf("%w: LogEvery %v: %w", ErrInvalidConfig, every, err)
	}
	if err := checkHeaders(cfg.Headers, &m.headers); err != nil {
		return nil, err
	}
	var err error
	if m.limits, err = newLimits(cfg.Limits, prefix, m.key); err != nil {
		return nil, err
	}
	if err := checkResolve(m.limits, cfg.Delay); err != nil {
		return nil, err
	}
	if err := checkDelayPolicies(m.limits, cfg.Delay); err != nil {
		return nil, err
	}
	if err := m.checkShadow(cfg.Concurrency, cfg.Delay); err != nil {
		return nil, err
	}
	m.labels = limitLabels(m.limits)
	if m.cost == nil {
		if err := checkCost(m.limits, m.fixedCost); err != nil {
			return nil, err
		}
	}
	if m.conc, err = newConcurrency(cfg.Concurrency, prefix, m.key); err != nil {
		return nil, err
	}
	if err := checkLeases(cfg, parent); err != nil {
		return nil, err
	}
	// Valid: now build what it needs.
	if parent != nil {
		m.store, m.log, m.leases = parent.store, parent.log, parent.leases
	} else {
		logger := cfg.Logger
		if logger == nil {
			logger = slog.Default()
		}
		m.log = newLogThrottle(logger, m.clock, every)
		if m.store = cfg.Store; m.store == nil {
			if m.store, err = defaultStore(cfg.Clock); err != nil {
				return nil, err
			}
		}
		if cfg.Leases != nil {
			if m.leases, err = hybrid.NewLeases(m.store, *cfg.Leases); err != nil {
				return nil, fmt.Errorf("%w: Leases: %w", ErrInvalidConfig, err)
			}
			m.store = m.leases
		}
	}
	if err := m.finish(cfg); err != nil {
		if parent == nil && m.leases != nil {
			m.leases.Close() // its goroutine, which nobody else could stop
		}
		return nil, err
	}
	return m, nil
}

// finish builds what cfg needs over m's store, the last step of build.
func (m *Middleware) finish(cfg Config) error {
	var err error
	if err := m.checkChargeIf(); err != nil {
		return err
	}
	if err := m.checkDelay(cfg.Delay, cfg.Clock); err != nil {
		return err
	}
	if err := m.shadowLimiters(); err != nil {
		return err
	}
	if err := m.checkSettle(cfg); err != nil {
		return err
	}
	if m.conc != nil {
		if m.inflight, err = newInFlight(m.store, m.conc, cfg.Concurrency.Policy); err != nil {
			return err
		}
	}
	return nil
}

// checkLeases refuses a Config whose Leases cannot be honoured: see
// Config.Leases.
func checkLeases(cfg Config, parent *Middleware) error {
	switch leased := cfg.Leases != nil || parent != nil && parent.leases != nil; {
	case cfg.Leases != nil && cfg.Store == nil:
		return fmt.Errorf("%w: Leases need a Store shared by the fleet; the default in-process store has no calls to save", ErrInvalidConfig)
	case leased && cfg.Delay > 0:
		return fmt.Errorf("%w: Delay %v with Leases: every request of a Delay route is a reservation, which gives a leased batch back; give the route a Middleware of its own", ErrInvalidConfig, cfg.Delay)
	}
	return nil
}

// Close gives back the tokens of the batches Config.Leases holds and stops
// its goroutine: call it once every route of the Middleware is done serving
// (routes made by With share the Leases, and Close on any of them closes
// it). Requests served after Close fail as the store's calls do
// (store.ErrClosed, to the route's FailMode). It does not close
// Config.Store. Without Leases it does nothing. It returns nil, and is
// idempotent.
func (m *Middleware) Close() error {
	if m.leases != nil {
		return m.leases.Close()
	}
	return nil
}

// Handler wraps next: the standard func(http.Handler) http.Handler shape,
// so m.Handler plugs into net/http's ServeMux, chi's Use, gorilla/mux's Use
// and any router taking such middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// Keys returns the bucket keys r is charged to, one per limit in order, as
// the store sees them (a store may add its own prefix, as redisstore's
// "rb:" does): for inspecting or resetting a client's buckets with the
// store's tools. It charges nothing. The error is the one the request would
// get instead of a decision, such as one wrapping [ErrNoKey].
func (m *Middleware) Keys(r *http.Request) ([]string, error) {
	_, takes, err := m.plan(r, 0)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(takes))
	for i, t := range takes {
		keys[i] = t.Key
	}
	return keys, nil
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ev := Event{Pattern: r.Pattern}
	if m.skip != nil && m.skip(r) {
		m.pass(w, r, next, ev, Skipped)
		return
	}
	ev.Cost = m.fixedCost
	if m.cost != nil {
		ev.Cost = m.cost(r)
	}
	if m.settle != nil && m.settle.estimate != nil {
		ev.Cost = m.settle.estimate.value()
	}
	d, takes, err := m.plan(r, ev.Cost)
	if err != nil {
		if errors.Is(err, ratebucket.ErrResolve) {
			m.unresolved(w, r, next, ev, err)
		} else {
			m.invalid(w, r, ev, err)
		}
		return
	}
	if m.shadow {
		if takes = m.shadowTakes(r, &d, takes, &ev); len(takes) == 0 {
			m.shadowOnly(w, r, next, ev, d)
			return
		}
	}
	start := m.clock.Now()
	lease, err := m.acquire(r, &d) // first: a request refused here charges no bucket
	defer m.release(r, lease)      // after the handler returns or panics, or after a refusal
	var mr store.MultiResult
	var inOrder bool
	var rsv ratebucket.Reservation // with Delay
	var held algo.Hold             // with Settle
	switch {
	case err != nil || m.conc != nil && !lease.Allowed:
	case m.reserver != nil:
		mr, rsv, err = m.reserve(m.labelled(r), takes[0])
	case m.settle != nil:
		if m.settle.estimate != nil { // the running estimate, within the resolved capacity
			takes[0].Cost = min(takes[0].Cost, takes[0].Policy.Capacity())
		}
		mr, held, err = m.holdCost(m.labelled(r), takes[0])
	default:
		mr, inOrder, err = m.take(m.labelled(r), takes)
	}
	if err != nil && isInputError(err) {
		ev.Latency = m.clock.Now().Sub(start)
		m.invalid(w, r, ev, err)
		return
	}
	if err != nil {
		v := m.fail(Failure{Request: r, Err: err, Takes: takes})
		ev.Latency, ev.Err = m.clock.Now().Sub(start), err
		if r.Context().Err() == nil { // a client that left is not an outage
			m.log.log(r.Context(), slog.LevelError, "httplimit: store failed", slog.String("pattern", r.Pattern),
				slog.Bool("served", v.Result == nil && v.Serve), slog.Any("error", err))
		}
		if v.Result == nil || len(v.Result.Results) != len(takes) {
			m.failed(w, r, next, ev, v)
			return
		}
		mr, inOrder, ev.Fallback = *v.Result, false, true
	} else {
		ev.Latency = m.clock.Now().Sub(start)
		if m.conc != nil && !lease.Allowed {
			m.deniedInFlight(w, r, ev, d)
			return
		}
	}
	decide(&d, mr.Results, takes, inOrder)
	dl := d.Limits[d.Decider]
	ev.Limit, ev.Tier, ev.Class = dl.Name, dl.Tier, dl.Class
	if !m.headers.has(NoHeaders) {
		writeHeaders(w.Header(), m.headers, d, m.clock.Now())
	}
	if d.Allowed && !m.hold(r, &ev, rsv) {
		return // the client left while its request was held
	}
	if d.Allowed && m.settle != nil && !ev.Fallback {
		ev.Outcome = Allowed
		m.observe(r, ev)
		m.serveSettled(w, r, next, ev, takes[0], held)
		return
	}
	if d.Allowed && m.chargeIf != nil && !ev.Fallback {
		ev.Outcome = Allowed
		m.observe(r, ev)
		m.serveCharged(w, r, next, ev, takes)
		return
	}
	if d.Allowed {
		m.pass(w, r, next, ev, Allowed)
		return
	}
	ev.Outcome = Denied
	m.observe(r, ev)
	w.Header().Set("Retry-After", itoa(retryAfterSeconds(d.RetryAfter)))
	m.denied(w, r, d)
}

// plan finds each limit's policy and key for r.
func (m *Middleware) plan(r *http.Request, cost int64) (Decision, []store.Request, error) {
	d := Decision{Limits: make([]LimitResult, len(m.limits))}
	takes := make([]store.Request, len(m.limits))
	for i := range m.limits {
		var err error
		if d.Limits[i], takes[i], err = m.limits[i].request(r, cost); err != nil {
			return d, nil, err
		}
	}
	return d, takes, nil
}

// keyOf returns l's key for r, or why it has none.
func (l *limit) keyOf(r *http.Request) (Key, error) {
	k, err := l.key(r)
	switch {
	case err != nil:
		return k, fmt.Errorf("limit %q: %w", l.name, err)
	case k.ID == "":
		return k, fmt.Errorf("%w: limit %q: KeyFunc returned an empty ID", ErrNoKey, l.name)
	case !validName(k.Class):
		return k, fmt.Errorf("%w: limit %q: key class %q is not 1-32 bytes of [A-Za-z0-9_.-]", ErrInvalidConfig, l.name, k.Class)
	}
	return k, nil
}

// take asks the store for every limit: one Take, an atomic TakeMulti, or
// (across Cluster slots: store.ErrNotTogether) Takes in order.
//
// inOrder reports the last: then a refused request's results reflect the
// charges made before the refusal, where TakeMulti charges nothing.
func (m *Middleware) take(ctx context.Context, reqs []store.Request) (mr store.MultiResult, inOrder bool, err error) {
	if len(reqs) == 1 {
		res, err := m.store.Take(ctx, reqs[0])
		return store.MultiResult{Allowed: res.Allowed, Results: []algo.Result{res}}, false, err
	}
	mr, err = m.store.TakeMulti(ctx, reqs)
	if !errors.Is(err, store.ErrNotTogether) {
		return mr, false, err
	}
	// In order, a later limit's bad cost would come after the earlier
	// charges: check them all first, as the store would, so a refused
	// request charges nothing.
	if err := store.CheckRequests(reqs, store.DefaultMaxKeyLen); err != nil {
		return store.MultiResult{}, false, fmt.Errorf("httplimit: %w", err)
	}
	mr = store.MultiResult{Allowed: true, Results: make([]algo.Result, len(reqs))}
	for i, q := range reqs {
		cost := q.Cost
		if !mr.Allowed {
			cost = 0 // refused already: only read the rest, for the headers
		}
		res, err := m.store.Take(limitContext(ctx, i), store.Request{Key: q.Key, Policy: q.Policy, Cost: cost})
		if err != nil {
			return store.MultiResult{}, true, err
		}
		mr.Results[i] = res
		mr.Allowed = mr.Allowed && res.Allowed
	}
	return mr, true, nil
}

// decide fills d from the store's results for takes. When a request was
// refused with nothing charged (inOrder false), TakeMulti reports the
// limits that would have admitted it as if charged; decide shows them as
// they are (algo.TokenBucket.Uncharged: cost more tokens left, and the
// reset sooner by the cost's refill time, late by under 1µs, never early).
func decide(d *Decision, results []algo.Result, takes []store.Request, inOrder bool) {
	refused := slices.ContainsFunc(results, func(r algo.Result) bool { return !r.Allowed })
	d.Allowed, d.Decider = true, 0
	for i, res := range results {
		if refused && !inOrder && res.Allowed && takes[i].Cost > 0 {
			res = algo.TokenBucket{}.Uncharged(takes[i].Policy, res, takes[i].Cost)
		}
		d.Limits[i].Result = res
		best := d.Limits[d.Decider].Result
		switch {
		case !res.Allowed && (d.Allowed || res.RetryAfter > best.RetryAfter):
			d.Allowed, d.Decider, d.RetryAfter = false, i, res.RetryAfter
		case d.Allowed && closer(res, takes[i].Cost, best, takes[d.Decider].Cost):
			d.Decider = i
		}
	}
}

// closer reports whether the admitted result a, of a request of cost ca,
// is closer to refusing than b, of cost cb: the limit that admits fewer
// more requests of its cost now, or as many and is longer until full
// again (a daily quota before a burst limit that refills in seconds).
func closer(a algo.Result, ca int64, b algo.Result, cb int64) bool {
	na, nb := a.Remaining/max(ca, 1), b.Remaining/max(cb, 1)
	return na < nb || na == nb && a.ResetAfter > b.ResetAfter
}

// isInputError reports an error that is about the request, not the store:
// the same call would fail again (store.IsInputError, or a key the route's
// KeyFunc cannot make: ErrNoKey, a bad class). Such a request is Invalid
// (500), never served by the FailMode as during an outage, nor charged to
// its fallback. New refuses every option a route's limits cannot honour, so
// only a store's own configuration (a smaller MaxKeyLen, a window
// algorithm) or a closed store gives one.
func isInputError(err error) bool {
	return store.IsInputError(err) || errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidConfig)
}

func (m *Middleware) invalid(w http.ResponseWriter, r *http.Request, ev Event, err error) {
	ev.Outcome, ev.Err = Invalid, err
	m.observe(r, ev)
	if !errors.Is(err, ErrNoKey) {
		m.log.log(r.Context(), slog.LevelError, "httplimit: request does not fit the configuration",
			slog.String("pattern", r.Pattern), slog.Any("error", err))
	}
	m.onError(w, r, err)
}

func defaultError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := http.StatusInternalServerError, "rate_limit_misconfigured"
	if errors.Is(err, ErrNoKey) {
		status, code = http.StatusBadRequest, "rate_limit_key_missing"
	}
	writeJSON(w, "application/json", status, struct {
		Error string `json:"error"`
	}{code})
}

// pass reports ev with outcome o and serves the request.
func (m *Middleware) pass(w http.ResponseWriter, r *http.Request, next http.Handler, ev Event, o Outcome) {
	ev.Outcome = o
	m.observe(r, ev)
	next.ServeHTTP(w, r)
}

func (m *Middleware) observe(r *http.Request, ev Event) {
	if m.observer != nil {
		m.observer(r.Context(), ev)
	}
}

// defaultStore is the store of a Config without one: an in-process memstore
// on the Config's clock (nil: the real one). It starts no goroutine, so it
// needs no Close.
func defaultStore(clk store.Clock) (store.Store, error) {
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		return nil, fmt.Errorf("httplimit: default store: %w", err)
	}
	return s, nil
}
