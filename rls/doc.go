// Package rls is a rate-limit server speaking Envoy's
// envoy.service.ratelimit.v3.RateLimitService, the API of
// envoyproxy/ratelimit: Envoy's envoy.filters.http.ratelimit filter, Istio
// and any other client of that API use it unchanged. It reads
// envoyproxy/ratelimit's YAML configuration and answers with ratebucket's
// exact token buckets instead of fixed windows. The command
// ratebucket-rls (in cmd/ratebucket-rls) runs it.
//
// # Requests and answers
//
// A RateLimitRequest names a domain and a list of descriptors, each a list
// of key/value entries. Each descriptor is matched against the domain's
// configuration ([Load]); the buckets of the descriptors that matched a
// limit are taken together, hits_addend tokens each (a descriptor's own
// hits_addend wins over the request's; 0 means 1 at the request level,
// a peek at the descriptor level). Each descriptor gets a status:
//
//	code                  OK or OVER_LIMIT
//	current_limit         the matched rate_limit (name, requests_per_unit, unit); unset if none
//	limit_remaining       whole tokens left; 4294967295 for unlimited
//	duration_until_reset  when OK, until the bucket is full again; when OVER_LIMIT,
//	                      the exact wait until this request would be admitted
//
// and the overall code is OVER_LIMIT if any descriptor not in shadow mode
// is over its limit. With [Options].ResponseHeaders the response also
// carries x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset and
// ratelimit for the descriptor with the fewest tokens left (or the
// refusing one with the longest wait), plus retry-after when refused;
// Envoy adds them to the client's response, as with envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED. The names and meanings are httplimit's
// HTTP headers and grpclimit's metadata, pinned for all three by
// internal/testdata/ratelimit-headers.json:
//
//	x-ratelimit-limit      the bucket's capacity
//	x-ratelimit-remaining  whole tokens left
//	x-ratelimit-reset      Unix seconds, rounded up, when the bucket is full again
//	ratelimit              draft-ietf-httpapi-ratelimit-headers: "name";r=remaining;t=seconds until full
//	retry-after            when refused: seconds until the request could pass, at least 1
//
// envoyproxy/ratelimit sends x-ratelimit-reset as a delta, the seconds
// until its window resets, as the IETF draft does. Here that delta is
// ratelimit's t (rounded up, until the bucket is full), and the wait of a
// refused request is retry-after; x-ratelimit-reset is a Unix time.
//
// # Configuration
//
// The format is envoyproxy/ratelimit's: one domain per file, nested
// descriptors with key and optional value (a value ending in '*' is a
// prefix wildcard), rate_limit with unit (second, minute, hour, day, week,
// month, year) and requests_per_unit, unlimited, name and replaces,
// shadow_mode, share_threshold. quota_mode is answered like shadow_mode;
// detailed_metric and value_to_metric are accepted and have no effect,
// because metric labels here never carry descriptor values. Matching is
// envoyproxy/ratelimit's: level by level, key and value first, then the
// wildcards in file order, then the key alone; a limit applies only to a
// descriptor exactly as long as its path.
//
// [Load] refuses what the server could never honour, as a [*ConfigError]
// naming the file, the line and the descriptor's path (domain.key_value):
// a rate_limit that is not a valid token bucket, shadow_mode or quota_mode
// on a descriptor without a rate_limit of its own or on an unlimited one,
// a replaces naming no rate_limit of the domain, and a lease it cannot
// serve (see Hot descriptors).
//
// One extension, burst, makes the bucket's capacity differ from
// requests_per_unit:
//
//	rate_limit:
//	  unit: minute
//	  requests_per_unit: 60   # refilled at 1 per second, continuously
//	  burst: 10               # at most 10 at once (default: 60)
//
// # Token bucket against fixed window
//
// envoyproxy/ratelimit counts requests per clock window (per second,
// minute, ...) and resets the count at the window's boundary. Here each
// bucket holds up to burst tokens (requests_per_unit by default, so one
// unit's worth), refilled continuously at requests_per_unit per unit. The
// differences a client can see:
//
//   - No boundary spike. A fixed window admits 2× its limit across a
//     boundary (all of it at 0:59, all again at 1:01); the bucket never
//     admits more than burst + rate·t in any interval of length t.
//   - Gradual recovery. After a burst, capacity comes back a token at a
//     time (10 per second → one every 100 ms), not all at once when the
//     window ends, so a client that paces itself is never refused.
//   - Exact waits. duration_until_reset on a refusal is the exact time
//     until the request would pass, not the time to the window's end.
//   - A refused request charges nothing, and a request whose descriptors
//     are taken together charges none of them if any refuses;
//     envoyproxy/ratelimit increments every counter whatever the outcome.
//   - requests_per_unit 0 refuses everything, as there; a hits_addend
//     above the burst can never pass and is refused without charging.
//
// Costs known only after the response (LLM tokens: issue 30) are not
// settled here. Envoy can send a second request when the stream is done
// (a rate limit with apply_on_stream_done, its hits_addend taken from the
// response), but the protocol does not say which request is which, and
// that one's answer is ignored: this server takes its hits_addend as any
// other, refused and uncharged when it does not fit, where a settlement
// (store.Store.Settle) would charge it into bounded debt against a hold
// made on the request path. The ratelimit.v3 API carries no hold to
// settle, so a settlement would need a configuration extension naming the
// response-path descriptors; until then, charge such costs in the
// application, with httplimit's Config.Settle or grpclimit's Rule.Settle.
//
// # Stores, atomicity and Redis Cluster
//
// Buckets live in a store.Store: a redisstore (one script call per
// request, auto-pipelined, on Redis's clock) so that every server instance
// shares them, or a memstore for a single node. The descriptors of a
// request are taken with one store.Store call: all are charged or
// none. On Redis Cluster that needs every key in one slot, so keys carry a
// hash tag ([HashTag]): by default the domain and the descriptor's first
// entry, so a request whose descriptors all start with the same entry
// (the usual remote_address, then remote_address and path) is atomic, and
// keys still spread over the cluster. Descriptors of a request that land
// in different slots are taken slot by slot, in order; once one group
// refuses, the later groups are only peeked at, and the groups taken
// before it stay charged.
//
// A bucket's key is derived from the domain and the descriptor's entries,
// escaped and hashed when long, so no descriptor value can forge another's
// key or make a key longer than 256 bytes. A limit changed by a reload
// keeps its buckets: the new policy applies to them at once.
//
// # Hot descriptors
//
// A descriptor every request carries (a global limit, a domain's total)
// is one bucket, one Redis key, and every request a script call on it.
// Mark it lease: true (beside key and value, as shadow_mode) and give the
// Service Options.Leases (ratebucket-rls: -lease-instances, the number of
// servers): its bucket is then spent from batches leased by
// hybrid.Leases, one store call per batch, admitted in process, and given
// back when the batch's lifetime ends, and the limit stays one for the
// fleet within the bound of hybrid's "Token leases" (the excess is at
// most min(burst, rate·lifetime)). While a descriptor's demand is below
// the lease's MinBatch each request is a store call, as without it.
// Leased descriptors are taken one by one before the request's others; a
// refusal by a leased one leaves the others uncharged, and a refusal by
// the others gives the leased tokens back, so a request is still charged
// all or nothing. A leased descriptor's remaining tokens (and
// x-ratelimit-remaining) are its batch's. Load refuses lease: true on a
// descriptor without a rate_limit of its own, on an unlimited one or one
// of requests_per_unit 0, and beside shadow_mode or quota_mode; NewService
// refuses lease: true descriptors without Options.Leases.
//
// # Operations
//
// [Loader] reloads the configuration when its files change (or on SIGHUP)
// without dropping requests; a file that fails to load keeps the previous
// configuration and is logged and counted in [Metrics]. [Server] serves
// the gRPC API and the gRPC health service, /healthz, /readyz and
// /metrics, and shuts down gracefully.
package rls
