package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Policy is one rate limit expressed once and translated into every
// implementation's own terms: a bucket of Burst tokens refilled at Tokens
// per Period.
type Policy struct {
	Name   string
	Burst  int64
	Tokens int64
	Period time.Duration
}

// The policies the benchmarks run under.
var (
	// Admit admits every call of a benchmark: a burst of 1e9 refilled at
	// 1 per second, so a bucket taken from stays below full (and in every
	// store's memory) while the benchmark cycles through the keys.
	Admit = Policy{Name: "admit", Burst: 1_000_000_000, Tokens: 1, Period: time.Second}
	// Deny admits one call per key per minute, so after the pre-fill every
	// call is denied.
	Deny = Policy{Name: "deny", Burst: 1, Tokens: 1, Period: time.Minute}
	// Article is the policy of the reference article: burst 100, 2 per
	// second. The Redis benchmarks use it.
	Article = Policy{Name: "burst100", Burst: 100, Tokens: 2, Period: time.Second}
	// Mem is the policy of the memory measurement: burst 100, 1 per
	// minute, so a key taken from once lives a minute (one token refills
	// in 60 s) and nothing expires while the keys are counted.
	Mem = Policy{Name: "mem", Burst: 100, Tokens: 1, Period: time.Minute}
)

// Algo returns p as a ratebucket policy.
func (p Policy) Algo() (algo.Policy, error) {
	return algo.NewPolicy(p.Burst, algo.Per(p.Tokens, p.Period))
}

// FillTime is how long an empty bucket takes to refill: the interval of
// the window-based limiters (go-limiter, ulule), which grant Burst tokens
// per interval.
func (p Policy) FillTime() time.Duration {
	return time.Duration(p.Burst) * p.Period / time.Duration(p.Tokens)
}

// Limiter is the call every implementation is measured on: take one token
// from key's bucket and report whether the call was admitted.
type Limiter interface {
	Allow(key string) (bool, error)
}

// Impl is one implementation under test. New builds a limiter enforcing p
// and returns the function that releases it.
type Impl struct {
	Name string
	New  func(p Policy) (Limiter, func() error, error)
}

// InProc lists the in-process implementations, ratebucket first (the base
// of every ratio).
var InProc = []Impl{
	{"ratebucket", newMemstore}, // ratebucket.go
	{"xtimerate", newXRate},
	{"golimiter", newGoLimiter},
	{"throttled", newThrottled},
	{"ulule", newUlule},
}

// xrateShards is the number of shards of the x/time/rate map; like
// memstore's, a power of two well above the core count.
const xrateShards = 64

// xrateMap keeps one *rate.Limiter per key in a sharded, mutexed map, the
// way x/time/rate users key it (the package has no keyed store).
type xrateMap struct {
	seed   maphash.Seed
	limit  rate.Limit
	burst  int
	shards [xrateShards]xrateShard
}

type xrateShard struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
	_  [40]byte // keep shards on separate cache lines
}

func newXRate(p Policy) (Limiter, func() error, error) {
	x := &xrateMap{
		seed:  maphash.MakeSeed(),
		limit: rate.Limit(float64(p.Tokens) / p.Period.Seconds()),
		burst: int(p.Burst),
	}
	for i := range x.shards {
		x.shards[i].m = make(map[string]*rate.Limiter)
	}
	return x, noClose, nil
}

func (x *xrateMap) Allow(key string) (bool, error) {
	sh := &x.shards[maphash.String(x.seed, key)&(xrateShards-1)]
	sh.mu.Lock()
	l := sh.m[key]
	if l == nil {
		l = rate.NewLimiter(x.limit, x.burst)
		sh.m[key] = l
	}
	sh.mu.Unlock()
	return l.Allow(), nil
}

// goLimiter is sethvargo/go-limiter's memorystore: Burst tokens per
// FillTime interval.
type goLimiter struct{ s golimiter.Store }

