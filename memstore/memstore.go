// Package memstore is the in-process [store.Store]: bucket state in
// sharded hash tables, guarded by one mutex per shard, with the clock
// injected. The common Take (a bucket that exists, under its own policy,
// no observer) locks only its bucket's slot, not the shard: two
// goroutines then share no cache line but the bucket's own.
//
// Use it for a single process, for tests and for the simulator; use
// redisstore when several processes must share one limit.
//
//	s, err := memstore.New(memstore.Config{})
//	...
//	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(2).Burst(100), ratebucket.Config{})
//	res, err := lim.Allow(ctx, clientID)
//
// # Sharding and speed
//
// Keys are hashed as hash/maphash hashes them (a random seed per Store;
// the runtime's AES-based hash, called directly) onto a power-of-two
// number of shards, by default 32×GOMAXPROCS rounded up, so
// goroutines working on different keys rarely wait for one another and
// throughput on distinct keys scales with cores. A Take on a key that
// already has a bucket allocates nothing.
//
// # Observing
//
// A Store is an [observe.SelfCounter]: under [observe.Wrap] with a counting
// Observer (contrib/prometheus, contrib/otel), a Take counts its decision
// with a plain addition under the shard lock it holds anyway, and the
// exporter reads the counts under the same locks when scraped. One Take
// in 256 per shard, label set and outcome, and every other operation, go
// through observe.Wrap's wrapper, which times them. The counts take 2.5 KB per
// shard (64 label sets × 5 outcomes × 8 bytes), read under each shard's
// lock at every scrape: 160 KB for the 64 shards a Store has by default
// on 2 cores, 2.5 MB for 1024 on 32 or more. Without an Observer,
// observe.Wrap returns the Store itself and nothing is counted.
//
// # Bounded memory
//
// A bucket that has refilled to full behaves exactly like a missing one
// (algo.Algorithm's IdleAt says from when), so the store forgets it: a Take
// that leaves a bucket full deletes it, and each shard sweeps out idle
// buckets whenever it has doubled in size since its last sweep. The sweep
// runs inside the Take that crosses the threshold, so its cost is amortised
// over the inserts that grew the shard, and there is no janitor goroutine.
// A shard whose live buckets fall below a quarter of its peak moves them
// to a smaller table, returning the memory to the runtime.
//
// A token bucket takes one 32-byte slot of its shard's table, which is
// 7/16 to 7/8 full: 37 to 73 bytes of heap besides its key's bytes, about
// 42 at 100k keys (bench/'s DistinctKeys), 66 with the string of a
// 20-byte key (BenchmarkTakeKeys' heapB/key). The slot points at the
// key's bytes, so the key string is kept as the caller made it: a key
// sliced from a larger string (a request line, a header block) keeps all
// of that string alive while its bucket lives. Pass such a key through
// strings.Clone.
//
// "Exactly" assumes the clock does not run backwards. A bucket keeps the
// latest time it has seen, so a stale caller mints nothing; a forgotten
// bucket has no time of its own, and a stale request on it is evaluated at
// the caller's time, crediting at most one skew's worth of refill once.
//
// # MaxKeys: what happens when the store is full
//
// A client that rotates keys (spoofed addresses, random user IDs) could grow
// the store without end, so each shard holds at most ⌈MaxKeys/Shards⌉
// buckets (keys do not spread perfectly: a million random keys under the
// default bound fill 99.9% of it before the first shard is full). When a
// new key arrives at a full shard, idle buckets are swept out first; that
// never changes a decision. If every stored bucket is still
// refilling, no bucket is evicted: evicting one that is not full would hand
// its owner a fresh burst, which is exactly what a key-rotating attacker
// wants from an LRU. Instead the new key is charged to the store's overflow
// bucket for its policy: one bucket, shared by every key that arrives while
// the store is full, with the same capacity and rate. Keys already stored
// are unaffected, and the whole flood of new keys together gets the rate of
// one key, not one each. This keeps the limiter limiting without an error
// (an error would send many callers down a fail-open path, disabling the
// limit during exactly the attack that filled the store). The overflow
// bucket is not remembered per key: once the store has room again, a key
// that was served from overflow starts with its own full bucket.
//
// Full sweeps at a full shard run at most once per ⌈n/16⌉ overflowed
// inserts (n the shard's size), and only once some stored bucket can have
// become idle, so an attack cannot make every Take scan its shard.
//
// # Changing a policy
//
// A call may name another policy than the one a bucket was written under
// (a limit raised or lowered at runtime): the bucket is then converted by
// algo.TokenBucket.Rebase under Config.OnPolicyChange, keeping its tokens
// (capped at the new capacity) by default, or the fraction of a full
// bucket with algo.Proportional, and refills at the new rate from that
// call on. The call keeps the converted bucket, whatever it does
// otherwise. A bucket records its policy as a number in spare bits of
// its slot, so it is no larger; the Store numbers up to
// MaxPolicies distinct policies (see there for what happens beyond).
//
// # Leases
//
// The Store is also a store.Store: at most N leases of a key in flight
// (see ratebucket.ConcurrencyLimiter). A key's leases live in the same shards
// as the buckets, in a map of their own (a key may have both), and count
// towards MaxKeys. A key with no live lease holds no memory: it is deleted
// when its last lease is released, and swept, like an idle bucket, once
// its last lease has expired. A new lease key arriving at a full shard with
// nothing idle is denied, with a RetryAfter of at most the policy's TTL:
// leases cannot be shared the way the overflow bucket is without letting a
// key exceed its limit. Acquire and release take time linear in the key's
// live leases; with ids made beforehand, an acquire and release on a key
// that holds other leases allocates nothing, and one on a key with none
// allocates its entry (64 bytes; about 99 bytes a key with its map slot,
// measured by BenchmarkLeaseMemory).
package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/keyhash"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// DefaultMaxKeys is the MaxKeys of a zero Config: about a million buckets.
// A bucket costs about 42 bytes of heap besides its key's bytes, 37 to 73
// as its shard's table fills (measured by bench/'s DistinctKeys benchmark
// over 100k keys; BENCHMARKS.md).
const DefaultMaxKeys = 1 << 20

