package httplimit

import (
	"context"
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
// reported as Event.Tier and LimitResult.Tier; it is not
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

// Resolver chooses the policy of one Limit per request, once the limit's
// key is known: it is asked for the key's ID (the user, the API key's
// digest, the IP) in the request's context, which also carries what the
// application's own middleware put there (the tier of ResolveByTier).
// Both kinds of the root package are Resolvers: a ratebucket.Resolver
// func (ratebucket.Resolver(tenantPlan)) and a *ratebucket.ResolverCache
// in front of one when the source is slow, so a [ratebucket.Limiter] and
// httplimit share a cache. It must be safe for simultaneous use. Its
// error is wrapped in ratebucket.ErrResolve and handled by the route's
// FailMode. The answer's Name must be empty or 1 to 32 bytes of
// [A-Za-z0-9_.-], and come from configuration, since it becomes a
// metrics label.
type Resolver interface {
	Resolve(ctx context.Context, id string) (ratebucket.Resolved, error)
}

// ResolveByTier returns a Resolver applying the policy of the request's
// tier, as tier reads it from the request's context (where your
// authentication middleware put it), named by the tier: "anonymous"
// 50/min, "authenticated" 200/min, "paid" 2000/min. The entry for "" is
// the policy of requests without a tier. The tier is not part of the
// bucket key: a client who upgrades keeps its bucket, under the new
// policy. A tier without a policy is a resolution failure
// (ratebucket.ErrResolve), which the route's FailMode answers. Its
// policies are known when the route is built, so [New] and With refuse
// a route's Cost above the capacity of one of them. It returns an error
// wrapping [ErrInvalidConfig] when tiers is empty, a tier name is not 1
// to 32 bytes of [A-Za-z0-9_.-] (but ""), or a policy is invalid.
func ResolveByTier(tiers map[string]algo.Policy, tier func(ctx context.Context) string) (Resolver, error) {
	if len(tiers) == 0 || tier == nil {
		return nil, fmt.Errorf("%w: ResolveByTier needs tiers and a tier function", ErrInvalidConfig)
	}
	for t, p := range tiers {
		if t != "" && !validName(t) {
			return nil, fmt.Errorf("%w: tier name %q is not 1-32 bytes of [A-Za-z0-9_.-]", ErrInvalidConfig, t)
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("%w: tier %q: %w", ErrInvalidConfig, t, err)
		}
	}
	return &tierResolver{tiers: maps.Clone(tiers), tier: tier}, nil
}

// tierResolver is ResolveByTier's Resolver: its policies are known to New.
type tierResolver struct {
	tiers map[string]algo.Policy
	tier  func(ctx context.Context) string
}

// Resolve returns the policy of ctx's tier, named by the tier.
func (t *tierResolver) Resolve(ctx context.Context, _ string) (ratebucket.Resolved, error) {
	name := t.tier(ctx)
	p, ok := t.tiers[name]
	if !ok {
		return ratebucket.Resolved{}, fmt.Errorf("tier %.64q has no policy", name)
	}
	return ratebucket.Resolved{Policy: p, Name: name}, nil
}

// request returns l's part of r's decision and its take of cost: under
// l's Policy, or the one l's resolver answers.
func (l *limit) request(r *http.Request, cost int64) (LimitResult, store.Request, error) {
	res := ratebucket.Resolved{Policy: l.policy}
	k, err := l.keyOf(r)
	if err == nil && l.resolve != nil {
		res, err = l.resolved(r, k)
	}
	if err != nil {
		return LimitResult{}, store.Request{}, err
	}
	if res.Cost > 0 {
		cost = res.Cost
	}
	return LimitResult{Name: l.name, Tier: res.Name, Class: k.Class, Policy: res.Policy},
		store.Request{Key: l.bucketKey(k.Class, bucketID(k.ID)), Policy: res.Policy, Cost: cost}, nil
}

// resolved asks l's resolver for r's policy and checks its answer: every
// error wraps ratebucket.ErrResolve.
func (l *limit) resolved(r *http.Request, k Key) (ratebucket.Resolved, error) {
	res, err := l.resolve.Resolve(r.Context(), k.ID)
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
	v := m.fail(Failure{Request: r, Err: err})
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
