package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store"
)

// Errors returned by this package. Match them with [errors.Is].
var (
	// ErrUnknownScenario reports a scenario name that [Scenarios] does
	// not list.
	ErrUnknownScenario = errors.New("sim: unknown scenario")
	// ErrInvalidConfig reports a [Config] field out of range or a
	// combination the simulator cannot run.
	ErrInvalidConfig = errors.New("sim: invalid config")
)

// Limits on [Config] fields.
const (
	// MaxInstances is the largest Config.Instances.
	MaxInstances = 1000
	// MaxScale is the largest Config.Scale.
	MaxScale = 1000
	// MaxDuration is the longest Config.Duration: a simulated day.
	MaxDuration = 24 * time.Hour
	// MaxTrafficRequests bounds the requests Config.Traffic may send
	// over a run.
	MaxTrafficRequests = 100_000
)

// Config describes a simulation: a scenario's traffic through app
// instances, run under each of Algorithms on each of Topologies, a run and
// a [Report] for each pair. The zero value plus a Scenario name is one
// valid run: the token bucket, one instance on a shared memstore, seed 0,
// the scenario's policy and duration.
type Config struct {
	// Scenario names the traffic, as listed by [Scenarios]. Required,
	// unless Traffic is set.
	Scenario string
	// Traffic, when set, is traffic drawn by hand instead of a named
	// scenario, as a learner does in the playground: 1 to 10 clients
	// sharing one key (devices behind one IP, or one API key), one
	// [Pattern] each, named "client 1", "client 2", … Its scenario is
	// called "custom" (Scenario must be empty or that); unless Policy
	// says otherwise its policy is that of the boundary spike, 100 a
	// minute with a burst of 100, and its duration two minutes or until
	// 30 s after its last burst, whichever is longer.
	Traffic []Pattern
	// Algorithms are the rate-limiting rules, each run on each of
	// Topologies, in order. The default is the token bucket alone; the
	// simulator exists to set it beside algo.FixedWindow{} and
	// algo.SlidingWindow{}.
	Algorithms []algo.Algorithm
	// Topologies says whether the instances share one store ([Shared])
	// or keep their own ([PerInstance]), each a run of its own, in order.
	// The default is Shared alone.
	Topologies []Topology
	// Instances is the number of app instances behind the load balancer,
	// which sends each request to one of them uniformly at random. The
	// default is 1.
	Instances int
	// Skew offsets each instance's clock: instance i reads virtual time
	// plus Skew[i]; instances past len(Skew) have none. The default is no
	// skew.
	Skew []time.Duration
	// Seed selects the random traffic. The same Config gives the same
	// Reports, bit for bit.
	Seed uint64
	// Duration is the virtual time covered. The default is the scenario's.
	Duration time.Duration
	// Policy replaces the scenario's main policy (see [Scenario.Policy]).
	// The zero Policy keeps it.
	Policy algo.Policy
	// Cost, when positive, is the cost of every request of the run,
	// whatever the scenario or the Traffic says: a learner's "what if each
	// request took 2 tokens". It may not exceed the policy's capacity
	// ([algo.ErrCostExceedsCapacity]). The default, zero, keeps each
	// request's own cost.
	Cost int64
	// Scale multiplies the number of clients in every class: Scale 50 on
	// "mobile" simulates 5,000 clients. The default is 1.
	Scale int
	// Stores, when set, builds the stores of a run instead of memstore:
	// one per clock given, the i-th reading clocks[i], the clock of an
	// instance (virtual time plus its skew), which the store must send
	// with every request (redisstore's client clock does). The stores of
	// one call keep one state between them, as redisstore clients of one
	// Redis under a fresh key prefix do, and no other call sees it. Under
	// Shared it is called once per run with every instance's clock; under
	// PerInstance once per instance with its own. alg is the run's
	// algorithm: refuse one the stores cannot run with an error wrapping
	// store.ErrUnsupported. closeAll, if not nil, is called when the run
	// ends, to close the stores and delete their state; when Stores
	// returns an error it has released what it built. The default is
	// memstore, which runs every algorithm. Runs over a network are bound
	// by round trips: expect thousands of requests per second, not
	// millions.
	Stores func(alg algo.Algorithm, clocks []store.Clock) (stores []store.Store, closeAll func() error, err error)
	// Backend names the stores Stores builds in reports
	// ([Report.Backend]), such as "redisstore". It is required with
	// Stores, and without them the name is "memstore".
	Backend string
	// Wrap, when set, wraps each instance's store before its Limiters are
	// built: s is the backend store (already counted, so calls a wrapper
	// answers itself do not count as backend calls) and clk the clock the
	// instance reads. A local deny cache is measured this way.
	Wrap func(instance int, clk store.Clock, s store.Store) (store.Store, error)
}

func (c *Config) instances() int { return max(c.Instances, 1) }

