package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store"
)

// defaultPrefix starts the bucket keys of a Config without a Prefix (see
// "Bucket keys" in the package doc). Before the compact key layout it was
// "http:".
const defaultPrefix = "h:"

// defaultPolicy is the policy of the zero Config (see Config.Limits).
var defaultPolicy = algo.PerSecond(2).Burst(100)

// Limit is one rate limit a request must pass. A request under several
// limits (a burst limit and a daily quota; a per-user and a per-tenant
// limit) is admitted only if all admit it. Every store takes them
// atomically (store.Store.TakeMulti): all charge or none does. Only on a
// Redis Cluster whose keys for one request span slots (the store answers
// store.ErrNotTogether) are they taken one at a time, in order, charging
// stopping at the first refusal (the later limits are only read, for the
// headers): never more is admitted than each limit allows, but a request
// refused by a later limit has already been charged by the earlier ones,
// so put the limit most likely to refuse first. The middleware's own keys
// keep one client's buckets in one slot, so this happens only with a
// KeyFunc per limit whose IDs differ.
//
// A limit's policy is chosen one way: Policy, the same for every
// request, or Resolve, per request (a tenant's plan, or a policy per
// tier with [ResolveByTier]).
type Limit struct {
	// Name identifies the limit in bucket keys, in the RateLimit and
	// RateLimit-Policy headers, in "violated-policies" and to the
	// Observer: 1 to 32 bytes of [A-Za-z0-9_.-]. Default "default" when
	// the Config has a single limit; required otherwise.
	Name string
	// Policy is the limit's policy for every request. Exactly one of
	// Policy and Resolve is set.
	Policy algo.Policy
	// Key chooses the bucket. Default: the Config's Key.
	Key KeyFunc
	// Resolve, when set, chooses the limit's policy per request at
	// runtime, once its key is known: a tenant's plan read from a
	// database (a ratebucket.ResolverCache, asked for the key's ID), or
	// a policy per tier ([ResolveByTier]). Its answer's Name (the plan
	// or tier) is reported as the Tier, and its Cost, when positive,
	// replaces the request's cost for this limit. The bucket key does not
	// name the policy: when a client's plan changes, its bucket stays and
	// the store applies the new policy to it. A resolver that fails, or
	// answers an invalid policy or name, is a store failure: the route's
	// FailMode decides (serve, or 503), never a default policy. A cost
	// above the resolved capacity is a 500, as a CostBy's is; a route's
	// Cost above a ResolveByTier tier's capacity is refused by New. A
	// route with Delay cannot have one. Default: none.
	Resolve Resolver
	// Shadow makes this a shadow limit, to roll out a new limit safely
	// (envoy's shadow_mode, NGINX's limit_req_dry_run): it is taken as a
	// shadow ratebucket.Limiter takes (ratebucket.Config.Shadow: charged,
	// reported, never refusing), apart from the enforced limits; a route
	// reports it in Event.ShadowDenied, Decision.Shadow and, with
	// [ShadowHeaders], the draft headers. See "Shadow limits" in the
	// package doc. Default: false, the limit is enforced.
	Shadow bool
}

