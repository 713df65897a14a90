package httplimit

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Failure describes a request the store could not decide: it returned an
// error (Redis down, a timeout, a corrupt bucket) instead of an answer.
type Failure struct {
	// Request is the request being limited.
	Request *http.Request
	// Err is the store's error.
	Err error
	// Takes are the buckets the request needed: full keys, policies and
	// costs, one per limit, in the order of the limits. A fallback can run
	// them on another store. Nil when Err wraps ratebucket.ErrResolve (a
	// Limit's Resolve failed: the policies are unknown).
	Takes []store.Request
}

// Verdict is a [FailMode]'s answer. Exactly one of its three outcomes
// applies: Result when non-nil, else Serve, else a 503.
type Verdict struct {
	// Result is a decision reached without the failed store (for
	// example by a local fallback store): the middleware applies it as it
	// would the store's answer, headers and 429 included. It must hold
	// one Result per Failure.Takes, meaning what a [store.Store]'s
	// answer means (a refusal charged nothing); otherwise it is ignored.
	Result *store.MultiResult
	// Serve passes the request on unlimited, without rate-limit headers.
	Serve bool
	// RetryAfter is sent with the 503 Service Unavailable, rounded up to
	// whole seconds, at least 1.
	RetryAfter time.Duration
}

// FailMode decides what a request gets when the store fails. The middleware
// logs the failure (see Config.Logger) and reports it to the Observer
// whatever the mode. Implementations must be safe for simultaneous use; a
// mode that falls back to another store should bound its own latency.
//
// Two modes are built in, [FailOpen] and [FailClosed]. A third, a local
// fallback that keeps limiting in-process while the shared store is down,
// is a FailMode returning a Verdict with a Result.
type FailMode func(f Failure) Verdict

// FailOpen serves requests unlimited while the store fails: an outage of
// the limiter is not an outage of the API. It is the default, and the
// article's choice. The window it opens for abuse lasts as long as the
// outage.
var FailOpen FailMode = func(Failure) Verdict { return Verdict{Serve: true} }

// FailClosed refuses requests while the store fails, with 503 Service
// Unavailable, Retry-After (retryAfter rounded up to whole seconds, at
// least 1) and the JSON body
//
//	{"error":"rate_limiter_unavailable","retry_after_ms":1000}
//
// Use it on routes where an unlimited attacker costs more than an outage:
// login, payment, password reset, sign-up.
func FailClosed(retryAfter time.Duration) FailMode {
	return func(Failure) Verdict { return Verdict{RetryAfter: retryAfter} }
}

// failed answers a request the limiter could not decide as v says, when
// v has no Result: served unlimited, or 503.
func (m *Middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, ev Event, v Verdict) {
	if v.Serve {
		m.pass(w, r, next, ev, FailedOpen)
		return
	}
	ev.Outcome = FailedClosed
	m.observe(r, ev)
	unavailable(w, v.RetryAfter)
}