func newGoLimiter(p Policy) (Limiter, func() error, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.Burst), Interval: p.FillTime()})
	if err != nil {
		return nil, nil, err
	}
	return goLimiter{s}, func() error { return s.Close(context.Background()) }, nil
}

func (g goLimiter) Allow(key string) (bool, error) {
	_, _, _, ok, err := g.s.Take(context.Background(), key)
	return ok, err
}

// throttledLimiter is throttled's GCRA limiter over one of its stores.
type throttledLimiter struct{ l *throttled.GCRARateLimiterCtx }

// newThrottled is throttled's GCRA limiter over its memstore.
func newThrottled(p Policy) (Limiter, func() error, error) {
	st, err := throttledmem.NewCtx(0)
	return newGCRA(st, err, p)
}

// newGCRA builds the GCRA limiter over st (unless err). throttled's
// MaxBurst counts the requests beyond the first, so burst b is MaxBurst
// b-1.
func newGCRA(st throttled.GCRAStoreCtx, err error, p Policy) (Limiter, func() error, error) {
	if err != nil {
		return nil, nil, err
	}
	q := throttled.RateQuota{MaxRate: throttled.PerDuration(int(p.Tokens), p.Period), MaxBurst: int(p.Burst - 1)}
	l, err := throttled.NewGCRARateLimiterCtx(st, q)
	if err != nil {
		return nil, nil, err
	}
	return throttledLimiter{l}, noClose, nil
}

func (t throttledLimiter) Allow(key string) (bool, error) {
	limited, _, err := t.l.RateLimitCtx(context.Background(), key, 1)
	return !limited, err
}

// ululeLimiter is ulule/limiter's memory store: a fixed window of Burst
// requests per FillTime.
type ululeLimiter struct{ l *ulule.Limiter }

func newUlule(p Policy) (Limiter, func() error, error) {
	st := ululemem.NewStoreWithOptions(ulule.StoreOptions{Prefix: "rl", CleanUpInterval: time.Minute})
	return ululeLimiter{ulule.New(st, ulule.Rate{Period: p.FillTime(), Limit: p.Burst})}, noClose, nil
}

func (u ululeLimiter) Allow(key string) (bool, error) {
	c, err := u.l.Get(context.Background(), key)
	return !c.Reached, err
}

// noClose is the release function of limiters that hold nothing.
func noClose() error { return nil }

// ErrSpread reports keys that did not get a bucket of their own.
var ErrSpread = errors.New("bench: keys do not get separate buckets")

// CheckSpread takes once from every key under a burst-1 limiter l and
// fails unless every take was admitted, then takes once more from each and
// fails unless every one was denied: exactly one bucket per key, and the
// buckets keep their state. It proves a benchmark's keys really vary.
func CheckSpread(l Limiter, keys []string) error {
	for pass, want := range []bool{true, false} {
		n := 0
		for _, k := range keys {
			ok, err := l.Allow(k)
			if err != nil {
				return fmt.Errorf("pass %d, key %q: %w", pass, k, err)
			}
			if ok == want {
				n++
			}
		}
		if n != len(keys) {
			return fmt.Errorf("%w: pass %d: %d of %d keys answered %v", ErrSpread, pass, n, len(keys), want)
		}
	}
	return nil
}

// storeLimiter is a ratebucket Store behind a fixed policy: the call a
// ratebucket.Limiter makes, without its prefix concatenation.
type storeLimiter struct {
	s store.Store
	p algo.Policy
}

func (l storeLimiter) Allow(key string) (bool, error) {
	r, err := l.s.Take(context.Background(), store.Request{Key: key, Policy: l.p, Cost: 1})
	return r.Allowed, err
}

// newMemstore is ratebucket's memstore with its zero Config: real clock,
// token bucket, default shards.
func newMemstore(p Policy) (Limiter, func() error, error) {
	ap, err := p.Algo()
	if err != nil {
		return nil, nil, err
	}
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		return nil, nil, err
	}
	return storeLimiter{s, ap}, s.Close, nil
}