// maxShards bounds Config.Shards.
const maxShards = 1 << 16

// ErrInvalidConfig reports a Config field out of range.
var ErrInvalidConfig = errors.New("memstore: invalid config")

// Config configures a Store. The zero value is ready to use: the real
// clock, the token bucket, 32×GOMAXPROCS shards (see Shards) and DefaultMaxKeys.
type Config struct {
	// Clock is read once per Take for the current time. The default (nil)
	// is the real clock, read as the wall time at New plus the monotonic
	// time elapsed since: one clock reading per Take, and a wall clock
	// stepped by hand or NTP does not move the buckets.
	Clock store.Clock
	// Algorithm is the rate-limiting rule. The default is
	// algo.TokenBucket{}; the windows of package algo are for comparison
	// in the simulator.
	Algorithm algo.Algorithm
	// Shards is the number of shards, rounded up to a power of two, at
	// most 65536. The default (0) is 32×GOMAXPROCS rounded up, fewer
	// for a small MaxKeys (each shard's share at least 1024 keys) but
	// never under 4×GOMAXPROCS.
	Shards int
	// MaxKeys bounds the number of keys kept, buckets and lease keys
	// together; see the package documentation for what happens when it
	// is reached. The default (0) is DefaultMaxKeys.
	MaxKeys int
	// MaxKeyLen bounds a key's length in bytes: a longer key is refused
	// with an error matching store.ErrKeyTooLong, and charges nothing.
	// The default (0) is store.DefaultMaxKeyLen (256); a negative value
	// means the largest bound a table holds, 2^31−1 bytes (as does any
	// larger value). With MaxKeys it bounds the store's memory: at most
	// MaxKeys × (MaxKeyLen + 73 bytes) for buckets; a lease key takes
	// about 99 bytes with one lease, and at most its policy's Limit ×
	// (48 + algo.MaxLeaseIDLen) bytes more for its leases and their ids.
	MaxKeyLen int
	// OnPolicyChange is what a bucket keeps when a call names another
	// policy than the one it was written under: the default
	// (algo.KeepTokens) keeps its tokens, capped at the new capacity;
	// algo.Proportional keeps the fraction of a full bucket. See
	// algo.TokenBucket.Rebase, and the package documentation.
	OnPolicyChange algo.ChangeRule
}

