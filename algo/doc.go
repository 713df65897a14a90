// Package algo holds the rate-limiting math of ratebucket, and nothing else:
// no clock reads, no I/O, no goroutines, no allocation per call. Every
// backend (memstore, redisstore) is a way of keeping the [State] this package
// computes; redisstore runs a Lua twin of [TokenBucket] that tests prove
// identical, bit for bit.
//
// # The token bucket
//
// A bucket holds at most Capacity tokens and refills continuously at a fixed
// [Rate]. A request of cost n takes n tokens if the bucket holds at least n;
// otherwise it is denied, takes nothing, and learns exactly how long to wait.
//
//	      refill: Rate tokens per Period, continuously
//	            |
//	            v
//	  +-------------------+  <- Capacity (the burst)
//	  |                   |     tokens above this spill away
//	  |~~~~~~~~~~~~~~~~~~~|  <- tokens now
//	  |###################|
//	  |###################|
//	  +---------+---------+
//	            |
//	            v
//	each request takes cost tokens, or is denied with RetryAfter
//
// In any interval of length t the bucket admits at most Capacity + rate·t
// tokens' worth of requests, and a client that stays under the rate is never
// denied: bursts are allowed as long as the long-run average is respected.
//
// # Beyond take: refund, take at most n, reserve
//
// [TokenBucket.Refund] gives tokens back (a failed upload need not cost
// its quota), never above Capacity. [TokenBucket.TakeAtMost] grants as many
// whole tokens as the bucket holds, up to n, for batch consumers.
// [TokenBucket.Reserve] admits a request whose tokens will exist within a
// maximum wait, with the exact Delay after which it may proceed: the
// bucket goes into debt (at most one full bucket of it), requests are
// served in the order they reserved, and a Take is denied until the debt
// has refilled. [TokenBucket.Cancel] gives a waiting reservation's tokens
// back exactly when no other was queued behind it since. Requests that
// proceed at their admitted times keep the law above.
//
// [TokenBucket.Hold] takes an estimate of a cost known only after the
// work (LLM tokens, bytes), and [TokenBucket.Settle] corrects it to the
// actual cost: the difference back, or the extra charged into at most one
// full bucket of debt ([Policy.MaxDebt]). The cost charged in any interval
// of length t then stays within [Policy.SettleBound], the law above plus
// the debt bound.
//
// # Calendar quotas
//
// A [Quota] is N per calendar period: a day, a week from Monday or a
// month from the 1st, starting at midnight UTC or at a fixed offset from
// it. It is a fixed window whose boundaries are calendar instants, and it
// is a [Policy], so it goes wherever a bucket's does: beside a burst limit
// in a multi-limit take, "bursts of 100 at 2/s AND 10,000 a month", all
// charged or none. [TokenBucket.Take] decides it: admitted while the
// period's count plus the cost is at most N, else denied until exactly the
// next period's first µs ([Policy.QuotaPeriod]: months of 28 to 31 days,
// leap years included, in integers the Lua twin repeats).
//
// # Why not a fixed window
//
// [FixedWindow] counts requests per window and resets the count at each
// boundary. A client can spend a full limit just before a boundary and again
// just after it: 2× the limit in a moment. It also punishes honest bursts that
// happen to straddle a boundary. [SlidingWindow] (Cloudflare's weighted
// two-window counter) keeps the never-exceed law, so it has no spike, but
// its estimate assumes the previous window's traffic was even, so what it
// admits depends on when, inside a window, earlier requests came.
//
// Both exist to be compared with the token bucket, in package sim and in the
// examples here, and the comparison is fair: their window is the policy's
// [Policy.FillTime] (capacity/rate) and their limit is the capacity, so all
// three admit the same burst and the same long-run rate. They implement the
// same [Algorithm] interface over the same [State] and [Result]; a store
// keeps any of them.
//
// # Stores and time
//
// Every [Algorithm] is a pure function of (policy, state, now, cost): the
// caller passes the time in, and the same arguments give the same answer.
// A state whose [Algorithm.IdleAt] has passed answers exactly as the zero
// State, so a store may drop it. A caller whose clock is behind the stored
// state is evaluated at the stored time: a lagging clock mints nothing and
// never moves the state back. A denied request changes nothing a later
// request can observe, and its RetryAfter is exact to the microsecond.
//
// A [Result] says whether the request was admitted, the whole tokens
// Remaining, RetryAfter and ResetAfter. It does not repeat the limit: a
// caller that reports it (an X-RateLimit-Limit header) takes
// [Policy.Capacity] of the policy it passed. With four fields a Result is
// small enough for the compiler to return it in registers, which keeps it
// off the stack on the hot path of every store.
//
// # Leases: at most N in flight
//
// A rate limits how often; a [LeasePolicy] limits how many at once. A
// holder acquires a lease ([LeasePolicy.Acquire]) before its work and releases it
// ([Leases.Release]) after; at most Limit leases of a key are live at once,
// and a denial says when the earliest one expires. Every lease also
// expires TTL after it was acquired, so a holder that crashes without
// releasing frees its slot after at most TTL; one that works longer renews
// its lease ([LeasePolicy.Renew]). Releasing a lease twice, or one that expired,
// is a no-op reported as such. The state ([Leases]) is a set of
// ⟨expiry, id⟩ pairs, which Redis keeps as a sorted set. It keeps no time
// of its own: each call is evaluated at the now it is given, so stores
// sharing a key should share a clock (redisstore's server clock). It grows
// by append, so an acquire allocates only when a key's state outgrows its
// capacity.
//
// # Exact integer arithmetic
//
// Time is an int64 count of microseconds since the Unix epoch. A bucket's
// state is two integers: the stamp of its last update and its deficit (how
// far below full it is) in units of 1/[Policy.Unit] of a token. With the
// rate reduced to lowest terms as Refill units per microsecond, refilling is
// integer multiplication and retry-after is integer ceiling division, so the
// answer is exact: no float rounding, no drift over days, and the same
// result in Go and in Redis's Lua (whose numbers are doubles, exact for
// integers below 2^53). [Policy.Validate] enforces bounds that keep every
// intermediate below 2^53; the argument is written next to the math in
// tokenbucket.go.
//
// The window algorithms count whole tokens per window. The sliding window's
// comparison prev·(W−e) + (curr+cost)·W ≤ Capacity·W can reach 2^92, so it
// is formed in 128 bits with math/bits, again with no rounding; these two
// have no Lua twin.
package algo
