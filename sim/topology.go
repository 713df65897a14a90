package sim

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// Topology says how app instances keep bucket state.
type Topology int

const (
	// Shared is one store for every instance: what Redis gives a fleet.
	// Over memstore it is a single in-process store standing in for that
	// shared Redis; requests carry the calling instance's (possibly
	// skewed) clock, exactly as redisstore's client clock sends the
	// caller's time to Lua. With no skew it is also what redisstore's
	// server clock gives: one clock for the whole fleet.
	Shared Topology = iota
	// PerInstance gives each instance its own memstore and its own
	// clock: the broken multi-instance setup in which a client spread
	// over N instances gets about N times the limit.
	PerInstance
	// Leased is one shared store, as Shared, with each instance spending
	// a hot key's tokens from leased batches in front of it
	// (hybrid.Leases, Instances the run's, Lifetime the scenario's): fewer
	// calls reach the store, and the never-exceed law is checked against
	// algo's BatchBound, the bound plus the tokens the fleet may hold.
	// It runs the token bucket only.
	Leased
)

// String returns "shared" or "per-instance".
func (t Topology) String() string {
	switch t {
	case Shared:
		return "shared"
	case PerInstance:
		return "per-instance"
	case Leased:
		return "leased"
	}
	return fmt.Sprintf("Topology(%d)", int(t))
}

// valid reports whether t is one of the topologies.
func (t Topology) valid() bool { return t == Shared || t == PerInstance || t == Leased }

// MarshalText encodes t as its String, for JSON reports.
func (t Topology) MarshalText() ([]byte, error) {
	if !t.valid() {
		return nil, fmt.Errorf("%w: topology %d", ErrInvalidConfig, int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText decodes a String, "shared", "per-instance" or "leased"; any other
// text is an error wrapping [ErrInvalidConfig], and leaves t as it was.
func (t *Topology) UnmarshalText(b []byte) error {
	switch string(b) {
	case "shared":
		*t = Shared
	case "per-instance":
		*t = PerInstance
	case "leased":
		*t = Leased
	default:
		return fmt.Errorf("%w: topology %q (want shared, per-instance or leased)", ErrInvalidConfig, b)
	}
	return nil
}

// counter counts the calls that reach a store. It is safe for
// simultaneous use.
type counter struct{ n atomic.Int64 }

// Calls returns how many Take and TakeMulti calls have been made.
func (c *counter) Calls() int64 { return c.n.Load() }

// counted wraps s so that every call that reaches it (a Take, a TakeMulti
// and every other operation) is counted by the returned counter before
// being passed on unchanged. The simulator counts backend calls this way;
// a caching wrapper placed above it (see [Config.Wrap]) shows up as fewer
// calls.
func counted(s store.Store) (store.Store, *counter) {
	c := new(counter)
	return counting{s, c}, c
}

// counting is counted's wrapper: it counts each operation (not Close).
type counting struct {
	store.Store
	c *counter
}

func (k counting) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	k.c.n.Add(1)
	return k.Store.Take(ctx, req)
}

func (k counting) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	k.c.n.Add(1)
	return k.Store.TakeMulti(ctx, reqs)
}

func (k counting) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	k.c.n.Add(1)
	return k.Store.Refund(ctx, req)
}

func (k counting) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	k.c.n.Add(1)
	return k.Store.RefundMulti(ctx, reqs)
}

func (k counting) TakeAtMost(ctx context.Context, req store.Request) (int64, algo.Result, error) {
	k.c.n.Add(1)
	return k.Store.TakeAtMost(ctx, req)
}

func (k counting) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	k.c.n.Add(1)
	return k.Store.Reserve(ctx, req, maxWait)
}

func (k counting) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	k.c.n.Add(1)
	return k.Store.CancelReservation(ctx, key, p, t)
}

func (k counting) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	k.c.n.Add(1)
	return k.Store.AcquireLease(ctx, key, p, id)
}

func (k counting) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	k.c.n.Add(1)
	return k.Store.ReleaseLease(ctx, key, id)
}

func (k counting) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	k.c.n.Add(1)
	return k.Store.RenewLease(ctx, key, p, id)
}

// fleet is the app instances of one run and the stores behind them.
type fleet struct {
	instances []*instance
	counters  []*counter
	caller    *callerClock // non-nil for a shared memstore
	closers   []func() error
	// tap, when set, hears of a Leased instance's calls to the shared
	// store (see tapped): instance, request, its time and what it granted.
	tap func(inst int, r store.Request, at time.Time, op backendOp, granted int64)
}

// instance is one app instance: a Limiter per policy over its store.
type instance struct {
	store    store.Store
	skew     int64 // µs
	limiters map[algo.Policy]*ratebucket.Limiter
}