// Store is the in-process store. It is safe for concurrent use by multiple
// goroutines. Make one with New; the zero value is not usable. A Store must
// not be copied.
type Store struct {
	clk      store.Clock // nil: the monotonic default, see now
	base     time.Time   // the wall time at New, with its monotonic reading
	baseUS   int64       // base in µs since the Unix epoch
	alg      algo.Algorithm
	tb       bool         // alg is algo.TokenBucket: called directly, not through alg
	seed     keyhash.Seed // the keys' hash (hash)
	mask     uint64
	perShard int
	maxKey   int // the longest key accepted, in bytes
	shards   []shard
	fast     *atomic.Bool // lock-free Takes are on (fast.go); shared with views
	over     *overflow
	pols     *policies       // the policies buckets were written under
	rule     algo.ChangeRule // Config.OnPolicyChange

	// The view CountTakes makes (observe.go) counts its Takes: tap is nil
	// on a Store New returns; counts[i] is guarded by shard i's lock. The
	// view is a copy of the Store, so every field above that changes after
	// New must be a pointer or a slice it shares (shards, fast, over, pols).
	tap    *observe.TakeTap
	counts []observe.SlotCounts
}

var (
	_ store.Store = (*Store)(nil)
)

// New returns a Store configured by cfg, or an error wrapping
// ErrInvalidConfig.
func New(cfg Config) (*Store, error) { return newStore(cfg, minSweep) }

// newStore is New with the size below which shards never sweep.
func newStore(cfg Config, floor int) (*Store, error) {
	if cfg.Shards < 0 || cfg.Shards > maxShards {
		return nil, fmt.Errorf("%w: Shards %d outside [0, %d]", ErrInvalidConfig, cfg.Shards, maxShards)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: negative MaxKeys %d", ErrInvalidConfig, cfg.MaxKeys)
	}
	if !cfg.OnPolicyChange.Valid() {
		return nil, fmt.Errorf("%w: OnPolicyChange %v", ErrInvalidConfig, cfg.OnPolicyChange)
	}
	s := &Store{clk: cfg.Clock, alg: cfg.Algorithm, seed: keyhash.New(), base: time.Now(), rule: cfg.OnPolicyChange}
	s.pols, s.over = new(policies), new(overflow)
	s.pols.init()
	s.baseUS = s.base.UnixMicro()
	if s.alg == nil {
		s.alg = algo.TokenBucket{}
	}
	_, s.tb = s.alg.(algo.TokenBucket)
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	n := cfg.Shards
	if n == 0 {
		n = defaultShards(runtime.GOMAXPROCS(0), maxKeys)
	}
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	s.mask, s.perShard = uint64(n-1), (maxKeys+n-1)/n
	s.maxKey = int(min(uint64(store.MaxKeyLen(cfg.MaxKeyLen)), maxKeyBytes))
	s.shards = make([]shard, n)
	s.fast = new(atomic.Bool)
	s.fast.Store(s.tb)
	for i := range s.shards {
		s.shards[i].init(s.perShard, floor, s.tb, s.fast)
	}
	s.over.m = make(map[algo.Policy]algo.State)
	return s, nil
}

// defaultShards is the number of shards of a Store whose Config leaves it
// to New: 32 per core (GOMAXPROCS), but no more than leave each shard a
// share of maxKeys of minSweep keys, and no fewer than 4 per core.
//
// The parallel rows of bench/ depend on how often two cores want one
// shard at once: 8 shards (4 per core on 2) against 64 measured 125
// against 100 ns per Take over 100k keys from 2 goroutines, 240 against
// 195 ns of CPU (bench/cputime BenchmarkShards, n=8, p=0.000); a
// sequential Take does not change.
// The bound by maxKeys keeps a small Store's per-shard share of it (the
// point where a shard starts to refuse new keys) from getting too small
// for keys that spread unevenly.
func defaultShards(procs, maxKeys int) int {
	return max(4*procs, min(32*procs, maxKeys/minSweep))
}

