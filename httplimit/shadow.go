package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Shadow limits (Limit.Shadow), to roll out a new limit
// safely. A shadow limit's bucket is charged, and its decisions counted
// and reported, but it never refuses a request.
//
// What a shadow limit charges: its own bucket, exactly as the limit would
// charge it if it were enforced alone. Each shadow limit is taken by a
// Take of its own, made apart from the enforced limits' take (and from
// the other shadow limits'), for every request the route asks its limits
// about: so a shadow refusal never blocks the enforced limits nor gives
// their tokens back, and a refusal by an enforced limit (or by the
// Concurrency limit) never skips the shadow count. A shadow limit that
// refuses charges nothing, as an enforced one would not; one that admits
// is charged. Its bucket therefore shows what enforcing it would do to
// the route's traffic as it arrives, the count envoy's shadow_mode keeps.
// (Enforced beside the others in one atomic take, a request another limit
// refused would not have charged it: a shadow limit is at most as full as
// that.) A shadow charge stands when ChargeIf gives the enforced limits'
// tokens back.
//
// What is reported: each shadow take reaches the store's Observer with
// observe.Labels.Shadow set, so a refusal is observe.OutcomeShadowDenied under
// the limit's name; the request's Event names the first shadow limit
// that would have refused it in ShadowDenied; Decision.Shadow holds their
// results; and the RateLimit-Policy and RateLimit fields list them only
// with [ShadowHeaders]. The X-RateLimit fields, Retry-After and the status
// never reflect a shadow limit. A shadow take that fails is logged (at
// most once per LogEvery) and reported to the store's Observer as an
// error; the request goes on as if the shadow limit were not there: the
// FailMode is for the enforced limits.

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
		res, err := m.store.Take(shadowContext(r, l.name), q)
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
		if !res.Allowed && ev.ShadowDenied == "" {
			ev.ShadowDenied = l.name
		}
	}
	d.Limits = limits
	return enforced
}

// shadowContext returns the context of a shadow limit's take: r's,
// labelled with the route, the limit's name and the shadow mark when some
// store is observed.
func shadowContext(r *http.Request, name string) context.Context {
	if !observe.Active() {
		return r.Context()
	}
	return observe.WithLabels(r.Context(), observe.Labels{Route: r.Pattern, Policy: name, Shadow: true})
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