// unavailable writes the FailClosed response.
func unavailable(w http.ResponseWriter, retryAfter time.Duration) {
	w.Header().Set("Retry-After", itoa(retryAfterSeconds(retryAfter)))
	writeJSON(w, "application/json", http.StatusServiceUnavailable, struct {
		Error        string `json:"error"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}{"rate_limiter_unavailable", retryAfterMillis(retryAfter)})
}

// logThrottle lets through at most one log record per interval (a token
// bucket of one, our own math), counting the ones it holds back, so a store
// outage under load writes a line every interval instead of one per
// request. It is safe for simultaneous use.
type logThrottle struct {
	logger *slog.Logger
	clock  store.Clock
	policy algo.Policy

	mu         sync.Mutex
	state      algo.State
	suppressed int64
}

func newLogThrottle(l *slog.Logger, c store.Clock, every time.Duration) *logThrottle {
	return &logThrottle{logger: l, clock: c, policy: algo.Per(1, every).Burst(1)}
}

// log writes msg with attrs unless a record was written less than the
// interval ago; the next record written says how many were dropped.
func (t *logThrottle) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if !t.logger.Enabled(ctx, level) {
		return
	}
	t.mu.Lock()
	now := max(0, t.clock.Now().UnixMicro())
	st, res, err := algo.TokenBucket{}.Take(t.policy, t.state, now, 1)
	if err == nil {
		t.state = st
	}
	if err == nil && !res.Allowed {
		t.suppressed++
		t.mu.Unlock()
		return
	}
	dropped := t.suppressed
	t.suppressed = 0
	t.mu.Unlock()
	if dropped > 0 {
		attrs = append(attrs, slog.Int64("suppressed", dropped))
	}
	t.logger.LogAttrs(ctx, level, msg, attrs...)
}

// Outcome is what happened to one request.
type Outcome uint8

// The outcomes of an [Event].
const (
	// Allowed: every limit admitted the request; it was served.
	Allowed Outcome = iota + 1
	// Denied: a limit refused the request; it got 429.
	Denied
	// Skipped: the skip predicate exempted the request; no store call.
	Skipped
	// FailedOpen: the store failed and the FailMode served the request.
	FailedOpen
	// FailedClosed: the store failed and the FailMode refused it (503).
	FailedClosed
	// Invalid: no decision could be asked for: the request had no key
	// (400) or the configuration did not fit it, such as a cost above a
	// capacity (500). Event.Err says which.
	Invalid
	// Refunded: the route's ChargeIf did not count the response of a
	// request admitted earlier (reported then as Allowed), and its tokens
	// were given back; Err, when set, is why the refund failed (the
	// request stays charged). It is a second Event for the request:
	// count requests by the other outcomes.
	Refunded
	// Cancelled: the route's Delay held the request, and its context
	// ended (the client left) before its time: it was not served, and its
	// reservation was cancelled. Event.Delay is the hold it was given,
	// Err the context's error.
	Cancelled
	// Settled: the route's Settle charged a request admitted earlier
	// (reported then as Allowed, with its estimate as Cost) the actual
	// cost its response reported, now in Cost; Err, when set, is why the
	// settle failed (the estimate stays charged). It is a second Event for
	// the request: count requests by the other outcomes.
	Settled
)

var outcomeNames = [...]string{"", "allowed", "denied", "skipped", "failed_open", "failed_closed", "invalid", "refunded", "cancelled", "settled"}

// String returns the outcome's lower-case name, such as "failed_open",
// ready for a metrics label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event describes one request the middleware handled, for Config.Observer.
// Metrics of the store calls come through the observer contract of package
// observe, as they do from every entry point: give the middleware a Store
// wrapped with observe.Wrap, and each decision reaches that
// observe.Observer labelled with the request's route pattern and the
// deciding limit's name (observe.Labels). Every field is of low
// cardinality except Latency and Err: no key IDs, user ids or addresses
// appear in it, so it can feed Prometheus labels or OpenTelemetry
// attributes as it is.
type Event struct {
	// Pattern is the ServeMux pattern that matched the request
	// (http.Request.Pattern), or "" when the router sets none.
	Pattern string
	// Outcome is what happened.
	Outcome Outcome
	// Limit, Tier and Class describe the limit that decided (see
	// Decision.Decider); empty when no limit was consulted.
	Limit, Tier, Class string
	// Cost is the request's cost in tokens.
	Cost int64
	// Latency is the time spent asking the store (and the FailMode when
	// the store failed), on the middleware's clock; for Refunded, the
	// refund's.
	Latency time.Duration
	// Delay is how long the route's Delay held the request before its
	// handler ran: its reservation's exact delay; zero when not held.
	Delay time.Duration
	// ShadowDenied names the shadow limit (Limit.Shadow) that would
	// have refused the request: the first in the order of the limits
	// when several would (Decision.Shadow has them all); "" when none
	// would. The request was not refused for it.
	ShadowDenied string
	// Fallback reports a decision made by a FailMode's Verdict.Result
	// while the store was failing; Err then holds the store's error.
	Fallback bool
	// Err is the store's error for the Failed outcomes (or the error
	// wrapping ratebucket.ErrResolve of a Resolve that failed), a fallback and a
	// refund that failed, the reason for Invalid, and nil otherwise.
	Err error
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
