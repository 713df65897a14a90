package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Shadow limits (Limit.Shadow): each is taken by a shadow
// ratebucket.Limiter (ratebucket.Config.Shadow says what a shadow take
// charges and reports), by a Take of its own, apart from the enforced
// limits' take and from the other shadow limits', for every request the
// route asks its limits about. A shadow refusal therefore never blocks
// the enforced limits nor gives their tokens back, and a refusal by an
// enforced limit (or by the Concurrency limit) never skips the shadow
// count: its bucket shows what enforcing it alone would do to the route's
// traffic as it arrives, the count envoy's shadow_mode keeps. (Enforced
// beside the others in one atomic take, a request another limit refused
// would not have charged it: a shadow limit is at most as full as that.)
// A shadow charge stands when ChargeIf gives the enforced limits' tokens
// back.
//
// What the route adds to the shadow Limiter's report: the observers see
// the route and the limit's name; the request's Event names the first
// shadow limit that would have refused it in ShadowDenied;
// Decision.Shadow holds their answers; and the RateLimit-Policy and
// RateLimit fields list them only with [ShadowHeaders]. The X-RateLimit
// fields, Retry-After and the status never reflect a shadow limit. A
// shadow take that fails is logged (at most once per LogEvery) and
// reported to the store's Observer as an error; the request goes on as if
// the shadow limit were not there: the FailMode is for the enforced
// limits.

// shadowTakes makes the takes of the shadow limits of d, moving their
// results from d.Limits to d.Shadow, and returns the enforced takes.
func (m *Middleware) shadowTakes(r *http.Request, d *Decision, takes []store.Request, ev *Event) []store.Request {
	// In place: plan made both slices for this request, and an element is
	// read before any is written at or before its index.
	enforced, limits := takes[:0], d.Limits[:0]
	for i, q := range takes {
		l := &m.limits[i]
		if !l.shadow {
			enforced, limits = append(enforced, q), append(limits, d.Limits[i])
			continue
		}
		res, err := m.shadowTake(r, l, q)
		if err != nil {
			if r.Context().Err() == nil {
				m.log.log(r.Context(), slog.LevelError, "httplimit: shadow limit failed", slog.String("pattern", r.Pattern),
					slog.String("limit", l.name), slog.Any("error", err))
			}
			continue
		}
		lr := d.Limits[i]
		lr.Result = res
		d.Shadow = append(d.Shadow, lr)
		if res.RetryAfter > 0 && ev.ShadowDenied == "" { // it would have refused
			ev.ShadowDenied = l.name
		}
	}
	d.Limits = limits
	return enforced
}

// shadowTake takes q for the shadow limit l as a shadow
// ratebucket.Limiter takes (ratebucket.Config.Shadow, where what a shadow
// take is is said once): charged only when it admits, reported to the
// observers as a shadow decision, answered Allowed with the RetryAfter a
// refusal would have imposed. The Limiter is l's, or for a limit that
// resolves its policy one made for q's. The context is r's, labelled
// with the route and the limit's name when some store is observed.
func (m *Middleware) shadowTake(r *http.Request, l *limit, q store.Request) (algo.Result, error) {
	lim := l.shadowed
	if lim == nil {
		var err error
		if lim, err = ratebucket.NewLimiter(m.store, q.Policy, ratebucket.Config{Shadow: true}); err != nil {
			return algo.Result{}, err
		}
	}
	ctx := r.Context()
	if observe.Active() {
		ctx = observe.WithLabels(ctx, observe.Labels{Route: r.Pattern, Policy: l.name})
	}
	res, err := lim.Take(ctx, q.Key, q.Cost)
	return res.Result, err
}

// shadowLimiters gives each shadow limit of a fixed Policy its shadow
// ratebucket.Limiter over the route's store, once.
func (m *Middleware) shadowLimiters() error {
	for i := range m.limits {
		if l := &m.limits[i]; l.shadow && l.policy != (algo.Policy{}) {
			lim, err := ratebucket.NewLimiter(m.store, l.policy, ratebucket.Config{Shadow: true})
			if err != nil {
				return fmt.Errorf("%w: limit %q: %w", ErrInvalidConfig, l.name, err)
			}
			l.shadowed = lim
		}
	}
	return nil
}

// shadowOnly serves a request of a route whose limits are all shadow
// limits, after their takes: admitted, with the draft fields of the
// shadow limits when ShadowHeaders asks for them.
func (m *Middleware) shadowOnly(w http.ResponseWriter, r *http.Request, next http.Handler, ev Event, d Decision) {
	d.Allowed = true
	if !m.headers.has(NoHeaders) {
		writeHeaders(w.Header(), m.headers, d, m.clock.Now())
	}
	m.pass(w, r, next, ev, Allowed)
}

// shadows reports whether some limit of m is a shadow limit, and whether
// all are.
func (m *Middleware) shadows() (some, all bool) {
	all = true
	for _, l := range m.limits {
		some, all = some || l.shadow, all && l.shadow
	}
	return some, all
}

// checkShadow refuses what would hold or refuse requests that shadow
// limits must let through: Delay with any shadow limit, and a
// Concurrency limit on a route of shadow limits only.
func (m *Middleware) checkShadow(conc Concurrency, delay time.Duration) error {
	some, all := m.shadows()
	switch {
	case all && conc.Policy != (algo.LeasePolicy{}):
		return fmt.Errorf("%w: a route whose limits are all shadow limits cannot have a Concurrency limit, which would refuse requests", ErrInvalidConfig)
	case some && delay != 0:
		return fmt.Errorf("%w: Delay cannot hold requests of a route with a shadow limit", ErrInvalidConfig)
	}
	m.shadow = some
	return nil
}