// Take applies cost tokens to the bucket at key under policy p and returns
// the decision; cost 0 peeks. It implements store.Store: errors are
// store.ErrEmptyKey, store.ErrKeyTooLong, store.ErrClosed, the context's
// error, or the algorithm's (algo.ErrInvalidPolicy, algo.ErrInvalidCost,
// algo.ErrCostExceedsCapacity), and charge nothing.
func (s *Store) Take(ctx context.Context, req store.Request) (res algo.Result, err error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	if key == "" || len(key) > s.maxKey {
		return s.counted(ctx, cost, algo.Result{}, fmt.Errorf("memstore: %w", store.CheckKey(key, s.maxKey)))
	}
	if err := ctx.Err(); err != nil {
		return s.counted(ctx, cost, algo.Result{}, err)
	}
	if !s.tb {
		res, err = s.takeWide(key, p, cost)
		return s.counted(ctx, cost, res, err)
	}
	now := s.baseUS // s.now(), inlined: now is too large to be
	if s.clk == nil {
		now += time.Since(s.base).Microseconds()
	} else {
		now = s.clockNow()
	}
	h := s.hash(key)
	sh := &s.shards[h&s.mask]
	// The usual case without an observer (which counts under the lock):
	// the key's bucket, under p, updated under its slot's own lock.
	if s.tap == nil && s.takeFast(sh, h, key, p, now, cost, &res) {
		return res, nil
	}
	sh.mu.Lock()
	sl := sh.b.home(h)
	if sl.holds(key) {
		sl.free()
	} else {
		sl = sh.b.find(h, key) // nil on a closed shard too
	}
	if sl == nil {
		res, err = s.takeSlow(sh, h, key, nil, p, now, cost)
		return s.counted(ctx, cost, res, err)
	}
	prev := sl.v.state()
	if !s.pols.is(prev.Prev, p) {
		res, err = s.takeSlow(sh, h, key, sl, p, now, cost)
		return s.counted(ctx, cost, res, err)
	}
	// The usual case: the key's bucket, written under p. The token bucket
	// writes its Result in place (TakeTo), into the named result: a
	// Result returned by value, or copied from a local, is moved with
	// 16-byte loads right after 8-byte stores, which stall on store
	// forwarding; returning res loads it field by field. (Measured: 8%
	// off a hot-key Take.)
	st, err := algo.TokenBucket{}.TakeTo(&res, p, prev, now, cost)
	if err != nil {
		sh.mu.Unlock()
		return s.counted(ctx, cost, algo.Result{}, fmt.Errorf("memstore: %w", err))
	}
	// The bucket is idle (IdleAt ≤ now) exactly when it is full at a stamp
	// not ahead of now: a deficit takes at least 1µs to refill, and a
	// quota's IdleAt is its Stamp. A Take under the bucket's own policy
	// never moves its IdleAt earlier (it refills what the time since its
	// stamp refills and charges a cost ≥ 0), so sh.soonest, a lower
	// bound, needs no update here; the calls that can (a refund, a policy
	// change) go through put.
	if st.Level == 0 && st.Stamp <= now {
		sh.b.remove(sl) // full again: same as no bucket
	} else {
		sl.v = pack(st) // its policy number is p's, not 0: nothing kept apart
	}
	if s.tap != nil && s.count(ctx, h&s.mask, res.Allowed) {
		sh.mu.Unlock()
		return s.counted(ctx, cost, res, nil)
	}
	sh.mu.Unlock()
	return res, nil
}

