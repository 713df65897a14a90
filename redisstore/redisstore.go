// Package redisstore keeps token buckets in Redis, so that every instance of
// an application shares one bucket per key: with per-instance memory
// limiters, three instances behind a load balancer admit three times the
// limit; with redisstore they admit the limit.
//
// # How a Take works
//
// Each [Store.Take] is one EVALSHA of an embedded Lua script
// (tokenbucket.lua) that reads the bucket, applies the token-bucket math and
// writes the new state atomically; so is each of the operations below
// (refunds, partial grants, reservations). The script is the exact twin of
// algo.TokenBucket: integer microseconds, every intermediate below 2^53
// (Lua's numbers are doubles), integer replies only. The tests drive algo,
// memstore and this store with the same random requests and require
// identical Results.
//
// # Auto-pipelining
//
// One round trip per Take caps a busy process at what one round trip at a
// time per connection allows. So, by default, Takes, TakeMultis and the
// operations below issued at once by many goroutines are coalesced: they
// queue, and a few writers each send up to 64 of them in one pipeline,
// which Redis answers in one round trip. A call that finds no writer
// running is sent at once on the caller's goroutine, so a lone caller pays
// one plain round trip, as without pipelining; while a pipeline is in
// flight, calls wait for the next one, and another writer starts once 4
// are waiting. On a cluster each master has its queue and writers (on a
// Ring each shard), so a pipeline never waits for another master's calls.
// The Takes of one bucket each on the server clock that leave in one
// pipeline go as one script call (a batch, per cluster slot), which
// decides them one by one, each as if alone, and pays the call's own cost
// once. A call whose context ends while it is queued (or, for a
// context without a deadline, whose Config.Timeout passes: a deadline the
// call carries as a value, with no timer of its own) is never sent and
// charges nothing; each call gets its own result or error; only
// NOSCRIPT replies are sent again. [PipelineConfig] has the details and
// knobs; Disabled turns it off. Writers run only while calls are queued,
// and [Store.Close] waits for them.
//
// # Clocks
//
// By default the script reads the Redis server's clock (TIME): one clock for
// the whole fleet, immune to skew between application instances. With
// [Config.Clock] set the caller's clock is used instead (tests and the
// simulator pass a manual clock).
//
// # Keys, memory and expiry
//
// The bucket for key k lives at Config.Prefix + k (default prefix "rb:").
// With the server clock a bucket is one integer, which Redis keeps inside
// the key's object, and the key expires exactly when the bucket is full
// again (PEXPIREAT, rounded up to the millisecond): an absent key is a full
// bucket, and idle clients hold no memory. The stamp of the last update is
// not stored but rebuilt from the expiry time, so the server clock needs
// Redis 7.0 or later (PEXPIRETIME). For a 20-byte key this measures 72
// bytes by MEMORY USAGE and about 134 bytes per key of used_memory over
// 100k keys, against 120 and 182 for a hash {tokens, ts} with EXPIRE
// (go test -run TestMemoryPerKey -v). With a client clock the value is
// "deficit:stamp:capacity:unit:refill" (136 and 194 bytes) and the expiry
// carries [Config.TTLMargin], since Redis expires keys on its own clock.
//
// # Changing a policy
//
// A call may name another policy than the one a bucket was written under
// (a limit raised or lowered at runtime): the script then converts the
// bucket exactly as algo.TokenBucket.Rebase does, under
// [Config.OnPolicyChange] (keep its tokens, capped at the new capacity,
// by default; or keep the fraction of a full bucket), and the call stores
// it converted, so the change happens at that call, as in memstore. For
// that each value says which policy wrote it: a server-clock value ends
// with its policy's number (two digits) in a registry of policies, one
// small hash per cluster slot ("pol:" + prefix, with a hash tag for the
// slot on a cluster: 824 bytes by MEMORY USAGE with 10 policies), so a
// bucket stays one integer of 72 bytes; past 100 policies in a slot, or
// for a deficit above about 9.2e13 level units, the value names its
// policy in full (104 bytes). WIRE.md ("Policy changes") has the details. On a *redis.Ring each shard keeps a registry of its
// own under the one name: a Ring sends a call to its first key's shard
// and a single server takes any key, so a bucket and the registry its
// value names are always on one server, as on a cluster's slot.
//
// Keys are only ever deleted by expiry or Reset. Under a maxmemory eviction
// policy Redis may evict a key early, which refills its bucket: give the
// limiter's Redis room (or noeviction) rather than letting it evict.
//
// On Redis Cluster keys spread over slots by their full name; the prefix is
// not a hash tag. To keep related buckets in one slot (required by
// [Store.TakeMulti]), make their keys with store.GroupKey and one group:
// it puts the group in braces, which Redis Cluster hashes as the key's hash
// tag ("burst{user:42}" and "daily{user:42}" share a slot). Keys with a
// hash tag of their own work too.
//
// # Refunds, partial grants and reservations
//
// Store is a store.Store, a store.Store and a store.Store.
// [Store.Refund] and [Store.RefundMulti] give tokens back (a failed upload
// need not cost its quota), [Store.TakeAtMost] grants what the bucket
// holds up to n, and [Store.Reserve] admits a request that may proceed
// after an exact Delay instead of refusing it, putting the bucket into
// debt until then; [Store.CancelReservation] gives a waiting reservation's
// tokens back with its Ticket. Each is one call of the bucket script, an
// op that is the Lua twin of algo.TokenBucket's Refund, TakeAtMost,
// Reserve and Cancel (the same tests as Take hold them to it), checked
// with store.CheckRequest and pipelined and timed out as Take is, on the
// server clock or Config.Clock, standalone or on a cluster, where
// RefundMulti's keys share a slot as TakeMulti's must (store.GroupKey;
// else store.ErrNotTogether). A refund of 0, or to a key Redis does not
// hold (a full bucket), writes nothing; a cancel writes only what it gives
// back. The debt is at most one full bucket: a key in debt holds its
// deficit as any bucket does, still one integer (72 bytes by MEMORY USAGE
// at a 20-byte key), and expires when the bucket is full again, debt
// included. A Ticket's At is a time on the bucket's clock (Redis's, by
// default), so a reservation made through one Store can be cancelled
// through another.
//
// [Store.Hold] takes an estimate for work whose cost is known only after
// it, and [Store.Settle] closes the hold at the actual cost, the extra
// charged into at most one bucket of debt: the ops "h" and "e" of the
// same script, twins of algo.TokenBucket's Hold and Settle. The open
// hold's record is a string key in the bucket's slot that expires at the
// hold's deadline (WIRE.md, "Holds"); a settle checks and deletes it in
// the call that changes the bucket, so a hold settles once, through any
// Store or the Node package.
//
// # Requests in flight
//
// Store is a store.Store: at most N leases of a key live at once, so a
// ratebucket.ConcurrencyLimiter over it bounds the requests of a client in
// flight across a fleet. Each AcquireLease, ReleaseLease and RenewLease is
// one call of a second embedded script, lease.lua, the Lua twin of
// algo.LeasePolicy.Acquire, Leases.Release and LeasePolicy.Renew step for step, on the
// server clock (or Config.Clock) and auto-pipelined like Take. A key's
// leases are a sorted set at Config.LeasePrefix + key ("lease:rb:" + key
// by default, never a bucket's key), each lease id scored by its expiry
// in µs. A call drops the expired leases (ZREMRANGEBYSCORE -inf now),
// then renews the id's live lease if it holds one, admits a new one while
// fewer than the limit remain, or else answers the exact wait until the
// lease at rank n-limit expires. The key expires with its last lease
// (PEXPIREAT, rounded up to the millisecond; with a client clock, plus
// TTLMargin, as buckets) and is deleted when its last lease is released,
// so an idle key holds no memory. On a cluster its slot is that of the
// key's own hash tag, as for a bucket (store.GroupKey). For a 20-byte key
// and 26-byte ids (store.NewLeaseID), MEMORY USAGE is 120 bytes with one
// lease, 520 with 10, about 40 bytes a lease up to 128 (a listpack), then
// about 140 (a skiplist): 17960 with 129, 118016 with 1000 (go test -run
// TestLeaseMemory -v). A key that holds anything else (another type, a
// score above 2^53-1) is repaired as an empty lease set and reported to
// OnRepair, or refused under KeepCorrupt: its holders, if any, are
// unknown, so it may admit up to the limit again. Config.Functions does
// not apply to leases: the Function library holds the bucket script alone,
// and lease calls use EVALSHA, and EVAL after NOSCRIPT.
//
// # Retries and timeouts
//
// A call that timed out may already have charged the bucket, so the store
// never replays one: the script runs as a go-redis command whose NoRetry is
// set, which go-redis honours for both its per-node retries (MaxRetries) and
// the cluster client's redirect loop (MaxRedirects), while it still follows
// MOVED and ASK. Users need not change MaxRetries. The only retry is
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover), answered by EVAL
// of the source; go-redis honours NoRetry for pipelines too (it re-sends
// no pipeline that holds a NoRetry command), and within a pipeline only the
// commands that replied NOSCRIPT are sent again. A call whose context has no
// deadline gets [Config.Timeout]. The deadline reaches the socket only if the
// client was built with ContextTimeoutEnabled: true (recommended); otherwise
// the client's ReadTimeout (default 5s) bounds a slow call. [New] refuses a
// *redis.Client or *redis.ClusterClient that would wait forever.
//
// A call returns by its deadline (its context's, or the Timeout) however
// the connection fails, on every path: pipelined or not, standalone or on a
// cluster. Whether the script may have run is in the error. The store
// learns, from go-redis asking for the bytes of the call's arguments, when
// its request is being written; a call go-redis never began to write (a
// refused or failed dial, an unanswered handshake, no free connection in
// the pool, or still queued for a pipeline) fails with an error matching
// [ErrNotSent]: nothing was sent and nothing charged, and a caller may
// retry it or answer locally. A call whose request was written and that
// got no reply by its deadline (a hung or partitioned server) says "the
// script may have run": Redis may still run it. A refused dial fails at
// once when the client dials once (DialerRetries: 1); with go-redis's
// default of 5 attempts 100 ms apart it fails after 0.4 s, or at the
// Timeout if that is sooner. Measured on loopback with a Timeout of 150 ms
// (go test -run 'Refused|Hung' -v): refused, 0.1 to 0.3 ms with one dial
// and 150 ms with the default dials, on every path; a stopped server or a
// listener that never answers, 150 to 152 ms, "may have run" on a
// connection made before it stopped and ErrNotSent on a fresh one. One wait
// is go-redis's own: a new *redis.ClusterClient loads COMMAND from a random
// node before its first single command (for its routing policies), under a
// 5 s timeout of its own and a lock that holds its other calls, so a
// client made while a node hangs may keep its first calls 5 s; build it
// with DisableRoutingPolicies: true (the store's calls name their keys and
// need none), or let it make one call while the cluster is whole.
//
// # Failover
//
// When a Redis Cluster master dies, the cluster fails it after
// cluster-node-timeout and promotes its replica, but go-redis v9.23's
// ClusterClient keeps sending the dead master's slots to it: it reloads
// its slot map on MOVED and ASK, and otherwise only every
// ClusterStateReloadInterval (60 s by default), never because a node
// refuses connections (go-redis issue #3979). A third of the keys of a
// three-master cluster would fail for up to a minute. So a Store on a
// *redis.ClusterClient asks the client to reload its cluster state
// (ClusterClient.ReloadState, which returns at once) when a call fails
// with a connection error, a dial error or a deadline (go-redis reports a
// pipeline that waited on a dead node as late), at most once per 200 ms: a
// storm of failures, or a Redis that is only slow, costs at most five
// CLUSTER SLOTS a second per process. This works whatever options the
// client was built with, and the Store starts no goroutine for it.
//
// What a failover costs, measured on loopback with three masters and a
// replica each, cluster-node-timeout 2 s, and 1000 keys under steady load
// (go test -run TestClusterFailover -v): the replica was promoted 3.0 to
// 5.0 s after kill -9, and every call succeeded again from 3.0 to 4.4 s
// after it, at most 0.2 s after the promotion; without the reloads every
// key of the dead master still failed 5 s after the promotion. Until then
// the dead master's keys fail ("connection refused", each call within
// 0.5 s while go-redis retries the dial, or by the Timeout if sooner, with
// ErrNotSent for a call that got no connection), and every key answers
// CLUSTERDOWN for the 0.8 to 1.1 s before the promotion. The keys on the
// healthy masters fail in no other way: the auto-pipeline keeps each
// master's calls apart ([PipelineConfig]), so none waits for the dead
// master (when one queue fed them all, 14 to 20 calls on the healthy
// masters' keys timed out in each run, after Config.Timeout, with the
// pipelines they shared with its calls). The promoted replica lacks the writes
// the dead master acknowledged but had not yet sent it, so a bucket can
// come back fuller than it was, by at most what it admitted in that
// replication lag; measured, no key admitted more than capacity + rate·t.
//
// What you may tune: cluster-node-timeout on the servers, most of the cost
// (the promotion came 1.0 to 3.0 s after it; with Redis's default of 15 s,
// expect 16 to 18 s of errors); the client's DialerRetries (5, 100 ms
// apart), which make each call to a dead master wait 0.4 s, and a pipeline
// up to MaxRedirects+1 times that, each bounded by the call's deadline;
// the Store's Timeout; and what a failed call
// means: httplimit.FailOpen (the default) admits it, so the dead master's
// keys are unlimited meanwhile, httplimit.FailClosed refuses it, and
// hybrid.NewFallback answers from a local store with this instance's share
// of the limit. The 200 ms spacing is fixed: go-redis waits as long
// between two reloads anyway.
//
// A Redis with persistence off that restarts comes back empty, so every
// bucket it held comes back full: each key may admit its capacity again
// (go test -run TestRestartRefillsBuckets -v). A standalone server's
// restart cost no failed call; a cluster master restarted before the node
// timeout keeps its slots and answers CLUSTERDOWN for about 2 s (Redis's
// rejoin delay) before it serves full buckets. A replica does not help
// then: it copies the empty master. Persistence (appendonly) keeps the
// buckets across a restart.
//
// # Errors
//
// A key that holds something that is not a bucket (another Redis type,
// garbage, a value without its expiry, the other clock's format: written
// by something else, or by a bug) is repaired by default: the script takes
// it as an empty bucket at that instant, decides on it and rewrites it, and
// [Config.OnRepair] hears of it (see [RepairCorrupt] for why the law still
// holds). [KeepCorrupt] keeps the old behaviour: an error matching
// store.ErrCorruptState on every call until [Store.Reset].
//
// Bad input is refused before Redis is called, with the store package's
// sentinels (store.CheckRequest): among them a key longer than
// [Config.MaxKeyLen] (256 bytes by default, store.ErrKeyTooLong), so a
// client choosing its own keys cannot make one bucket hold a megabyte.
// Inspect on a key that holds no bucket (and any call under KeepCorrupt)
// gives an error matching store.ErrCorruptState; [Store.Reset] deletes the
// key. Redis failures
// are returned wrapped, so errors.Is reaches context errors and the go-redis
// error underneath; a call that was never sent also matches [ErrNotSent]
// (see "Retries and timeouts").
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Defaults for [Config].
const (
	DefaultPrefix    = "rb:"
	DefaultTimeout   = time.Second
	DefaultTTLMargin = time.Minute
)

