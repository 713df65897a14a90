package store

import (
	"context"
	"io"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// The observer contract: what every entry point (httplimit, grpclimit, the
// rls server, a Limiter) and every component (hybrid's breaker and deny
// cache, redisstore's pipeline) reports, in one set of events, so that one
// Observer (a Prometheus or OpenTelemetry adapter, a log) sees them all.
//
// The events carry labels of bounded cardinality only, by construction:
// names from configuration (a store's, a policy's, a route pattern), fixed
// words (an Outcome, an Op, a breaker state) and numbers. No event carries
// a bucket key, a client address or a user id, so every field but Err and
// the numbers may become a metric label as it is.
//
// Wiring, for a fleet on Redis with the hybrid wrappers:
//
//	obs, _ := promobserver.New(reg) // contrib/prometheus; any Observer
//	rs, _ := redisstore.New(rdb, redisstore.Config{Observer: obs})          // pipeline batch sizes
//	dc, _ := hybrid.NewDenyCache(rs, hybrid.DenyCacheConfig{Observer: obs}) // deny-cache hits
//	fb, _ := hybrid.NewFallback(dc, local, hybrid.FallbackConfig{Observer: obs}) // breaker changes
//	s := store.Observe(fb, "redis", obs)                                   // decisions, latency
//	mw, _ := httplimit.New(httplimit.Config{Store: s})                     // labels: route, limit
//
// Observe the outermost store: its decisions are the ones the caller acts
// on, fallback answers included.

// Outcome is what a store call decided.
type Outcome uint8

// The outcomes of a [Decision].
const (
	// OutcomeAllowed: the request was admitted (a Take, a reservation, a
	// grant of at least one token, a lease).
	OutcomeAllowed Outcome = iota + 1
	// OutcomeDenied: the request was refused.
	OutcomeDenied
	// OutcomeShadowDenied: a shadow limit refused the request (see
	// [Labels].Shadow); the entry point admits it anyway.
	OutcomeShadowDenied
	// OutcomeError: no decision was made; Decision.Err says why.
	OutcomeError
)

var outcomeNames = [...]string{"", "allowed", "denied", "shadow_denied", "error"}

// String returns the outcome's name as a metric label: "allowed",
// "denied", "shadow_denied" or "error".
func (o Outcome) String() string {
	if o != 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Op names the store method a [Decision] reports.
type Op uint8

// The operations. The first five decide; the others only change a bucket
// or a lease set, and are reported only when they fail.
const (
	OpTake Op = iota + 1
	OpTakeMulti
	OpTakeAtMost
	OpReserve
	OpAcquireLease
	OpRefund
	OpRefundMulti
	OpCancelReservation
	OpReleaseLease
	OpRenewLease
)

var opNames = [...]string{"", "take", "take_multi", "take_at_most", "reserve", "acquire_lease",
	"refund", "refund_multi", "cancel_reservation", "release_lease", "renew_lease"}

// String returns the operation's snake_case name, such as "take_multi".
func (op Op) String() string {
	if op != 0 && int(op) < len(opNames) {
		return opNames[op]
	}
	return "op(" + strconv.Itoa(int(op)) + ")"
}

// Decides reports whether op admits or refuses a request (Take, TakeMulti,
// TakeAtMost, Reserve, AcquireLease), as opposed to giving back or
// releasing what an earlier call took.
func (op Op) Decides() bool { return op >= OpTake && op <= OpAcquireLease }

// Decision is one store call as [Observe] reports it: every call of an
// operation that decides, and every failed call of the others.
type Decision struct {
	// Op is the method called.
	Op Op
	// Outcome is what it decided.
	Outcome Outcome
	// Store is the name given to Observe.
	Store string
	// Policy names the policy that decided, from the call's [Labels]: for
	// a multi-limit call, the request that denied (MultiResult.Denied),
	// or, when all admitted, the one with the fewest tokens left, the
	// closest to denying; the first when the call failed. Empty when the
	// caller named none.
	Policy string
	// Route is the call's route from its Labels (an HTTP route pattern, a
	// gRPC method, an rls domain), or empty.
	Route string
	// Cost is the tokens asked of the policy that decided (1 for a
	// lease).
	Cost int64
	// Latency is the time the store call took, when Timed. Observe times
	// every call of a store whose calls take 10µs or more (a network
	// store: two clock readings are then below 0.5% of the call) and one
	// call in 64, at random, of a faster one (an in-process store, where
	// timing every call would cost as much as the call). So latency
	// histograms are exact for Redis and a uniform sample for memstore;
	// count decisions, not timings.
	Latency time.Duration
	// Timed reports whether Latency was measured.
	Timed bool
	// Err is the store's error when Outcome is OutcomeError, else nil.
	// It may name a key: log it, never use it as a label.
	Err error
}

// BreakerState is the state of a circuit breaker in front of a store, as
// hybrid.Fallback reports it.
type BreakerState uint8

// The breaker states, numbered as hybrid.State.
const (
	// BreakerClosed: calls go to the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the store failed; calls are answered without it.
	BreakerOpen
	// BreakerHalfOpen: a few probe calls test the store.
	BreakerHalfOpen
)

// BreakerStates lists every state, for adapters that export one series
// per state.
var BreakerStates = [...]BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen}

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "breaker(" + strconv.Itoa(int(s)) + ")"
}

