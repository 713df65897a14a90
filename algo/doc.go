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
// # Why not a fixed window
//
// [FixedWindow] counts requests per window and resets the count at each
// boundary. A client can spend a full limit just before a boundary and again
// just after it: 2× the limit in a moment. It also punishes honest bursts that
// happen to straddle a boundary. [SlidingWindow] (the weighted two-window
// counter) narrows the spike but only estimates. Both exist here to be
// compared with the token bucket in package sim; they share [State] and
// [Result] with it.
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
package algo