// ErrUnboundedClient reports a client that would wait forever on a slow
// Redis: no read timeout, and context deadlines not applied to the socket.
var ErrUnboundedClient = errors.New("redisstore: client has no read timeout and ignores context deadlines")

// ErrHashTagPrefix reports a Config.Prefix that contains a brace: a hash
// tag ("{...}") would hash every bucket to one slot, one node of the
// cluster, and a lone brace would take the keys' own hash tags (those of
// store.GroupKey) apart. Put hash tags in the keys instead.
var ErrHashTagPrefix = errors.New("redisstore: prefix contains a brace")

// ErrInvalidConfig reports a Config field out of range.
var ErrInvalidConfig = errors.New("redisstore: invalid config")

// Config configures a [Store]. The zero value works: prefix "rb:", the
// server clock and a 1s timeout.
type Config struct {
	// Prefix is put before every key. The default is "rb:". A prefix
	// with a hash tag is refused ([ErrHashTagPrefix]): every key would
	// then live in one cluster slot.
	Prefix string
	// LeasePrefix is put before the keys of lease sets (store.Store: see
	// "Requests in flight"). The default is "lease:" + Prefix, as in
	// "lease:rb:user{42}". Neither of Prefix and LeasePrefix may begin
	// the other ([ErrInvalidConfig]), so a bucket key is never a lease
	// key, and it may hold no brace ([ErrHashTagPrefix]).
	LeasePrefix string
	// Clock, when set, is the clock the buckets use; nil means the Redis
	// server's clock (TIME inside the script), the right choice for a
	// fleet. A github.com/benbjohnson/clock Clock satisfies it.
	Clock store.Clock
	// Timeout bounds a call whose context has no deadline: the call
	// returns by then, whatever Redis does, with an error matching
	// context.DeadlineExceeded. The wait for a connection counts: a dial
	// go-redis is still retrying, an unanswered handshake or a full pool
	// end at the deadline too, with an error matching [ErrNotSent]
	// (nothing was sent, nothing charged); once the call's request is
	// written, the error says the script may have run. A refused dial
	// fails the call sooner, as soon as go-redis gives up dialing, also
	// with ErrNotSent: go-redis's DialerRetries (5 attempts 100 ms apart
	// by default) make that 0.4 s, so build the client with
	// DialerRetries: 1 for it to fail at once. The deadline reaches the
	// socket only with ContextTimeoutEnabled: true. The default is 1
	// second; a negative value means no store-level timeout.
	Timeout time.Duration
	// TTLMargin applies with a client Clock only. Redis expires keys on its
	// own clock, which may run ahead of the client's (a mock clock that
	// stands still): a key that expired early would hand out a full bucket.
	// So keys expire TTLMargin after the bucket would be full in client
	// time. The default is 1 minute; a negative value means keys never
	// expire (they are deleted when a Take finds them full, or by Reset).
	TTLMargin time.Duration
	// Pipeline configures auto-pipelining of the bucket calls (Take,
	// TakeMulti, refunds, partial grants, reservations) and the lease
	// calls, on by default: see [PipelineConfig].
	Pipeline PipelineConfig
	// Corrupt says what a Take does with a key that holds something that
	// is not a bucket (another type, garbage, a value with no expiry, the
	// other clock's format). The default, RepairCorrupt, rewrites it as an
	// empty bucket and reports the repair to OnRepair; KeepCorrupt leaves
	// it and fails the call with store.ErrCorruptState.
	Corrupt CorruptMode
	// OnRepair is called, on the caller's goroutine after the call
	// returns, once for each key a call repaired, with an error wrapping
	// store.ErrCorruptState that says what the key held. The default logs
	// it with slog.Default() at level Warn.
	OnRepair func(key string, err error)
	// Functions, when set, loads the script as a Redis Function library
	// (Redis 7 or later) and calls it with FCALL instead of EVALSHA; the
	// library is named after the wire version and the script's SHA1 (see
	// [FunctionLibrary]). Functions persist with the data and replicate,
	// so a restart with persistence or a failover to a replica needs no
	// reload; a server without the library (flushed, or a new empty node)
	// is loaded on the first call that finds it missing, on every master,
	// and that call is sent again, once: it had not run. The default is
	// EVALSHA, with EVAL when the server answers NOSCRIPT.
	Functions bool
	// MaxKeyLen bounds a key's length in bytes, not counting Prefix: a
	// longer key is refused before Redis is called, with an error matching
	// store.ErrKeyTooLong. The default (0) is store.DefaultMaxKeyLen (256);
	// a negative value means no bound.
	MaxKeyLen int
	// Observer, when set, receives an observe.PipelineBatch for each pipeline
	// the auto-pipelining sends (a call sent alone is a batch of 1; none
	// with Pipeline.Disabled), labelled with Name (default DefaultName,
	// "redis"). Observe the decisions with observe.Wrap around the store.
	Observer observe.Observer
	Name     string
	// OnPolicyChange is what a bucket keeps when a call names another
	// policy than the one it was written under (see "Changing a
	// policy"): the default, algo.KeepTokens, keeps its tokens, capped at
	// the new capacity; algo.Proportional keeps the fraction of a full
	// bucket. Every Store sharing buckets should be configured alike.
	OnPolicyChange algo.ChangeRule
}