// BreakerChange reports a circuit breaker's transition.
type BreakerChange struct {
	// Store names the store behind the breaker (the component's
	// configured name).
	Store    string
	From, To BreakerState
	// Err is the failure that opened the breaker, or nil. Never a label.
	Err error
}

// DenyCacheHit reports a request a deny cache refused without asking its
// store, because the store's last answer proves the store would refuse it.
type DenyCacheHit struct {
	// Store is the deny cache's configured name.
	Store string
	// Policy and Route are the call's, from its [Labels], as in Decision.
	Policy, Route string
}

// PipelineBatch reports one pipeline a store sent: Size commands in one
// round trip.
type PipelineBatch struct {
	// Store is the store's configured name.
	Store string
	Size  int
}

// Observer receives the events of the observer contract. Every method is
// called on the goroutine of the call that caused the event, so keep it
// fast (count, do not block) and safe for simultaneous use. Methods may be
// added to Observer as the contract grows: embed [ObserverFuncs] in your own
// type to keep compiling, as it ignores the events you do not handle.
type Observer interface {
	// ObserveDecision receives each store call [Observe] reports.
	ObserveDecision(ctx context.Context, d Decision)
	// ObserveBreaker receives each circuit-breaker transition.
	ObserveBreaker(c BreakerChange)
	// ObserveDenyCacheHit receives each request a deny cache refused.
	ObserveDenyCacheHit(ctx context.Context, h DenyCacheHit)
	// ObservePipelineBatch receives the size of each pipeline sent.
	ObservePipelineBatch(b PipelineBatch)
}

// ObserverFuncs is an [Observer] made of functions; a nil one ignores its
// events. The zero value ignores everything.
type ObserverFuncs struct {
	Decision      func(ctx context.Context, d Decision)
	Breaker       func(c BreakerChange)
	DenyCacheHit  func(ctx context.Context, h DenyCacheHit)
	PipelineBatch func(b PipelineBatch)
}

// ObserveDecision calls f.Decision, if set.
func (f ObserverFuncs) ObserveDecision(ctx context.Context, d Decision) {
	if f.Decision != nil {
		f.Decision(ctx, d)
	}
}

// ObserveBreaker calls f.Breaker, if set.
func (f ObserverFuncs) ObserveBreaker(c BreakerChange) {
	if f.Breaker != nil {
		f.Breaker(c)
	}
}

// ObserveDenyCacheHit calls f.DenyCacheHit, if set.
func (f ObserverFuncs) ObserveDenyCacheHit(ctx context.Context, h DenyCacheHit) {
	if f.DenyCacheHit != nil {
		f.DenyCacheHit(ctx, h)
	}
}

// ObservePipelineBatch calls f.PipelineBatch, if set.
func (f ObserverFuncs) ObservePipelineBatch(b PipelineBatch) {
	if f.PipelineBatch != nil {
		f.PipelineBatch(b)
	}
}

// Labels name a store call for observers: what only the entry point knows.
// An entry point puts them in the call's context with [WithLabels]; the
// store below never sees them, [Observe] and the components copy them into
// their events. Every field must come from configuration (a route pattern,
// a limit's name), never from the request: that is what keeps the labels
// of bounded cardinality.
type Labels struct {
	// Route names where the call came from: an HTTP route pattern
	// ("GET /api/feed"), a gRPC full method, an rls domain.
	Route string
	// Policy names the policy of a single call (a limit's name).
	Policy string
	// Policies names each request of a multi-limit call, in order; where
	// it is shorter than the call, Policy names the rest.
	Policies []string
	// Shadow marks a call made for a shadow limit: its denials are
	// reported as OutcomeShadowDenied, since the entry point admits the
	// request anyway. Make a shadow limit's call apart from the enforced
	// ones.
	Shadow bool
}