// Config configures a [Middleware]: [New] takes one, and so does
// [Middleware.With] for a route's changes. The zero value is ready to use:
// one limit of a burst of 100 and 2 requests per second per client IP
// ([IP]) in an in-process
// memstore, cost 1, both header sets, the JSON 429 body, and FailOpen.
type Config struct {
	// Store keeps the buckets. Use a redisstore to share limits across a
	// fleet: with in-process stores each instance limits alone, and N
	// instances admit N times the limit. Default: a new memstore on
	// Clock, built once the rest of the Config is found valid (the one
	// place httplimit reaches down to a backend).
	Store store.Store
	// Prefix starts every bucket key, to keep these buckets apart from
	// other users of the store. Default "h:". Keys are
	// Prefix + limit + ":" + class + "{" + id + "}" (see "Bucket keys" in
	// the package doc): "h:default:user{42}".
	// New refuses a Prefix (or limit names) with which a key
	// could be longer than store.DefaultMaxKeyLen (256 bytes), with an
	// error wrapping both ErrInvalidConfig and store.ErrKeyTooLong: classes
	// are at most 32 bytes and IDs at most 64 (see Key.ID), so a Prefix of up to
	// 125 bytes always fits.
	Prefix string
	// Limits are the limits every request must pass. Default: a single
	// Limit named "default" of algo.PerSecond(2).Burst(100), a burst of
	// 100 and 2 requests per second sustained, per client, as in the
	// article this library grew from.
	Limits []Limit
	// Key is the KeyFunc of Limits without their own. Default: [IP].
	Key KeyFunc
	// Cost is what each request costs in tokens. Default: 1. A cost above
	// some limit's capacity could never be admitted, so New and With
	// refuse it (the error wraps algo.ErrCostExceedsCapacity); a negative
	// one too (algo.ErrInvalidCost). Zero means the default: a route
	// whose requests are free needs no limiter (or use Skip).
	Cost int64
	// CostBy, when set, returns each request's cost in tokens instead of
	// Cost: an upload by its size, an AI call by its model. A cost above a
	// limit's capacity could never be admitted: the request is refused
	// with an error wrapping algo.ErrCostExceedsCapacity (500), never left
	// to wait forever. Cost 0 is free: always admitted, it charges nothing
	// and still reports the headers.
	CostBy func(r *http.Request) int64
	// Skip exempts requests for which it returns true (health checks,
	// internal callers): they are served with no store call and no
	// headers. Default: none.
	Skip func(r *http.Request) bool
	// Fail says what requests get while the store fails. Default:
	// [FailOpen]. Use [FailClosed] on sensitive routes.
	Fail FailMode
	// Headers chooses the rate-limit header sets sent. Default: both.
	Headers Headers
	// Denied writes the response to a request the limits refused. When
	// it is called, the rate-limit headers (none for a refusal by the
	// Concurrency limit: see Decision.Concurrency) and Retry-After are
	// already set; it writes the status (429 unless it has reason to
	// differ) and the body. Default: 429 Too Many Requests with
	// Content-Type application/json and the body
	//
	//	{"error":"rate_limited","retry_after_ms":1234}
	//
	// where retry_after_ms is the wait rounded up to the millisecond (at
	// least 1). [ProblemDenied] writes an RFC 9457 problem instead.
	Denied func(w http.ResponseWriter, r *http.Request, d Decision)
	// Error writes the response to a request the middleware could not
	// ask the store about (Outcome [Invalid]): without a key, or not
	// fitting the configuration. Default: 400 with
	// {"error":"rate_limit_key_missing"} for an error wrapping
	// [ErrNoKey], and 500 with {"error":"rate_limit_misconfigured"}
	// otherwise; it never shows err to the client. The 500s are also
	// logged.
	Error func(w http.ResponseWriter, r *http.Request, err error)
	// Observer, if set, receives an [Event] for every request the
	// middleware handles, after the decision and before the response is
	// written or the next handler runs, and a second one (Outcome
	// [Refunded]) for a request whose charge ChargeIf gave back after its
	// handler returned. It is called on the request's goroutine: keep it
	// fast, and safe for simultaneous use. Store calls are counted by the
	// store's own observer (see Event); this one adds what only the
	// middleware knows: requests skipped, invalid, or served or refused
	// while the store failed. Default: none.
	Observer func(ctx context.Context, e Event)
	// Concurrency, when its Policy is set, bounds how many requests of a
	// client run at once, holding a lease for each request's duration
	// (see [Concurrency]). It needs a Store implementing store.Store
	// (memstore and redisstore do; New and With return an error wrapping
	// ErrInvalidConfig otherwise). Default: none.
	Concurrency Concurrency
	// ChargeIf, when set, decides after the handler returns whether an
	// admitted request's charge stands, from the status of its response
	// (200 when the handler wrote none): when it returns false, the
	// request's tokens are given back to the buckets they were taken
	// from, with the same keys, policies and cost (several limits in one
	// atomic call where the store allows). Charge only failed logins
	// with
	//
	//	ChargeIf: func(status int) bool { return status == 401 || status == 403 },
	//
	// or spare clients the server's own failures with
	//
	//	ChargeIf: func(status int) bool { return status < 500 },
	//
	// The refund is made after the response, so it never turns an
	// admitted request into a 429; a refund that fails is logged and
	// reported to the Observer (Outcome [Refunded] with Err), and the
	// request stays charged. A request the buckets refused, one served
	// or decided while the store failed, one whose handler panicked and
	// a hijacked connection are never refunded (see the package doc).
	// It needs a Store implementing store.Store (memstore and
	// redisstore do; New and With return an error wrapping
	// ErrInvalidConfig and store.ErrUnsupported otherwise). Default:
	// every admitted request stays charged.
	ChargeIf func(status int) bool
	// Delay, when positive, smooths bursts instead of refusing them: a
	// request that its bucket would refuse now but can admit within
	// Delay is held for its exact delay (a reservation,
	// store.Store), then served; one that would need longer gets 429
	// with the exact Retry-After. A request whose client disconnects
	// while held is not served, and its reservation is cancelled: its
	// tokens come back when no later request of the key was held behind
	// it. Delays beyond the policy's refill of a full bucket
	// (algo.Policy.MaxDelay) act as that. The wait uses Clock's timers
	// when Clock is a github.com/benbjohnson/clock Clock (clock.NewMock()
	// in tests), the real clock's otherwise. Delay needs a route with a
	// single Limit, neither a shadow limit, nor a Resolve, nor a calendar
	// quota (algo.Quota) as its Policy, which cannot be
	// reserved, and a Store implementing store.Store (memstore and
	// redisstore do); New and With return an error wrapping
	// ErrInvalidConfig otherwise, naming the limit (and
	// algo.ErrQuotaUnsupported for a quota, store.ErrUnsupported for the
	// store). Default: 0, no request is held.
	Delay time.Duration
	// Leases, when set, spends hot keys' tokens from leased batches: New
	// wraps Store in hybrid.NewLeases(Store, *Leases), so a key whose
	// demand over a Lifetime reaches MinBatch (a global limit, a client
	// that floods) costs one Store call per batch instead of one per
	// request, and the limit stays global within the bound of
	// docs/leases.md (set Instances to the fleet's size). Cold keys pass
	// through as before. Only single-limit takes are leased: a route with
	// several enforced limits takes them in one atomic TakeMulti, which
	// the Leases passes to the Store, as it does calendar quotas,
	// Concurrency leases and ChargeIf's refunds. It needs an explicit
	// Store (batches of an in-process store save nothing) and no Delay on
	// any route (every request of a Delay route is a reservation, which
	// gives the key's batch back): New and With return an error wrapping
	// ErrInvalidConfig otherwise, and also hybrid.ErrInvalidConfig for a
	// LeasesConfig that hybrid.NewLeases refuses (Instances is required).
	// Routes share their parent's Leases; [Middleware.Close] gives the
	// batches back and stops its goroutine. Default: nil, every request
	// is a Store call.
	Leases *hybrid.LeasesConfig
	// Settle, when set, names a response header in which the handler
	// reports the request's actual cost in tokens, in decimal, and charges
	// each admitted request that cost, for work whose cost is known only
	// after it is done (an LLM call's tokens): the request holds an
	// estimate (Cost or CostBy, or when the route sets neither the 95th
	// percentile of its last 128 settled costs) until its handler returns,
	// then the difference is given back or the extra charged, into at most
	// one full bucket of debt that later requests wait out (see "Charging
	// the cost a response reports" in settle.go). The header is read from
	// the response's header map when the handler returns, so a streaming
	// handler may set it after writing the body (it is then not sent;
	// declare it a trailer to send it); a response without it, or with
	// something else in it, keeps the estimate. It needs a route with a
	// single Limit, not a calendar quota, without Delay, ChargeIf or a
	// shadow limit; New and With return an error wrapping ErrInvalidConfig
	// otherwise. Default: none.
	Settle string
	// SettleCost, when set, settles as Settle does with the actual cost
	// it returns from the response's status (200 when the handler wrote
	// none) and header map, instead of a header's; ok false keeps the
	// estimate. Default: none.
	SettleCost func(status int, h http.Header) (cost int64, ok bool)
	// SettleTTL is how long a settled request's hold stays open: a
	// handler that runs longer is charged its estimate. Default: 5
	// minutes; at most algo.MaxHoldTTL.
	SettleTTL time.Duration
	// Logger receives store failures and configuration errors met by
	// requests. Default: slog.Default().
	Logger *slog.Logger
	// LogEvery is the least time between two log records: during an
	// outage under load the middleware logs once per interval, with the
	// count of records suppressed, instead of once per request.
	// Default: 10s.
	LogEvery time.Duration
	// Clock is read for latency and for X-RateLimit-Reset. Pass the
	// store's clock when it has one. Default: the real clock.
	Clock store.Clock
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// limit is a validated Limit.
type limit struct {
	name    string
	policy  algo.Policy // zero when the Limit has Resolve
	key     KeyFunc
	prefix  string // Config.Prefix + name + ":"
	resolve Resolver
	shadow  bool
	// shadowed takes a shadow limit of a fixed Policy (see shadowTake).
	shadowed *ratebucket.Limiter
}

// bucketKey returns the store key of the bucket of key class and ID (as
// [bucketID] returns it): the name Prefix + limit + ":" + class in the
// group of the ID (store.GroupKey: name + "{" + id + "}",
// "h:default:user{42}"): the buckets of one client are one group, so a
// store that spreads keys over servers keeps them together and TakeMulti
// stays atomic. Under one Prefix, distinct (limit, class, ID) make
// distinct keys: names hold no ':', so a name splits at ':' into two
// names, and GroupKey keeps distinct (group, name) pairs apart.
func (l *limit) bucketKey(class, id string) string {
	return store.GroupKey(id, l.prefix+class)
}

// maxKeyLen returns the length of l's longest possible bucket key: a
// class of maxNameLen bytes and an ID of maxIDLen (a digest is shorter).
func (l *limit) maxKeyLen() int {
	return len(l.bucketKey(strings.Repeat("c", maxNameLen), strings.Repeat("i", maxIDLen)))
}

func newLimits(ls []Limit, prefix string, key KeyFunc) ([]limit, error) {
	if len(ls) == 0 {
		ls = []Limit{{Policy: defaultPolicy}}
	}
	out := make([]limit, 0, len(ls))
	seen := map[string]bool{}
	for i, l := range ls {
		if l.Name == "" && len(ls) == 1 {
			l.Name = "default"
		}
		switch {
		case !validName(l.Name):
			return nil, fmt.Errorf("%w: limit %d: name %q is not 1-32 bytes of [A-Za-z0-9_.-]", ErrInvalidConfig, i, l.Name)
		case seen[l.Name]:
			return nil, fmt.Errorf("%w: two limits named %q", ErrInvalidConfig, l.Name)
		case l.Resolve != nil && l.Policy != (algo.Policy{}):
			return nil, fmt.Errorf("%w: limit %q has Resolve and a Policy: its resolver chooses every policy", ErrInvalidConfig, l.Name)
		case l.Policy == (algo.Policy{}) && l.Resolve == nil:
			return nil, fmt.Errorf("%w: limit %q has neither a Policy nor Resolve", ErrInvalidConfig, l.Name)
		}
		seen[l.Name] = true
		if l.Policy != (algo.Policy{}) {
			if err := l.Policy.Validate(); err != nil {
				return nil, fmt.Errorf("%w: limit %q: %w", ErrInvalidConfig, l.Name, err)
			}
		}
		if l.Key == nil {
			l.Key = key
		}
		lim := limit{name: l.Name, policy: l.Policy, key: l.Key, prefix: prefix + l.Name + ":", resolve: l.Resolve, shadow: l.Shadow}
		if n := lim.maxKeyLen(); n > store.DefaultMaxKeyLen {
			return nil, fmt.Errorf("%w: limit %q: its bucket keys could be %d bytes, above the %d bytes stores accept by default; shorten Prefix (%d bytes) or the names: %w",
				ErrInvalidConfig, l.Name, n, store.DefaultMaxKeyLen, len(prefix), store.ErrKeyTooLong)
		}
		out = append(out, lim)
	}
	return out, nil
}

// checkCost reports a static cost that some policy of ls could never
// admit: a limit's Policy, or a tier of its ResolveByTier.
func checkCost(ls []limit, cost int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: cost %d: %w", ErrInvalidConfig, cost, algo.ErrInvalidCost)
	}
	for _, l := range ls {
		if l.policy != (algo.Policy{}) && cost > l.policy.Capacity() {
			return fmt.Errorf("%w: cost %d exceeds capacity %d of limit %q: %w", ErrInvalidConfig, cost, l.policy.Capacity(), l.name, algo.ErrCostExceedsCapacity)
		}
		if t, ok := l.resolve.(*tierResolver); ok {
			for _, name := range slices.Sorted(maps.Keys(t.tiers)) { // the same tier named every time
				if p := t.tiers[name]; cost > p.Capacity() {
					return fmt.Errorf("%w: cost %d exceeds capacity %d of tier %q of limit %q: %w", ErrInvalidConfig, cost, p.Capacity(), name, l.name, algo.ErrCostExceedsCapacity)
				}
			}
		}
	}
	return nil
}

func checkHeaders(h Headers, dst *Headers) error {
	if h&^(XRateLimitHeaders|DraftHeaders|ShadowHeaders|NoHeaders) != 0 {
		return fmt.Errorf("%w: unknown Headers bits %#x", ErrInvalidConfig, uint8(h))
	}
	*dst = h
	return nil
}