// CorruptMode is what a Store does with a key that holds no bucket.
type CorruptMode int

const (
	// RepairCorrupt, the default, takes a key that holds something that
	// is not a bucket as an empty bucket stamped at the call's time: the
	// call (and later ones) are decided on it, so a request is denied
	// until the bucket refills at the policy's rate, and the key is
	// rewritten as that bucket in the same script call. An empty bucket
	// is the safe guess: whatever the key held, its owner cannot get more
	// tokens than a bucket drained at that instant would give, so the law
	// (capacity + rate·t in any interval of length t) holds across the
	// repair. The repair is reported to [Config.OnRepair]. Inspect never
	// repairs.
	RepairCorrupt CorruptMode = iota
	// KeepCorrupt leaves such a key as it is and fails every call on it
	// with an error matching store.ErrCorruptState until it is Reset.
	// With a fail-open caller that client is then unlimited: choose it
	// only when something else watches for those errors.
	KeepCorrupt
)

// Store is a [store.Store], [store.Store], [store.Store],
// [store.Store], [store.Store] and store.Store on Redis. It is
// safe for simultaneous use by multiple goroutines. It does not own the
// client: closing the Store does not close it.
type Store struct {
	rdb         redis.UniversalClient
	prefix      string
	leasePrefix string
	clk         store.Clock
	timeout     time.Duration
	maxKey      int    // the longest key accepted, in bytes, without the prefix
	keep        string // "k" with KeepCorrupt: a letter of the call
	onRepair    func(key string, err error)
	margin      int64 // ms; -1: no expiry (client clock only)
	marginArg   any   // margin, boxed once
	route       router
	pipe        *pipeliner // nil: pipelining disabled
	fo          *failover  // nil: not a cluster client
	fn          *functions // nil: EVALSHA (Config.Functions unset)
	change      string     // the call's last letter: "" or "q" (Config.OnPolicyChange); every call names the registry
	regs        *registries
	closed      atomic.Bool
}