// policy returns the name of request i of the call.
func (l *Labels) policy(i int) string {
	if i >= 0 && i < len(l.Policies) {
		return l.Policies[i]
	}
	return l.Policy
}

type labelsKey struct{}

// labelsCtx carries Labels in one allocation: Value hands out a pointer
// into it, so reading them allocates nothing.
type labelsCtx struct {
	context.Context
	l Labels
}

func (c *labelsCtx) Value(key any) any {
	if _, ok := key.(labelsKey); ok {
		return &c.l
	}
	return c.Context.Value(key)
}

func (c *labelsCtx) String() string { return "store.WithLabels(" + c.l.Route + ", " + c.l.Policy + ")" }

// WithLabels returns ctx carrying l, for the observers of the calls made
// with it. It costs one small allocation: entry points skip it when
// [Observing] is false.
func WithLabels(ctx context.Context, l Labels) context.Context {
	return &labelsCtx{Context: ctx, l: l}
}

// LabelsFrom returns the Labels ctx carries, and whether it carries any.
func LabelsFrom(ctx context.Context) (Labels, bool) {
	if l := labelsOf(ctx); l != nil {
		return *l, true
	}
	return Labels{}, false
}

func labelsOf(ctx context.Context) *Labels {
	l, _ := ctx.Value(labelsKey{}).(*Labels)
	return l
}

// observing is set by the first Observe with an Observer.
var observing atomic.Bool

// Observing reports whether any store of this process has been given an
// Observer with [Observe]. Entry points check it before they build
// [Labels], so that a process that observes nothing pays nothing.
func Observing() bool { return observing.Load() }

// Timing: see Decision.Latency.
const (
	slowCall    = 10 * time.Microsecond
	sampleOneIn = 64 // a power of two
)

// epoch is the origin of the monotonic readings: time.Since(epoch) reads
// only the monotonic clock, half the cost of time.Now.
var epoch = time.Now()

// observed is the wrapper Observe returns, in a struct that shows exactly
// the optional interfaces of the store it wraps (see wrap).
type observed struct {
	s     Store
	multi MultiTaker
	rf    Refunder
	am    AtMostTaker
	rs    Reserver
	ls    Leaser
	cl    io.Closer
	name  string
	o     Observer
	every uint32      // sampleOneIn; 1 in tests that time every call
	slow  atomic.Bool // the last timed call took slowCall or more
}

// Observe returns s reporting its calls to o: a [Decision] for every call
// of an operation that decides (Take, TakeMulti, TakeAtMost, Reserve,
// AcquireLease) and for every call of the others that fails, under the
// store label name ("redis", "memory": a name from configuration). Labels
// in the call's context ([WithLabels]) name the policy and route.
//
// The result implements exactly the optional interfaces s implements
// (MultiTaker, Refunder, AtMostTaker, Reserver, Leaser, io.Closer), so
// code that checks for one sees what it would see on s, and it changes no
// answer, no error and no charge: Close closes s. Other methods of s's
// concrete type (redisstore's Reset, say) are not reachable through it:
// keep s for those.
//
// A nil o returns s itself: without an Observer the hot path is exactly
// s's. With one, a call costs what o spends, an interface call and, now
// and then, two readings of the monotonic clock (see Decision.Latency).
// Observe the outermost store (a hybrid.Fallback rather than what it
// wraps): the decisions it reports are the ones callers act on.
func Observe(s Store, name string, o Observer) Store {
	if s == nil || o == nil {
		return s
	}
	observing.Store(true)
	w := &observed{s: s, name: name, o: o, every: sampleOneIn}
	w.slow.Store(true) // the first call is timed, and tells which kind s is
	return w.wrap(w.optional())
}

// begin starts timing a call, if this one is timed: the monotonic reading,
// or -1.
func (w *observed) begin() time.Duration {
	if !w.slow.Load() && rand.Uint32()&(w.every-1) != 0 {
		return -1
	}
	return time.Since(epoch)
}

