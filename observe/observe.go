package observe

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/internal/obscache"
)

// The observer contract: what every entry point (httplimit, grpclimit, the
// rls server, a Limiter) and every component (hybrid's breaker, deny
// cache and token leases, redisstore's pipeline) reports, in one set of
// events, so that one Observer (a Prometheus or OpenTelemetry adapter, a
// log) sees them all.
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
//	s := observe.Wrap(fb, "redis", obs)                                     // decisions, latency
//	mw, _ := httplimit.New(httplimit.Config{Store: s})                      // labels: route, limit
//
// Wrap the outermost store: its decisions are the ones the caller acts
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

// The operations. The first five and OpHold decide; the others only change
// a bucket or a lease set, and are reported only when they fail.
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
	OpHold
	OpSettle
)

var opNames = [...]string{"", "take", "take_multi", "take_at_most", "reserve", "acquire_lease",
	"refund", "refund_multi", "cancel_reservation", "release_lease", "renew_lease",
	"hold", "settle"}

// String returns the operation's snake_case name, such as "take_multi".
func (op Op) String() string {
	if op != 0 && int(op) < len(opNames) {
		return opNames[op]
	}
	return "op(" + strconv.Itoa(int(op)) + ")"
}

// Decides reports whether op admits or refuses a request (Take, TakeMulti,
// TakeAtMost, Reserve, AcquireLease, Hold), as opposed to giving back or
// releasing what an earlier call took, or settling it.
func (op Op) Decides() bool { return op >= OpTake && op <= OpAcquireLease || op == OpHold }

// Decision is one store call as [Wrap] reports it: every call of an
// operation that decides, and every failed call of the others.
type Decision struct {
	// Op is the method called.
	Op Op
	// Outcome is what it decided.
	Outcome Outcome
	// Store is the name given to Wrap.
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
	// Latency is the time the store call took, when Timed. Wrap times
	// every call of a store whose calls take 10µs or more (a network
	// store: two clock readings are then below 0.5% of the call) and about
	// one call in 64 of a faster one (an in-process store, where timing
	// every call would cost as much as the call). Which calls are timed is
	// decided before each call begins, so it does not depend on how long
	// the call takes: the timed calls are an unbiased sample. (The draw is
	// at random for an Observer that receives every decision; for a
	// [DecisionCounter], the call that begins next after every 64th
	// decision of a label set and outcome.) So latency histograms are
	// exact for Redis and a sample for memstore; count decisions, not
	// timings.
	Latency time.Duration
	// Timed reports whether Latency was measured.
	Timed bool
	// Err is the store's error when Outcome is OutcomeError, else nil.
	// It may name a key: log it, never use it as a label.
	Err error
	// Counted reports that the decision is counted already, in the
	// [DecisionCounts] Wrap gave the [DecisionCounter] receiving it:
	// count it only when Counted is false. A DecisionCounter receives
	// only the decisions Wrap timed and the errors.
	Counted bool
}

// BreakerState is the state of a circuit breaker in front of a store, as
// hybrid.Fallback reports it.
type BreakerState uint8

// The breaker states (hybrid.Fallback.State reports them).
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

// LeaseBatch reports what a token-lease wrapper (hybrid.Leases) did with
// one key's batch in one call to its store, and what it admitted from the
// batch since the key's previous report: a grant (Taken tokens, a batch
// filled or topped up), a give-back (Returned, or Lost when the refund
// failed), or, for a batch spent to its last token, neither. Requests
// admitted from a batch cost no call and are no Decision of the store
// under the wrapper: Local counts them, reported when the batch is
// topped up or ends (within a Lifetime and a sweep of the admission).
type LeaseBatch struct {
	// Store is the wrapper's configured name.
	Store string
	// Taken is the tokens the store granted in this call, 0 for a
	// give-back (and for a grant of none, which is not reported).
	Taken int64
	// Returned is the tokens given back to the store; Lost, those whose
	// return failed (never admitted: the bucket refills them).
	Returned, Lost int64
	// Local is the requests admitted from the key's batch, without a
	// call, since the key's previous report.
	Local int64
}

// Observer receives the events of the observer contract. Every method is
// called on the goroutine of the call that caused the event, so keep it
// fast (count, do not block) and safe for simultaneous use. Methods may be
// added to Observer as the contract grows: embed [Funcs] in your own
// type to keep compiling, as it ignores the events you do not handle.
type Observer interface {
	// ObserveDecision receives each store call [Wrap] reports.
	ObserveDecision(ctx context.Context, d Decision)
	// ObserveBreaker receives each circuit-breaker transition.
	ObserveBreaker(c BreakerChange)
	// ObserveDenyCacheHit receives each request a deny cache refused.
	ObserveDenyCacheHit(ctx context.Context, h DenyCacheHit)
	// ObservePipelineBatch receives the size of each pipeline sent.
	ObservePipelineBatch(b PipelineBatch)
	// ObserveLeaseBatch receives each grant and give-back of a token
	// lease's batch.
	ObserveLeaseBatch(b LeaseBatch)
}

// Funcs is an [Observer] made of functions; a nil one ignores its
// events. The zero value ignores everything.
type Funcs struct {
	Decision      func(ctx context.Context, d Decision)
	Breaker       func(c BreakerChange)
	DenyCacheHit  func(ctx context.Context, h DenyCacheHit)
	PipelineBatch func(b PipelineBatch)
	LeaseBatch    func(b LeaseBatch)
}