// limiter returns the instance's Limiter for p, creating it on first use.
func (in *instance) limiter(p algo.Policy) (*ratebucket.Limiter, error) {
	if l, ok := in.limiters[p]; ok {
		return l, nil
	}
	l, err := ratebucket.NewLimiter(in.store, p, ratebucket.Config{})
	if err != nil {
		return nil, err
	}
	in.limiters[p] = l
	return l, nil
}

// calls returns the backend calls made so far.
func (f *fleet) calls() int64 {
	var n int64
	for _, c := range f.counters {
		n += c.Calls()
	}
	return n
}

// use prepares the fleet for a call from instance i: a shared memstore
// then reads that instance's clock.
func (f *fleet) use(i int) *instance {
	in := f.instances[i]
	if f.caller != nil {
		f.caller.skew.Store(in.skew)
	}
	return in
}

// close closes every store, keeping the first error.
func (f *fleet) close() error {
	var errs []error
	for i := len(f.closers) - 1; i >= 0; i-- {
		errs = append(errs, f.closers[i]())
	}
	return errors.Join(errs...)
}

// layout is what newFleet builds: the instances, their clocks and the
// stores behind them, resolved from a Config (see Config.layout).
type layout struct {
	alg      algo.Algorithm
	topology Topology
	skews    []int64 // µs, one per instance
	// stores and wrap are Config's; stores nil means memstore.
	stores func(alg algo.Algorithm, clocks []store.Clock) ([]store.Store, func() error, error)
	wrap   func(instance int, clk store.Clock, s store.Store) (store.Store, error)
	// lifetime is the Lifetime of a Leased run's leases; shards, above 1,
	// splits a shared memstore into that many, one per Cluster master.
	lifetime time.Duration
	shards   int
}

// bound is the never-exceed law's bound under p for an interval of length
// d: p.Bound(d), or in a Leased run algo's BatchBound, which adds the
// tokens the instances may hold in batches.
func (l layout) bound(p algo.Policy, d time.Duration) int64 {
	if l.topology == Leased {
		return p.BatchBound(d, l.lifetime, len(l.skews))
	}
	return p.Bound(d)
}

// law checks the never-exceed law on adm under p against l's bound. A
// Leased run's bound is larger by a constant, which does not move the
// interval checkLaw finds (where admitted − rate·length is largest): only
// its bound and verdict change.
func (l layout) law(p algo.Policy, adm []admission, slack time.Duration) (Law, error) {
	law, err := checkLaw(p, adm, slack)
	if err != nil || l.topology != Leased || len(adm) == 0 {
		return law, err
	}
	law.Bound = l.bound(p, law.To-law.From+slack)
	law.Holds = law.Admitted <= law.Bound
	law.excess = float64(law.Admitted-law.Bound) / float64(p.Capacity())
	return law, nil
}

// spread returns the largest skew minus the smallest, no skew counting
// as 0.
func (l layout) spread() time.Duration {
	lo, hi := int64(0), int64(0)
	for _, s := range l.skews {
		lo, hi = min(lo, s), max(hi, s)
	}
	return dur(hi - lo)
}

// add registers instance i over backend store s (already counted or not),
// wrapped by l.wrap if set; clk is the clock instance i reads.
func (f *fleet) add(l layout, i int, clk store.Clock, s store.Store) error {
	if l.topology == Leased {
		s = tapped{Store: s, f: f, inst: i, clk: clk}
		ls, err := hybrid.NewLeases(s, hybrid.LeasesConfig{Instances: len(l.skews), Lifetime: l.lifetime,
			SweepEvery: -1, Clock: clk})
		if err != nil {
			return fmt.Errorf("leases of instance %d: %w", i, err)
		}
		f.closers = append(f.closers, ls.Close)
		s = ls
	}
	if l.wrap != nil {
		w, err := l.wrap(i, clk, s)
		if err != nil {
			return fmt.Errorf("wrap instance %d: %w", i, err)
		}
		s = w
	}
	f.instances = append(f.instances, &instance{
		store: s, skew: l.skews[i], limiters: map[algo.Policy]*ratebucket.Limiter{},
	})
	return nil
}

// addStores asks l.stores for the stores of the instances from first on,
// one per clock in clks, and adds them, counted.
func (f *fleet) addStores(l layout, first int, clks []store.Clock) error {
	ss, closeAll, err := l.stores(l.alg, clks)
	if err != nil {
		return fmt.Errorf("stores: %w", err)
	}
	if closeAll != nil {
		f.closers = append(f.closers, closeAll)
	}
	if len(ss) != len(clks) {
		return fmt.Errorf("%w: Stores built %d stores for %d clocks", ErrInvalidConfig, len(ss), len(clks))
	}
	for k, s := range ss {
		s, n := counted(s)
		f.counters = append(f.counters, n)
		if err := f.add(l, first+k, clks[k], s); err != nil {
			return err
		}
	}
	return nil
}