var (
	_ store.Store = (*Store)(nil)
)

// New returns a Store keeping buckets in the Redis behind client: a
// *redis.Client, a *redis.ClusterClient, a failover client or a *redis.Ring.
// It does not contact Redis. It returns [ErrUnboundedClient] for a client
// whose calls could block forever and [ErrHashTagPrefix] for a prefix with a
// hash tag.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if err := checkBounded(client); err != nil {
		return nil, err
	}
	s := &Store{rdb: client, prefix: cfg.Prefix, clk: cfg.Clock, timeout: cfg.Timeout, route: routerOf(client),
		maxKey: store.MaxKeyLen(cfg.MaxKeyLen), fo: newFailover(client)}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	switch cfg.Corrupt {
	case RepairCorrupt:
	case KeepCorrupt:
		s.keep = "k"
	default:
		return nil, fmt.Errorf("%w: Corrupt %d", ErrInvalidConfig, cfg.Corrupt)
	}
	switch cfg.OnPolicyChange {
	case algo.KeepTokens:
		s.change = ""
	case algo.Proportional:
		s.change = "q"
	default:
		return nil, fmt.Errorf("%w: OnPolicyChange %v", ErrInvalidConfig, cfg.OnPolicyChange)
	}
	s.onRepair = cfg.OnRepair
	if s.onRepair == nil {
		s.onRepair = func(key string, err error) {
			slog.Default().Warn("redisstore: repaired a corrupt bucket", "key", key, "err", err)
		}
	}
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("%w: %q", ErrHashTagPrefix, s.prefix)
	}
	lp, err := leasePrefix(cfg, s.prefix)
	if err != nil {
		return nil, err
	}
	s.leasePrefix = lp
	regs := newRegistries(s.route, s.prefix)
	s.regs = &regs
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	switch m := cfg.TTLMargin; {
	case m == 0:
		s.margin = DefaultTTLMargin.Milliseconds()
	case m < 0:
		s.margin = -1
	default:
		s.margin = (m + time.Millisecond - 1).Milliseconds()
	}
	s.marginArg = s.margin
	if cfg.Functions {
		s.fn = newFunctions(client)
	}
	if !cfg.Pipeline.Disabled {
		p, err := newPipeliner(client, cfg.Pipeline, s.fo)
		if err != nil {
			return nil, err
		}
		p.fn, p.obs = s.fn, newBatchObserver(cfg)
		s.pipe = p
	}
	return s, nil
}