// ObserveDecision calls f.Decision, if set.
func (f Funcs) ObserveDecision(ctx context.Context, d Decision) {
	if f.Decision != nil {
		f.Decision(ctx, d)
	}
}

// ObserveBreaker calls f.Breaker, if set.
func (f Funcs) ObserveBreaker(c BreakerChange) {
	if f.Breaker != nil {
		f.Breaker(c)
	}
}

// ObserveDenyCacheHit calls f.DenyCacheHit, if set.
func (f Funcs) ObserveDenyCacheHit(ctx context.Context, h DenyCacheHit) {
	if f.DenyCacheHit != nil {
		f.DenyCacheHit(ctx, h)
	}
}

// ObservePipelineBatch calls f.PipelineBatch, if set.
func (f Funcs) ObservePipelineBatch(b PipelineBatch) {
	if f.PipelineBatch != nil {
		f.PipelineBatch(b)
	}
}

// ObserveLeaseBatch calls f.LeaseBatch, if set.
func (f Funcs) ObserveLeaseBatch(b LeaseBatch) {
	if f.LeaseBatch != nil {
		f.LeaseBatch(b)
	}
}

// DecisionCounter is an [Observer] that reads how many decisions each
// observed store made, when it exports them (a Prometheus scrape, an
// OpenTelemetry collection), instead of counting each one as it comes:
// Wrap then counts in the store's wrapper, one atomic addition per
// call, and calls ObserveDecision only for the calls it timed and for
// errors, with Decision.Counted set. That keeps the cost of an observed
// memstore Take within a few percent, where an interface call and a
// metrics library's counter per decision would cost a third of the call.
type DecisionCounter interface {
	Observer
	// CountDecisions is called by Wrap, once for each store it
	// wraps for this Observer, with the counts it keeps for that
	// store. Keep c and read it whenever the counts are exported: they
	// only grow.
	CountDecisions(c *DecisionCounts)
}

// DecisionCounts counts decisions by store, policy, route and outcome.
// Wrap keeps one for each store it wraps for a [DecisionCounter]; an
// adapter may keep its own for the decisions it receives uncounted. The
// zero value is ready to use. It is safe for simultaneous use, and Add
// allocates nothing once a label set has been counted.
type DecisionCounts struct {
	c obscache.Cache[[outcomes]atomic.Uint64] // by Outcome
	localCounts
}

// outcomes bounds the Outcome values, as an array index.
const outcomes = int(OutcomeError) + 1

// Tally is the count of one label set of [DecisionCounts].
type Tally struct {
	Store, Policy, Route string
	// N is the number of decisions of each outcome, indexed by Outcome:
	// N[OutcomeDenied] are the denials. N[0] is always 0.
	N [outcomes]uint64
}

// Add counts d under its store, policy, route and outcome.
func (c *DecisionCounts) Add(d Decision) {
	if d.Outcome != 0 && int(d.Outcome) < outcomes {
		c.c.Get(obscache.Key{Policy: d.Policy, Route: d.Route, Store: d.Store})[d.Outcome].Add(1)
	}
}

// Each calls f with the tally of each label set counted so far, in no
// order. A label set is counted from its first decision on, with every
// outcome, at 0 for those it has not had: so a ratio such as the share
// of denials reads 0, not nothing, before the first denial.
func (c *DecisionCounts) Each(f func(t Tally)) {
	local := c.sums()
	c.c.Range(func(k obscache.Key, n *[outcomes]atomic.Uint64) {
		t := Tally{Store: k.Store, Policy: k.Policy, Route: k.Route}
		for i := range n {
			t.N[i] = n[i].Load()
		}
		if add, ok := local[n]; ok {
			for i, k := range add {
				t.N[i] += k
			}
		}
		f(t)
	})
}

// SumTallies returns the tallies of every c, summed by label set, in no
// order: the series of a decisions metric, where stores that share a
// name share their series.
func SumTallies(c ...*DecisionCounts) []Tally {
	at := map[obscache.Key]int{}
	var sums []Tally
	for _, dc := range c {
		dc.Each(func(t Tally) {
			k := obscache.Key{Policy: t.Policy, Route: t.Route, Store: t.Store}
			i, ok := at[k]
			if !ok {
				i = len(sums)
				at[k] = i
				sums = append(sums, Tally{Store: t.Store, Policy: t.Policy, Route: t.Route})
			}
			for j, n := range t.N {
				sums[i].N[j] += n
			}
		})
	}
	return sums
}

// Labels name a store call for observers: what only the entry point knows.
// An entry point puts them in the call's context with [WithLabels]; the
// store below never sees them, [Wrap] and the components copy them into
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

func (c *labelsCtx) String() string {
	return "observe.WithLabels(" + c.l.Route + ", " + c.l.Policy + ")"
}

// WithLabels returns ctx carrying l, for the observers of the calls made
// with it. It costs one small allocation: entry points skip it when
// [Active] is false.
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
	if c, ok := ctx.(*labelsCtx); ok { // the entry point's context, as it passes it
		return &c.l
	}
	return labelsIn(ctx)
}

// labelsIn looks for Labels in ctx's values. It is not inlined, so that
// labelsOf is.
//
//go:noinline
func labelsIn(ctx context.Context) *Labels {
	l, _ := ctx.Value(labelsKey{}).(*Labels)
	return l
}
