package httplimit

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Policies resolved per request (Limit.Resolve). A limit with a resolver
// has no policy of its own: for each request, once the limit's key is
// known, the resolver answers the policy to apply (a tenant's plan), and
// optionally the request's cost under it and the plan's name. The name is
// reported where a tier's is (Event.Tier, LimitResult.Tier); it is not
// part of the bucket key, so a client whose plan changes keeps its
// bucket, and the store applies the new policy to it.
//
// A resolver's failure is an outage of the limiter, as a store's is: the
// route's FailMode decides what the request gets (FailOpen serves it
// unlimited, FailClosed answers 503), the error is logged at most once
// per LogEvery and reported to the Observer with the Failed outcome; it
// wraps ratebucket.ErrResolve. No default policy is ever applied in its place.
// A FailMode's Verdict.Result is ignored there: Failure.Takes is nil,
// since the policies are unknown.

// ResolveFunc returns the policy of one Limit for r, whose key k (the
// limit's KeyFunc's answer) is known: for example the plan of the tenant
// k.ID. It must be safe for simultaneous use, and fast or cached (see
// [ResolveByID] and ratebucket.ResolverCache). Its error is wrapped in
// ratebucket.ErrResolve and handled by the route's FailMode. The answer's Name
// must be empty or 1 to 32 bytes of [A-Za-z0-9_.-], and come from
// configuration, since it becomes a metrics label.
type ResolveFunc func(r *http.Request, k Key) (ratebucket.Resolved, error)

// ResolveByID returns a ResolveFunc asking res for the key's ID (the user,
// the API key's digest, the IP), in the request's context: a tenant's
// plan, through a ratebucket.ResolverCache's Resolve when the source is slow.
func ResolveByID(res ratebucket.Resolver) ResolveFunc {
	return func(r *http.Request, k Key) (ratebucket.Resolved, error) { return res(r.Context(), k.ID) }
}

// ResolveByTier returns a ResolveFunc applying the policy of the request's
// tier (TierFrom its context, as [WithTier] set it), named by the tier:
// static tiers as a resolver. Unlike Limit.Tiers, the tier is not part of
// the bucket key (a client who upgrades keeps its bucket, under the new
// policy), and a tier without a policy is a resolution failure, handled
// by the FailMode, where Limit.Tiers answers 500 with ErrUnknownTier.
func ResolveByTier(tiers map[string]algo.Policy) ResolveFunc {
	tiers = maps.Clone(tiers)
	return func(r *http.Request, _ Key) (ratebucket.Resolved, error) {
		t := TierFrom(r.Context())
		p, ok := tiers[t]
		if !ok {
			return ratebucket.Resolved{}, fmt.Errorf("%w: tier %.64q", ErrUnknownTier, t)
		}
		return ratebucket.Resolved{Policy: p, Name: t}, nil
	}
}

// request returns l's part of r's decision and its take of cost: under
// the policy of the request's tier, or the one l's resolver answers.
func (l *limit) request(r *http.Request, tier string, cost int64) (LimitResult, store.Request, error) {
	var res ratebucket.Resolved
	var keyTier string // the tier in the bucket key: never a resolved name
	var k Key
	var err error
	if l.resolve == nil {
		if res.Policy, keyTier, err = l.policyFor(tier); err == nil {
			k, err = l.keyOf(r)
		}
		res.Name = keyTier
	} else if k, err = l.keyOf(r); err == nil {
		res, err = l.resolved(r, k)
	}
	if err != nil {
		return LimitResult{}, store.Request{}, err
	}
	if res.Cost > 0 {
		cost = res.Cost
	}
	return LimitResult{Name: l.name, Tier: res.Name, Class: k.Class, Policy: res.Policy},
		store.Request{Key: l.bucketKey(keyTier, k.Class, bucketID(k.ID)), Policy: res.Policy, Cost: cost}, nil
}

// resolved asks l's resolver for r's policy and checks its answer: every
// error wraps ratebucket.ErrResolve.
func (l *limit) resolved(r *http.Request, k Key) (ratebucket.Resolved, error) {
	res, err := l.resolve(r, k)
	if err == nil && res.Cost < 0 {
		err = fmt.Errorf("cost %d: %w", res.Cost, algo.ErrInvalidCost)
	}
	if err == nil && res.Name != "" && !validName(res.Name) {
		err = fmt.Errorf("name %.64q is not 1-32 bytes of [A-Za-z0-9_.-]", res.Name)
	}
	if err == nil {
		err = res.Policy.Validate()
	}
	if err != nil {
		return ratebucket.Resolved{}, fmt.Errorf("%w: limit %q: %w", ratebucket.ErrResolve, l.name, err)
	}
	return res, nil
}

// unresolved answers a request whose policy could not be resolved, as the
// route's FailMode says: served unlimited, or 503.
func (m *Middleware) unresolved(w http.ResponseWriter, r *http.Request, next http.Handler, ev Event, err error) {
	observe.ReportFailure(m.labelled(r), m.store, observe.OpTake, ev.Cost, err) // the metrics' failed decisions
	v := m.fail.OnFailure(Failure{Request: r, Err: err})
	ev.Err = err
	if r.Context().Err() == nil {
		m.log.log(r.Context(), slog.LevelError, "httplimit: policy resolution failed", slog.String("pattern", r.Pattern),
			slog.Bool("served", v.Serve), slog.Any("error", err))
	}
	m.failed(w, r, next, ev, Verdict{Serve: v.Serve, RetryAfter: v.RetryAfter})
}

// checkResolve refuses a Delay over a limit whose policies are resolved
// per request: its reservations need them when the route is built.
func checkResolve(ls []limit, delay time.Duration) error {
	for _, l := range ls {
		if l.resolve != nil && delay != 0 {
			return fmt.Errorf("%w: Delay needs the policies of its limit when the route is built; limit %q has a Resolve", ErrInvalidConfig, l.name)
		}
	}
	return nil
}