// newFleet builds the instances of l over virtual clock c.
func newFleet(l layout, c *clock) (f *fleet, err error) {
	f = new(fleet)
	defer func() {
		if err != nil {
			err = errors.Join(err, f.close())
		}
	}()
	switch {
	case l.stores != nil && l.topology != PerInstance:
		clks := make([]store.Clock, len(l.skews))
		for i, skew := range l.skews {
			clks[i] = c.Skewed(dur(skew))
		}
		return f, f.addStores(l, 0, clks)
	case l.stores != nil:
		for i, skew := range l.skews {
			if err := f.addStores(l, i, []store.Clock{c.Skewed(dur(skew))}); err != nil {
				return f, err
			}
		}
		return f, nil
	}
	switch l.topology {
	case Shared, Leased:
		f.caller = &callerClock{c: c}
		shards := make(sharded, max(l.shards, 1))
		for k := range shards {
			ms, err := memstore.New(memstore.Config{Clock: f.caller, Algorithm: l.alg})
			if err != nil {
				return f, fmt.Errorf("memstore: %w", err)
			}
			f.closers = append(f.closers, ms.Close)
			s, n := counted(ms)
			f.counters = append(f.counters, n)
			shards[k] = s
		}
		var s store.Store = shards[0]
		if len(shards) > 1 {
			s = shards
		}
		for i := range l.skews {
			if err := f.add(l, i, f.caller, s); err != nil {
				return f, err
			}
		}
	case PerInstance:
		for i, skew := range l.skews {
			clk := c.Skewed(dur(skew))
			ms, err := memstore.New(memstore.Config{Clock: clk, Algorithm: l.alg})
			if err != nil {
				return f, fmt.Errorf("memstore: %w", err)
			}
			f.closers = append(f.closers, ms.Close)
			s, n := counted(ms)
			f.counters = append(f.counters, n)
			if err := f.add(l, i, clk, s); err != nil {
				return f, err
			}
		}
	}
	return f, nil
}

// runStart is the virtual instant at which every run begins: midnight UTC
// on 1 January 2030. A fixed start keeps runs identical bit for bit, window
// boundaries included.
var runStart = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// clock is the simulator's virtual time. It satisfies store.Clock, so a
// store built with it reads simulated time, and it moves only when told to:
// [Run] sets it to each event's instant in turn, jumping over the quiet
// time between events. It never sleeps and never reads the real clock,
// which is why an hour of traffic takes seconds. (A
// github.com/benbjohnson/clock Mock would do the same job, but its Add and
// Set sleep a millisecond of real time each.)
//
// The zero clock reads the Unix epoch; newClock starts one elsewhere. A
// clock is safe for simultaneous use (a store may read it from its own
// goroutines); it must not be copied after first use.
type clock struct {
	us atomic.Int64 // µs since the Unix epoch
}

var _ store.Clock = (*clock)(nil)

// newClock returns a clock reading t, truncated to the microsecond.
func newClock(t time.Time) *clock {
	c := new(clock)
	c.Set(t)
	return c
}

// Now returns the current virtual time.
func (c *clock) Now() time.Time { return time.UnixMicro(c.us.Load()).UTC() }

// Set moves the clock to t (backwards too: a test may want that).
func (c *clock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// Add moves the clock by d and returns the new time.
func (c *clock) Add(d time.Duration) time.Time {
	return time.UnixMicro(c.us.Add(d.Microseconds())).UTC()
}

// Skewed returns a clock that reads c's time plus skew: the wall clock of
// an app instance whose clock is off by skew. It follows c as c moves.
func (c *clock) Skewed(skew time.Duration) store.Clock {
	return skewed{c, skew.Microseconds()}
}

// micros returns the virtual time in µs since the Unix epoch.
func (c *clock) micros() int64 { return c.us.Load() }

type skewed struct {
	c    *clock
	skew int64
}

func (s skewed) Now() time.Time { return time.UnixMicro(s.c.us.Load() + s.skew).UTC() }

// callerClock is the clock of one store shared by several skewed instances
// whose requests carry the caller's time, as redisstore does with a client
// clock: Lua receives the calling instance's Now. The simulator is
// single-threaded, so before each call it sets skew to the calling
// instance's, and the shared store reads exactly that instance's clock.
type callerClock struct {
	c    *clock
	skew atomic.Int64 // µs
}

func (k *callerClock) Now() time.Time {
	return time.UnixMicro(k.c.us.Load() + k.skew.Load()).UTC()
}