// report sends the event of a call of request i (-1: a single call),
// begun at t0 (see begin), that admitted or not, or failed with err. The
// event is built in place and passed once: it is large enough for copies
// to show beside a memstore Take.
func (w *observed) report(ctx context.Context, op Op, t0 time.Duration, i int, cost int64, allowed bool, err error) {
	var d Decision
	d.Op, d.Store, d.Cost = op, w.name, cost
	if t0 >= 0 {
		d.Latency, d.Timed = time.Since(epoch)-t0, true
		if slow := d.Latency >= slowCall; slow != w.slow.Load() {
			w.slow.Store(slow)
		}
	}
	l := labelsOf(ctx)
	if l != nil {
		d.Route, d.Policy = l.Route, l.policy(i)
	}
	switch {
	case err != nil:
		d.Outcome, d.Err = OutcomeError, err
	case allowed:
		d.Outcome = OutcomeAllowed
	case l != nil && l.Shadow:
		d.Outcome = OutcomeShadowDenied
	default:
		d.Outcome = OutcomeDenied
	}
	w.o.ObserveDecision(ctx, d)
}

// failed reports a failed call of an operation that does not decide.
func (w *observed) failed(ctx context.Context, op Op, t0 time.Duration, cost int64, err error) {
	if err != nil {
		w.report(ctx, op, t0, 0, cost, false, err)
	}
}

func (w *observed) Take(ctx context.Context, key string, p algo.Policy, cost int64) (algo.Result, error) {
	t0 := w.begin()
	res, err := w.s.Take(ctx, key, p, cost)
	w.report(ctx, OpTake, t0, -1, cost, res.Allowed, err)
	return res, err
}

func (w *observed) TakeMulti(ctx context.Context, reqs []Request) (MultiResult, error) {
	t0 := w.begin()
	mr, err := w.multi.TakeMulti(ctx, reqs)
	i := decider(mr)
	var cost int64
	if i < len(reqs) {
		cost = reqs[i].Cost
	}
	w.report(ctx, OpTakeMulti, t0, i, cost, mr.Allowed, err)
	return mr, err
}

// decider returns the index of the request that decided mr: the one that
// denied, or the one closest to denying; 0 for an error.
func decider(mr MultiResult) int {
	if !mr.Allowed && mr.Denied >= 0 {
		return mr.Denied
	}
	i := 0
	for j, r := range mr.Results {
		if r.Remaining < mr.Results[i].Remaining {
			i = j
		}
	}
	return i
}

func (w *observed) TakeAtMost(ctx context.Context, key string, p algo.Policy, n int64) (int64, algo.Result, error) {
	t0 := w.begin()
	g, res, err := w.am.TakeAtMost(ctx, key, p, n)
	w.report(ctx, OpTakeAtMost, t0, -1, n, res.Allowed, err)
	return g, res, err
}

func (w *observed) Reserve(ctx context.Context, key string, p algo.Policy, cost int64, maxWait time.Duration) (algo.Reservation, error) {
	t0 := w.begin()
	r, err := w.rs.Reserve(ctx, key, p, cost, maxWait)
	w.report(ctx, OpReserve, t0, -1, cost, r.Allowed, err)
	return r, err
}

func (w *observed) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	t0 := w.begin()
	res, err := w.ls.AcquireLease(ctx, key, p, id)
	w.report(ctx, OpAcquireLease, t0, -1, 1, res.Allowed, err)
	return res, err
}

func (w *observed) Refund(ctx context.Context, key string, p algo.Policy, n int64) (algo.Result, error) {
	t0 := w.begin()
	res, err := w.rf.Refund(ctx, key, p, n)
	w.failed(ctx, OpRefund, t0, n, err)
	return res, err
}

func (w *observed) RefundMulti(ctx context.Context, reqs []Request) ([]algo.Result, error) {
	t0 := w.begin()
	res, err := w.rf.RefundMulti(ctx, reqs)
	w.failed(ctx, OpRefundMulti, t0, 0, err)
	return res, err
}

func (w *observed) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	t0 := w.begin()
	ok, res, err := w.rs.CancelReservation(ctx, key, p, t)
	w.failed(ctx, OpCancelReservation, t0, 0, err)
	return ok, res, err
}

func (w *observed) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	t0 := w.begin()
	ok, err := w.ls.ReleaseLease(ctx, key, id)
	w.failed(ctx, OpReleaseLease, t0, 1, err)
	return ok, err
}

func (w *observed) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	t0 := w.begin()
	ok, err := w.ls.RenewLease(ctx, key, p, id)
	w.failed(ctx, OpRenewLease, t0, 1, err)
	return ok, err
}

// Close closes the wrapped store.
func (w *observed) Close() error { return w.cl.Close() }