// checkBounded refuses clients of known types that would wait forever.
func checkBounded(client redis.UniversalClient) error {
	var read time.Duration
	var ctxOK bool
	switch c := client.(type) {
	case *redis.Client:
		read, ctxOK = c.Options().ReadTimeout, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		read, ctxOK = c.Options().ReadTimeout, c.Options().ContextTimeoutEnabled
	default:
		return nil
	}
	// After go-redis normalises its options, ReadTimeout 0 means none (-1
	// given) and -1 means deadlines are never set (-2 given), not even
	// from the context.
	if read < 0 || read == 0 && !ctxOK {
		return fmt.Errorf("%w: set ContextTimeoutEnabled: true (recommended) and a ReadTimeout >= -1", ErrUnboundedClient)
	}
	return nil
}

// Take applies cost tokens to the bucket at key under policy p in one
// atomic script call; cost 0 peeks. With the server clock only a charge
// writes to Redis: a denial or a peek leaves the key as it was, since a
// later call on the same clock computes the same refill from it. With a
// client clock, where callers' clocks may lag one another, a denial or
// peek that refilled the bucket stores the later stamp, exactly as
// algo.TokenBucket returns it, so the stamp never moves backwards and a
// lagging caller cannot re-earn the gap. See [store.Store] for the errors.
func (s *Store) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: cost}}
	var res [1]algo.Result
	if err := s.run(ctx, opTake, reqs[:], res[:], nil); err != nil {
		return algo.Result{}, err
	}
	return res[0], nil
}