// algorithms returns Algorithms, or the default.
func (c *Config) algorithms() []algo.Algorithm {
	if len(c.Algorithms) == 0 {
		return []algo.Algorithm{algo.TokenBucket{}}
	}
	return c.Algorithms
}

// topologies returns Topologies, or the default.
func (c *Config) topologies() []Topology {
	if len(c.Topologies) == 0 {
		return []Topology{Shared}
	}
	return c.Topologies
}

func (c *Config) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	switch {
	case c.Instances < 0 || c.Instances > MaxInstances:
		return bad("instances %d outside [1, %d]", c.Instances, MaxInstances)
	case len(c.Skew) > c.instances():
		return bad("%d skews for %d instances", len(c.Skew), c.instances())
	case c.Cost < 0:
		return bad("cost %d below zero", c.Cost)
	case c.Scale < 0 || c.Scale > MaxScale:
		return bad("scale %d outside [1, %d]", c.Scale, MaxScale)
	case c.Duration < 0 || c.Duration > MaxDuration || c.Duration%time.Microsecond != 0:
		return bad("duration %v outside [1µs, %v] or not whole µs", c.Duration, MaxDuration)
	case slices.Contains(c.Algorithms, nil):
		return bad("a nil algorithm")
	case slices.ContainsFunc(c.Topologies, func(t Topology) bool { return !t.valid() }):
		return bad("topology not Shared, PerInstance or Leased in %v", c.Topologies)
	case slices.Contains(c.Topologies, Leased) && slices.ContainsFunc(c.Algorithms, func(a algo.Algorithm) bool {
		return a.Name() != (algo.TokenBucket{}).Name()
	}):
		return bad("Leased runs the token bucket only, not with %v", c.Algorithms)
	case (c.Stores == nil) != (c.Backend == ""):
		return bad("Backend names the stores Stores builds: set both or neither")
	}
	for _, s := range c.Skew {
		if s < -time.Hour || s > time.Hour {
			return bad("skew %v outside ±1h", s)
		}
	}
	if c.Policy != (algo.Policy{}) {
		if err := c.Policy.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// runPlan is one run of a Config, resolved before anything runs: the
// scenario looked up, every default filled in, and each phase's share set
// apart, so that no phase reads the Config. newFleet takes the layout;
// newRecorder the scenario, base, length, scale and seed; simulate the
// seed; report the head and the slack.
type runPlan struct {
	layout   layout
	scenario Scenario
	base     algo.Policy   // the scenario's main policy, or Config.Policy
	length   time.Duration // the virtual time covered
	cost     int64         // every request's cost, or 0 for its own
	scale    int
	seed     uint64
	head     Report        // the run's description, with nothing measured yet
	slack    time.Duration // the law's: the spread of the skews
}

// resolve checks c and resolves it into the plans of its runs: one per
// algorithm and topology, algorithms first.
func (c *Config) resolve() ([]runPlan, error) {
	sc, err := c.scenario()
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	p := runPlan{scenario: sc, base: sc.Policy, length: sc.Duration,
		cost: c.Cost, scale: max(c.Scale, 1), seed: c.Seed}
	if c.Policy != (algo.Policy{}) {
		p.base = c.Policy
	}
	if c.Cost > p.base.Capacity() {
		return nil, fmt.Errorf("sim: cost %d above the capacity of %v: %w", c.Cost, p.base, algo.ErrCostExceedsCapacity)
	}
	if c.Duration > 0 {
		p.length = c.Duration
	}
	if len(c.Traffic) > 0 {
		if err := traffic(c.Traffic).check(p.length); err != nil {
			return nil, err
		}
	}
	backend := "memstore"
	if c.Stores != nil {
		backend = c.Backend
	}
	var plans []runPlan
	for _, alg := range c.algorithms() {
		for _, top := range c.topologies() {
			q := p
			q.layout = c.layout(alg, top, sc)
			q.slack = q.layout.spread()
			if sc.debt { // Bound(t + FillTime) ≥ SettleBound(t)
				q.slack += p.base.FillTime()
			}
			q.head = Report{
				Scenario: sc.Name, Algorithm: alg.Name(), Topology: top,
				Instances: len(q.layout.skews), Skew: slices.Clone(c.Skew),
				Backend: backend, Seed: c.Seed, Duration: p.length, Policy: p.base.String(), Cost: c.Cost,
			}
			plans = append(plans, q)
		}
	}
	return plans, nil
}

// scenario returns the named scenario, or the one Traffic makes.
func (c *Config) scenario() (Scenario, error) {
	if len(c.Traffic) == 0 {
		return lookup(c.Scenario)
	}
	if c.Scenario != "" && c.Scenario != custom {
		return Scenario{}, fmt.Errorf("%w: scenario %q and traffic both given", ErrInvalidConfig, c.Scenario)
	}
	return traffic(c.Traffic).scenario(), nil
}

// layout resolves the instances and their stores for a run of alg on
// topology top in scenario sc: one skew per instance, in µs, and the
// scenario's lease lifetime and shards.
func (c *Config) layout(alg algo.Algorithm, top Topology, sc Scenario) layout {
	skews := make([]int64, c.instances())
	for i, s := range c.Skew {
		skews[i] = s.Microseconds()
	}
	l := layout{alg: alg, topology: top, skews: skews, stores: c.Stores, wrap: c.Wrap,
		lifetime: sc.lifetime, shards: sc.shards}
	if l.lifetime == 0 {
		l.lifetime = hybrid.DefaultLifetime
	}
	return l
}

// Run simulates cfg: a run of its scenario for each of its algorithms on
// each of its topologies, in that order, each reported in a [Report]. The
// whole Config is checked before anything runs. ctx bounds the runs (only
// runs over a network store take long enough to care). Runs may go on in
// several goroutines at once: each has its own clock, stores and random
// streams. Every error wraps a sentinel: [ErrUnknownScenario],
// [ErrInvalidConfig], an algo error for a request its policy cannot hold
// (such as a cost above capacity), or the store's error.
func Run(ctx context.Context, cfg Config) (Reports, error) {
	plans, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	reps := make(Reports, 0, len(plans))
	for _, p := range plans {
		rep, err := p.run(ctx)
		if err != nil {
			return nil, fmt.Errorf("sim: %s, %s, %v: %w", p.head.Scenario, p.head.Algorithm, p.head.Topology, err)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// run makes the run p plans.
func (p runPlan) run(ctx context.Context) (rep *Report, err error) {
	clk := newClock(runStart)
	f, err := newFleet(p.layout, clk)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.close(); cerr != nil && err == nil {
			rep, err = nil, cerr
		}
	}()
	r := newRecorder(p.scenario, p.base, p.length, p.scale, p.seed, p.layout)
	r.setCost(p.cost)
	if p.layout.topology == Leased {
		f.tap = r.trace.backend
	}
	if err := r.simulate(ctx, f, clk, p.seed); err != nil {
		return nil, err
	}
	rep, err = r.report(p.head, f.calls(), p.slack)
	if err == nil && p.layout.shards > 1 && p.layout.stores == nil {
		for _, c := range f.counters {
			rep.ShardCalls = append(rep.ShardCalls, c.Calls())
		}
	}
	return rep, err
}

// client is one simulated user, device or attacker.
type client struct {
	class    int
	name     string // class and index, as "mobile 0", or the class of one
	key      string
	policy   algo.Policy
	entitled algo.Policy
	gen      generator
	rng      *rand.Rand

	requests, admitted, offered, admittedCost, calls int64
}

// event is a client's next request.
type event struct {
	at, cost int64
	seq      uint64
	client   int32
}

// events is a binary min-heap of events by (at, seq): ties go to the
// earlier-scheduled, so the order is total and runs are reproducible.
type events []event

func (h events) less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}

func (h *events) push(e event) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *events) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// simulate runs the event loop: pop the earliest request, move the clock
// there, send it through a random instance's Limiter, record the answer,
// and ask the client for its next request. seed draws the instances.
func (r *recorder) simulate(ctx context.Context, f *fleet, clk *clock, seed uint64) error {
	var h events
	var seq uint64
	end := r.length.Microseconds()
	schedule := func(c int, q req, ok bool) {
		if r.cost > 0 {
			q.cost = r.cost
		}
		if ok && q.at < end {
			h.push(event{at: q.at, cost: q.cost, seq: seq, client: int32(c)})
			seq++
		}
	}
	for i, c := range r.clients {
		q, ok := c.gen.next(c.rng, 0, nil)
		schedule(i, q, ok)
	}
	lb := rand.New(rand.NewPCG(seed, 0x10adba1a))
	n := len(f.instances)
	start := runStart.UnixMicro()
	for steps := 0; len(h) > 0; steps++ {
		if steps&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e := h.pop()
		c := r.clients[e.client]
		clk.us.Store(start + e.at)
		i := 0
		if n > 1 {
			i = lb.IntN(n)
		}
		in := f.use(i)
		lim, err := in.limiter(c.policy)
		if err != nil {
			return err
		}
		before := f.calls()
		out, err := r.classes[c.class].serve(ctx, in.store, lim, c, e)
		c.calls += f.calls() - before
		if err != nil {
			return fmt.Errorf("%s at %v, cost %d: %w", c.name, dur(e.at), e.cost, err)
		}
		r.record(c, e, i, out)
		q, ok := c.gen.next(c.rng, e.at, &out.res)
		schedule(int(e.client), q, ok)
	}
	return nil
}

// dur converts µs to a Duration.
func dur(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// sortedKeys returns m's keys in order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
