// Package hybrid makes the local process help a shared store (Redis)
// instead of only calling it. It has three wrappers, each a [store.Store]
// around another store, that compose:
//
//	cache, _ := hybrid.NewDenyCache(redisStore, hybrid.DenyCacheConfig{})
//	local, _ := memstore.New(memstore.Config{})
//	limiter, _ := hybrid.NewFallback(cache, local, hybrid.FallbackConfig{Instances: 4})
//	// use limiter wherever a store.Store goes: ratebucket.NewLimiter, httplimit
//
// # DenyCache: abuse stops costing Redis calls
//
// A client hammering a key whose bucket is empty makes one Redis call per
// request, so the attacker chooses the Redis load. But after Redis answers
// for a key at local time t0, this process knows an upper bound on the
// bucket's tokens at any later time t: other instances can only take
// tokens, never add them, and the bucket refills at the policy's rate:
//
//	tokens(t) ≤ min(capacity, tokens(t0) + rate·(t − t0))
//
//	tokens
//	  cap |                         ______________ bound (capped)
//	      |                   _____/
//	 cost |- - - - - - - - -/- - - - - - - - - -  <- first instant a
//	      |            ____/ ·                       request of cost may
//	      |      _____/      ·                       be admitted: before
//	      |_____/  deny here ·   ask the primary     it, deny locally
//	      +--t0--------------+---------------------> t
//
// A request whose cost is above the bound is certainly denied, so the
// [DenyCache] denies it locally, with the RetryAfter the primary itself
// would give, and no call. Every other request goes to the primary, and the
// answer refreshes the bound. An abusive client at 18,000 requests a minute
// against burst 100 at 2 per second costs one primary call per refilled
// token instead of one per request: 99.3% fewer calls, answers identical to
// the plain store's (TestDenyCacheAbusiveClient).
//
// The bound must be exact, not just roughly right: Remaining is rounded
// down to whole tokens, which says little (an empty bucket may be a
// microsecond from its next token), so the cache works in the token
// bucket's integer level units and reads ResetAfter and RetryAfter, which
// are exact to the microsecond, to pin the bucket's deficit (see bound.go
// for the argument). Time is measured on the local clock from the start of
// the primary call, which can only overstate the time elapsed since the
// primary evaluated it. [DenyCacheConfig.ClockMargin] covers the primary's
// clock gaining on the local one (a Redis server clock, or other instances'
// client clocks ahead of ours), and 500 ppm of drift is allowed on top.
//
// Memory is bounded: a fixed number of entries in independently locked
// shards, evicted by a CLOCK hand. An entry is made only when the same
// request made again at once would be denied, so keys under their limit cost
// nothing. Evicting an entry only costs a primary call.
//
// What the bound cannot see: tokens added behind its back. A key reset in
// Redis (call [DenyCache.Forget] after a reset), a Redis restarted empty,
// or a store that forgets a bucket before it is full (memstore's overflow
// bucket when MaxKeys is reached) grant tokens the cache does not know of;
// until its entry runs out (at most the policy's fill time) the cache is
// then stricter than the primary, as strict as the primary had it not lost
// the state. A clock that steps backwards (possible with injected client
// clocks only) also makes it stricter, never looser: a local denial does not
// advance the primary's stamp as a denial by the primary does. Refunds and
// cancelled reservations are the other way to add tokens; the cache stays
// exact across them, as follows.
//
// # Refunds, grants, reservations and leases
//
// Both wrappers are a store.Store, a store.Store, a store.Store
// and a store.Store, passing each call to the primary (which must have the
// operation, or the call returns an error wrapping store.ErrUnsupported).
// A grant (TakeAtMost) only takes tokens, so the DenyCache learns from its
// answer as from a Take's, and a grant its bound proves empty is answered
// locally, exactly. Leases are no bucket: the DenyCache passes them on.
//
// A refund or a cancelled reservation adds tokens, which breaks the fact
// the bound rests on. No bound can absorb a give-back it does not see: any
// charge still standing may be given back at any time, so the only bound
// that holds whatever other instances give back is a full bucket. The
// cache is kept exact instead by never holding an entry that a give-back
// it cannot see could make stale:
//
//   - A give-back made through the cache drops the cache's entry for the
//     key, and keeps the answers of calls then in flight from restoring
//     one, whatever the give-back's own answer (a call that failed may
//     have been applied): the next request goes to the primary.
//   - A call marked refundable (Request.Refundable: its charge may be
//     given back later, perhaps by another instance) is never answered
//     locally and never learnt from, and drops the key's entry. httplimit
//     marks the takes of every ChargeIf route and the reservations of
//     every Delay route, on every instance alike, so the keys of such
//     routes never have an entry: a refund or a cancellation made on one
//     instance is seen by the next request on any other.
//   - A reservation is never learnt from, marked or not: any reservation
//     may be cancelled, by whichever instance holds it.
//   - Keys named by [DenyCacheConfig].Refunded never have an entry: for
//     callers that give tokens back outside httplimit and cannot mark
//     their calls.
//
// So the cache's local denials are the primary's own, with other
// instances refunding and cancelling, as long as every call on a key whose
// tokens any instance gives back is marked (or the key is named in
// Refunded): TestDenyCacheFleetExact checks it with two instances sharing
// one primary, and the faultinject module over Redis through Toxiproxy.
// The price is that such keys cost a primary call per request, as without
// the cache: an attacker who fails logins on a ChargeIf route is limited
// by Redis's answers, not the cache's. A take left unmarked on a key that
// another instance refunds is not covered: the cache may then deny what
// the primary admits, though never after the instant at which the
// primary's last answer for that key said the request could come back
// (TestDenyCacheRefundElsewhere shows both).
//
// A Fallback sends each call through its breaker. When the primary cannot
// answer, a grant or a reservation is answered by the Mode as a Take is
// (the DenyCache's proved denial first, never for a marked call; the local
// share; admitted; or ErrOpen), and a give-back goes to the local store
// under LocalFallback, where the requests of the outage were charged, and
// is an error wrapping ErrOpen in the other modes, which charged nothing
// locally; a reservation the primary made gives nothing back until the
// primary is back. A lease is acquired on the local store under the
// policy's share (LocalFallback), admitted without a lease (FailOpen) or
// refused with ErrOpen (FailClosed); a release or renewal that the
// primary does not hold goes to the local store too, where a lease taken
// during an outage is.
//
// # Fallback: Redis slow or down is not an outage, nor a free-for-all
//
// A [Fallback] calls the primary through a circuit breaker:
//
//	        N failures in a row, or a failure ratio over a window
//	closed ------------------------------------------------> open
//	  ^                                                     |  after CoolDown
//	  |  ProbeSuccesses probes succeed                      v
//	  +--------------------------------------------- halfOpen (≤ Probes in flight)
//	                    a probe fails: back to open
//
// Every primary call carries a deadline of [FallbackConfig.Timeout], so a
// hanging Redis adds at most that to a request (redisstore needs a go-redis
// client built with ContextTimeoutEnabled: true for the deadline to reach
// the socket). What the primary cannot answer (the call failed, the breaker
// is open, or the half-open probes are all in flight) is answered by the
// [Mode]: [LocalFallback] asks a local memstore with the policy scaled to
// this instance's share (algo.Policy.Share: capacity and rate divided by Instances),
// so a fleet of N keeps roughly one limit; [FailClosed] returns an error
// wrapping [ErrOpen]; [FailOpen] admits. Nothing queues: callers beyond the
// probes are answered at once, and no goroutine is started.
//
// Bad input (algo and store sentinels, see store.IsInputError) is returned as
// the primary returned it and never trips the breaker, nor does a caller's
// own context ending. State changes are logged with log/slog and reported
// to [FallbackConfig.OnStateChange].
//
// With httplimit, the mode is chosen per route by the store each route's
// middleware uses: a hybrid.Fallback store keeps limiting locally; the bare
// shared store leaves the decision to httplimit's FailOpen or FailClosed
// (503). TestHTTPLimitModesPerRoute shows the three side by side.
//
// # Token leases: a hot shared key costs a call per batch
//
// One global limit shared by a fleet is one Redis key on one shard, and
// every admitted request is a script call on it. [Leases] takes a batch of
// k tokens in one call (TakeAtMost), admits from it in process (no call,
// no allocation), and gives back what is left (Refund) when the batch's
// Lifetime L ends or the key's demand falls:
//
//   - Demand is measured per key on the injected clock: cost asked per L,
//     an EWMA over windows of L (the current window counts at once, so a
//     burst leases within it). A key is leased while its demand and its
//     cap are at least MinBatch; below, each request is the primary's Take,
//     as without Leases.
//   - k is the demand over L, never more than the cap
//     algo.Policy.BatchCap(L, Instances) = ⌊min(C, ⌊rate·L⌋)/Instances⌋:
//     each instance may hold a fair share of what the bucket refills in L,
//     so no instance starves the others, and a batch lost with its
//     instance is refilled within L. A request of cost c is taken from the
//     batch whole or not at all: the batch is topped up (to at most the
//     cap) when it holds less; a cost above the cap is the primary's Take.
//   - When the primary has too few tokens, the key is paced: for
//     min(L/2, max(L/32, n·g/rate)), g the tokens granted, a request the
//     batch cannot cover is denied without a call. A denial's RetryAfter
//     is the primary's for the tokens the batch lacks, or the pause's
//     end, whichever is later. A primary error is returned as it came:
//     stack Leases over a [Fallback] and its Mode applies once the batch
//     is spent.
//   - A batch is given back exactly once, under the policy it was taken
//     under: when L ends (at the key's next call, or by the SweepEvery
//     goroutine or [Leases.Sweep]), when demand falls, on a policy change
//     of the key, before a Reserve on the key, and at Close. A refund
//     that fails loses its tokens (Stats.Lost): they are never admitted
//     here again, and the bucket refills them. A refund that the primary
//     runs only after this instance gave up on it (a hung Redis that
//     resumes) may land while the instance holds its next batch: the
//     bound's excess grows by that refund, once.
//   - TakeMulti, TakeAtMost, Refund, RefundMulti, CancelReservation,
//     peeks (cost 0), calendar quotas and concurrency leases pass through
//     unleased; a refund goes to the shared bucket, not to the batch.
//
// The bound (algo.Policy.BatchBound): in any closed interval of length t,
// the admissions at one key over the fleet are at most C + ⌊rate·t⌋ +
// Instances·cap, which is at most C + ⌊rate·(t + L)⌋, as long as at most Instances instances lease: each holds at most cap
// tokens in its batch (and its refund in flight), every admission spends
// a token held at the interval's start or granted in it, and the bucket
// grants at most C + rate·t plus what is given back to it. L is the price:
// the fleet may admit up to min(C, rate·L) more than one bucket would.
// TestLeasesBound checks it with rapid over 2 to 8 instances with skewed
// clocks, and catches a planted batch that is not charged.
//
// Put Leases outermost: Leases(Fallback(DenyCache(redis), local)). A
// DenyCache in front of Leases learns only from the primary's own answers.
// httplimit's and grpclimit's Config.Leases and the rls server's
// Options.Leases build one over their store.
//
// LeasesConfig.Observer receives an observe.LeaseBatch for each batch
// taken and given back (and one for a batch spent to its last token),
// with the requests admitted from the batch since the key's previous
// report; the adapters in contrib export them as ratebucket_lease_*
// counters. A store observed under the Leases (observe.Wrap) sees only
// the calls that reach it.
//
// # Composing
//
// Put the DenyCache inside the Fallback, as in the example at the top: the
// cache then learns only from Redis's answers, the breaker counts only
// Redis's answers as health (a local denial proves nothing about Redis),
// and while Redis is failing a request the cache proves denied stays denied
// in every Mode, so an abuser who drained Redis's bucket does not get a
// fresh local share. Under LocalFallback the cache also counts the local
// share's admissions against its bound, so the abuser gets no more than
// Redis's own refill would give it (nor more than the share); the counted
// bounds are dropped when the breaker closes, since Redis never saw those
// admissions. The other order works too; each wrapper tells the
// other which answers came from the primary.
//
// Both wrappers pass the store conformance suite over memstore and over
// redisstore on a real Redis. The fault-injection tests (Toxiproxy between
// go-redis and redis-server: latency, resets, partitions, a killed server,
// slow and sliced replies) live in the nested module faultinject.
package hybrid