// TakeMulti takes from several buckets in one script call: if every bucket
// admits, all are charged; otherwise none is charged, each Result is what
// that bucket alone would answer, and Denied and RetryAfter name the
// longest wait. It implements [store.Store]. (With a client clock, as
// in memstore, a denying bucket keeps its refilled state and later stamp,
// as after a denied Take; the others are left exactly as they were.)
//
// A key named twice is refused with store.ErrDuplicateKey. On Redis Cluster
// all keys must hash to one slot (make them with store.GroupKey and one
// group, see the package documentation), or the call fails with an error
// matching store.ErrNotTogether before Redis is called; on a Ring they
// must share a hash tag. An empty reqs is allowed, with no Results.
func (s *Store) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	res := store.MultiResult{Allowed: true, Denied: -1, Results: make([]algo.Result, len(reqs))}
	if len(reqs) == 0 {
		if s.closed.Load() {
			return store.MultiResult{}, store.ErrClosed
		}
		return res, ctx.Err()
	}
	if err := s.run(ctx, opMulti, reqs, res.Results, nil); err != nil {
		return store.MultiResult{}, err
	}
	for i, r := range res.Results {
		if !r.Allowed {
			res.Allowed = false
			if res.Denied < 0 || r.RetryAfter > res.RetryAfter {
				res.Denied, res.RetryAfter = i, r.RetryAfter
			}
		}
	}
	return res, nil
}

// Close marks the store closed: later calls return store.ErrClosed. Calls
// already queued for a pipeline are still sent, and Close returns once
// their replies are in (or their deadlines passed) and the pipeline writers
// have stopped. It does not close the client, which the caller owns, and
// it always returns nil.
func (s *Store) Close() error {
	if !s.closed.Swap(true) && s.pipe != nil {
		s.pipe.close()
	}
	return nil
}

// Key returns the Redis key that holds the bucket for key.
func (s *Store) Key(key string) string { return s.prefix + key }
