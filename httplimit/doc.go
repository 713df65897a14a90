// Package httplimit is net/http middleware that rate-limits requests with
// ratebucket's token buckets, in one process (memstore) or across a fleet
// (redisstore).
//
// # In one line
//
// The zero Config limits each client IP to a burst of 100 and 2 requests per
// second in an in-process store:
//
//	mw, err := httplimit.New(httplimit.Config{})
//	http.ListenAndServe(":8080", mw.Handler(mux))
//
// That wraps every route of mux in one limit; routes with limits of their
// own are wired one by one (see "Routes").
//
// For a fleet, pass a redisstore as Config.Store: every instance then draws
// from the same buckets, and N instances admit one limit, not N.
//
// # What a client sees
//
// An admitted request is served with X-RateLimit-Limit (the capacity of the
// policy applied, [LimitResult].Policy: an [algo.Result] does not carry the
// limit), X-RateLimit-Remaining (whole tokens left) and X-RateLimit-Reset
// (the Unix time in seconds, rounded up, at which the bucket is full
// again), and the IETF draft's RateLimit-Policy and RateLimit
// ("name";r=remaining;t=delay-seconds until full, rounded up) fields (see
// [Headers]). A refused one gets 429 Too Many Requests, the same headers,
// Retry-After in delay-seconds rounded up (never 0), and
// {"error":"rate_limited","retry_after_ms":N}, or an RFC 9457 problem with
// [ProblemDenied], or your own Config.Denied. grpclimit's metadata and
// rls's headers have the same names, in lower case, and the same meanings;
// internal/testdata/ratelimit-headers.json pins them for all three.
//
// # Keys: who is limited
//
// A [KeyFunc] names the bucket. [IP] is the TCP peer's address. Behind a
// reverse proxy, build a [ClientIP] with the proxies' networks in
// IPConfig.TrustedProxies: X-Forwarded-For (or RFC 7239 Forwarded) is read
// only when the peer is one of them, from the right, and the first address
// that is not a trusted proxy is the client. A header sent by anyone else is
// ignored, because any client can write one. IPv6 clients are grouped by
// /64 (configurable), since one host owns the whole network.
//
// [User] keys by the user your authentication middleware put in the context
// with [WithUser]; User(IP) falls back to the IP for anonymous requests.
// Identities never come from a client-supplied header such as x-user-id.
// [APIKey] keys by a header's value, hashed. Long or binary IDs are hashed
// before they reach the store; an empty one is refused ([ErrNoKey], 400),
// never a bucket shared by everyone. No bucket key is longer than
// store.DefaultMaxKeyLen: [New] refuses a Prefix and names that could make
// one, and a key that a store configured with a smaller bound refuses
// (store.ErrKeyTooLong) gets 500, never the FailMode.
//
// # Bucket keys
//
// A bucket's key is the Config's Prefix (default "h:"),
// the limit's name, the key class, and the ID in braces:
//
//	h:default:user{42}                 one limit, the user's
//	h:minute:user{42}                  limit "minute", whatever the tier
//	h:default:ip{2001:db8:1:2::/64}    an IPv6 client's /64
//	h:default:apikey{#9f86d081884c7d659a2feaa0c55ad015}    hashed
//
// Different limits, classes or IDs never share a key; a tier or plan is
// not in it, so a client who changes plan keeps its bucket and the store
// applies the new policy to it. The braces
// are the Redis Cluster hash tag: one client's buckets live in one slot, so
// its limits are taken atomically. Keys are kept short because Redis pays
// for every byte of them: on redis-server 7.0.15, under redisstore's "rb:"
// prefix, the bucket of user "test-user" or of IPv4 client 203.0.113.195
// has MEMORY USAGE 72 bytes, as a bucket with a 20-byte key does, an IPv6
// /64's 88 and a UUID user's 104; the layout before this one
// (http:default:*:user:{test-user}) cost 88, 88, 104 and 120
// (TestKeyMemoryUsage). A Redis bucket costs 72 bytes up to a 30-byte key,
// 88 up to 44, 104 up to 60.
//
// Upgrading from that layout (Prefix "http:", "*" for no tier, ":{" before
// the ID), or from the one that named a tier after the limit
// ("h:minute:paid:user{42}"), changes those keys once: each client starts
// again with a full bucket, as after a Redis restart, and the old keys
// expire by themselves when their buckets would have been full.
//
// # Tiers, costs and several limits
//
// A [Limit] may apply a policy per tier (anonymous 50/min, authenticated
// 200/min, paid 2000/min) with [ResolveByTier], a resolver (see below)
// over your function naming the request's tier. Config.CostBy or Config.Cost prices a
// route; a cost above a capacity is an error when the route is built, or
// for CostBy a 500 with the reason logged, never a request that waits
// forever. A request may pass several limits at once (a burst and a daily
// quota), taken atomically when the store implements [store.Store].
// A limit's Policy may be a calendar quota (algo.Quota: 10,000 a month,
// reset on the 1st): RateLimit-Policy and RateLimit then list every
// limit, with a quota's period as its window, and X-RateLimit-* and
// Retry-After describe the one closest to denying (Decision.Decider).
//
// # Policies per client, at runtime
//
// A Limit's Resolve chooses its policy per request once the key is known,
// for example from the tenant's plan (a ratebucket.Resolver asked for the
// key's ID), through a bounded ratebucket.ResolverCache whose TTL is the
// staleness of a plan change; [ResolveByTier] is static tiers as a
// resolver, whose capacities New checks the route's Cost against. A resolver that fails is an outage of the limiter: the
// route's FailMode answers (serve, or 503), never a default policy.
//
//	plans, _ := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: time.Minute})
//	mw, _ := httplimit.New(httplimit.Config{Key: httplimit.User(nil),
//		Limits: []httplimit.Limit{{Name: "api", Resolve: plans}}})
//
// # Requests in flight
//
// Config.Concurrency caps how many requests of one client a route runs at
// once ([Concurrency]): each request holds a lease in the store
// (store.Store: memstore and redisstore keep them; across a fleet with
// redisstore) until its handler returns or panics. A request that finds
// the client at the limit gets 429 with Retry-After (whole seconds, never
// 0: when the earliest lease expires at the latest) and the Denied
// handler's body, but no rate-limit headers: it charged no bucket, since
// the lease is asked for first, and a request the buckets refuse gives
// its lease back at once. A lease call that fails goes to the route's
// FailMode, as a take does. Lease keys look like bucket keys, under the
// limit's name: "h:inflight:user{42}".
//
//	reports, _ := mw.With(httplimit.Config{Concurrency: httplimit.Concurrency{
//		Policy: algo.LeasePolicy{Limit: 2, TTL: 5 * time.Minute},
//	}})
//	mux.Handle("POST /api/report", reports.Handler(buildReport))
//
// # Charging by outcome
//
// Config.ChargeIf decides, after the handler returns, whether a request's
// charge stands, from its response's status; when it does not, the tokens
// go back to the same buckets (store.Store; memstore and redisstore
// have it), after the response, so a refund never makes a 429. Count only
// failed logins, or spare clients the server's own failures:
//
//	login, _ := mw.With(httplimit.Config{ChargeIf: func(status int) bool { return status == 401 || status == 403 }})
//	upload, _ := mw.With(httplimit.Config{Cost: 10, ChargeIf: func(status int) bool { return status < 500 }})
//
// A handler that writes nothing counts as 200. A refused request, one
// served while the store fails, one whose handler panics (the panic goes
// on unrecovered) and a hijacked connection keep their charge.
//
// # Smoothing bursts
//
// Config.Delay holds a request that its bucket would refuse but can admit
// within Delay, for the exact time until its tokens exist (a reservation:
// store.Store), then serves it; beyond Delay it is a 429 with the exact
// Retry-After, as NGINX's limit_req burst delay does:
//
//	feed, _ := mw.With(httplimit.Config{Delay: 2 * time.Second})
//
// Held requests proceed in the order they came, at the policy's rate. A
// client that disconnects while held is not served and its reservation is
// cancelled (its tokens come back when no later request of the key was
// held behind it). Delay takes a route with a single Limit, which is not
// a calendar quota: a quota is counted per period, not reserved.
//
// # What New refuses
//
// A route whose options its limits cannot honour is an error from New
// and With, wrapping [ErrInvalidConfig] and naming the limit, never a
// request that fails at runtime and is served by the FailMode: Delay
// over several limits, a shadow limit, a Resolve or a calendar quota
// (also wrapping algo.ErrQuotaUnsupported), a route of shadow limits
// only with a Concurrency limit, a Cost above a capacity (wrapping
// algo.ErrCostExceedsCapacity), and an option whose store lacks the
// operation (store.ErrUnsupported). Everything else combines: a quota
// beside a burst limit, under ChargeIf (its refunds go back to the
// period's count), as a shadow limit, as a tier's or a plan's policy,
// behind a Concurrency limit. (A tier without a policy is a resolution
// failure: the FailMode answers.) What New cannot see is decided per request and answered 500
// (Outcome Invalid), never served as an outage: a CostBy cost above
// a capacity, or a resolved one (a tier's included), and a store
// whose own configuration cannot apply a policy (memstore under a window
// algorithm). TestConfigsHonoured generates configurations and checks
// that none New accepts fails a valid request that way.
//
// # Shadow limits
//
// A Limit with Shadow set (on each of a route's limits, to put the whole
// route in shadow) is taken as a shadow ratebucket.Limiter takes
// (ratebucket.Config.Shadow: charged, reported, never refusing): how a
// new limit is rolled out (envoy's shadow_mode, NGINX's
// limit_req_dry_run). Its take is its own, for every request, as if it
// were enforced alone, so a shadow refusal never blocks the enforced
// limits and an enforced refusal never skips the shadow count. Refusals
// reach the store's Observer as shadow_denied and the Event as
// ShadowDenied; [ShadowHeaders] also lists shadow limits in the draft
// fields.
//
//	mw, _ := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{
//		{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
//		{Name: "hourly", Policy: algo.PerHour(1000).Burst(1000), Shadow: true},
//	}})
//
// # When the store fails
//
// A store error is never reported as 429. The route's [FailMode] decides:
// [FailOpen] (the default) serves the request, [FailClosed] answers 503
// with Retry-After; use it for login, payment and password reset. Either
// way the error is logged with log/slog at most once per Config.LogEvery,
// so an outage does not flood the log. A FailMode may also answer from
// another store (a local fallback), through [Verdict].Result.
//
// # Routes
//
// One [Config] configures everything. [Middleware.With] derives a route's
// middleware from the fields a route Config sets, sharing the store and,
// for a limit of the same name, the bucket. Wrap each route's handler
// once, by its own middleware, and serve the mux as it is:
//
//	mw, err := httplimit.New(httplimit.Config{
//		Store:  st, // a memstore, or a redisstore to share the limit across instances
//		Key:    httplimit.User(httplimit.IP),
//		Limits: []httplimit.Limit{{Policy: algo.PerMinute(60).Burst(10)}},
//	})
//	login, err := mw.With(httplimit.Config{Fail: httplimit.FailClosed(time.Second)})
//	upload, err := mw.With(httplimit.Config{Cost: 10})
//
//	mux := http.NewServeMux()
//	mux.Handle("GET /feed", mw.Handler(feed))
//	mux.Handle("POST /login", login.Handler(logIn))
//	mux.Handle("POST /upload", upload.Handler(uploadFile))
//	srv := &http.Server{Addr: ":8080", Handler: mux} // not mw.Handler(mux): that would charge every route twice
//
// Wrapping the mux in mw.Handler as well puts every request through two
// middlewares that charge the same "default" bucket: with the burst of 10
// above, a client's 20 logins in a row get 5 through instead of 10, and
// an upload (10 + 1 tokens) never passes. mw.Handler(mux) is right only
// when no route has a middleware of its own, as in the one-line setup.
//
// Config.Skip exempts health checks and internal callers, and
// Config.Observer receives an [Event] per request (pattern, outcome, limit, tier or plan, key class,
// store latency, error) to feed Prometheus or OpenTelemetry without this
// module depending on either.
package httplimit