// takeSlow is Take on a key with no bucket, or one written under another
// policy than p, or on a closed shard, with sh locked; it unlocks sh. sl
// is the key's slot, or nil.
func (s *Store) takeSlow(sh *shard, h uint64, key string, sl *slot[bucket], p algo.Policy, now, cost int64) (res algo.Result, err error) {
	if sh.closed {
		sh.mu.Unlock()
		return algo.Result{}, store.ErrClosed
	}
	st, err := algo.TokenBucket{}.TakeTo(&res, p, s.convert(sh, sl, p, now), now, cost)
	if err != nil {
		sh.mu.Unlock()
		return algo.Result{}, fmt.Errorf("memstore: %w", err)
	}
	if !s.keep(sh, h, key, sl, st, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), now) {
		return s.over.take(s.alg, p, now, cost)
	}
	return res, nil
}

// takeWide is Take under an algorithm other than the token bucket.
func (s *Store) takeWide(key string, p algo.Policy, cost int64) (algo.Result, error) {
	now := s.now()
	h := s.hash(key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return algo.Result{}, store.ErrClosed
	}
	sl := sh.w.find(h, key)
	var prev algo.State
	if sl != nil {
		prev = sl.v.st
	}
	st, res, idle, err := s.take(p, prev, now, cost)
	if err != nil {
		sh.mu.Unlock()
		return algo.Result{}, fmt.Errorf("memstore: %w", err)
	}
	switch {
	case idle <= now:
		if sl != nil {
			sh.w.remove(sl)
		}
	case sl != nil || sh.room(now, s.perShard, s.pols):
		sh.putWide(h, key, sl, st, idle)
	default: // full shard, nothing idle
		sh.mu.Unlock()
		return s.over.take(s.alg, p, now, cost)
	}
	sh.mu.Unlock()
	return res, nil
}

// keep stores the new state of key's token bucket (in slot sl, or nil if
// it had none; h is the key's hash), idle from idle, and unlocks sh. It
// reports false, storing nothing, when the shard is full with nothing
// idle: the request must then be served from the overflow bucket.
func (s *Store) keep(sh *shard, h uint64, key string, sl *slot[bucket], st algo.State, idle, now int64) bool {
	defer sh.mu.Unlock()
	switch {
	case idle <= now:
		if sl != nil {
			sh.drop(key, sl) // full again: same as no bucket
		}
	case sl != nil || sh.room(now, s.perShard, s.pols): // room moves slots, but sl is nil then
		sh.put(h, key, sl, st, idle)
	default: // full shard, nothing idle
		return false
	}
	return true
}

// now returns the time in µs: the Config's Clock, or by default the wall
// time at New plus the monotonic time elapsed since, which takes one clock
// reading instead of time.Now's two and never steps with the wall clock.
func (s *Store) now() int64 {
	if s.clk == nil {
		return s.baseUS + time.Since(s.base).Microseconds()
	}
	return s.clockNow()
}

// clockNow reads Config.Clock.
func (s *Store) clockNow() int64 { return s.clk.Now().UnixMicro() }

// take applies the algorithm and returns, besides its answer, when the new
// state is idle (Algorithm.IdleAt). The token bucket is called directly,
// and its idle time read off the Result: ResetAfter is IdleAt − now
// exactly, unless it saturated.
func (s *Store) take(p algo.Policy, st algo.State, now, cost int64) (algo.State, algo.Result, int64, error) {
	if !s.tb {
		st, res, err := s.alg.Take(p, st, now, cost)
		return st, res, s.alg.IdleAt(p, st), err
	}
	st, res, err := algo.TokenBucket{}.Take(p, st, now, cost)
	if err != nil {
		return st, res, 0, err
	}
	return st, res, algo.TokenBucket{}.IdleFrom(p, st, res.ResetAfter, now), nil
}

// Len returns the number of buckets and lease keys held, including idle
// ones not yet swept out. It locks each shard in turn, so it is not a
// snapshot.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.size()
		sh.mu.Unlock()
	}
	return n
}

// Close drops every bucket; later calls return store.ErrClosed. Close is
// idempotent and always returns nil. The Store starts no goroutines, so
// none outlives it.
func (s *Store) Close() error {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.close()
		sh.mu.Unlock()
	}
	return nil
}

// hash returns key's hash under the Store's seed (internal/keyhash).
func (s *Store) hash(key string) uint64 { return s.seed.String(key) }
