package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// machine is a rapid state machine that drives the simulator's own fleets
// (the instances, Limiters and stores a Run uses) and the algo reference
// side by side, and requires identical answers at every step: the same
// Result, field for field, or the same sentinel error.
//
// The reference keeps one algo.State per key (per instance and key for
// PerInstance) and calls the algorithm with the calling instance's time,
// virtual time plus its skew, exactly what a shared store with client
// clocks (redisstore) or per-instance stores must compute. Like the
// stores, it forgets a bucket once the algorithm's IdleAt has passed at
// the caller's time (a full bucket is the same as none); with skewed
// clocks that is observable, in the reset time a slower instance sees.
type machine struct {
	alg    algo.Algorithm
	top    Topology
	clk    *clock
	skew   []time.Duration
	cur    int
	ref    []map[string]algo.State // [0] when shared
	fleets []*fleet
	names  []string
	steps  int
}

var machineKeys = []string{"a", "b", "{user}:1", "ключ"}

// policyOf gives every key one fixed policy, as the Store contract asks.
var machinePolicies = []algo.Policy{
	algo.PerSecond(2).Burst(5),
	algo.Per(3, 7*time.Second).Burst(4),
}

func policyOf(key string) algo.Policy {
	if key == "b" {
		return machinePolicies[1]
	}
	return machinePolicies[0]
}

func newMachine(t *rapid.T, alg algo.Algorithm, top Topology, rdbs map[string]Config) *machine {
	n := rapid.IntRange(1, 4).Draw(t, "instances")
	m := &machine{alg: alg, top: top, clk: newClock(runStart)}
	for i := range n {
		us := rapid.Int64Range(-2_000_000, 2_000_000).Draw(t, fmt.Sprintf("skew%d", i))
		m.skew = append(m.skew, time.Duration(us)*time.Microsecond)
	}
	refs := 1
	if top == PerInstance {
		refs = n
	}
	for range refs {
		m.ref = append(m.ref, map[string]algo.State{})
	}
	for name, base := range rdbs {
		cfg := base
		cfg.Instances, cfg.Skew = n, m.skew
		f, err := newFleet(cfg.layout(alg, top, Scenario{}), m.clk)
		if err != nil {
			t.Fatalf("%s fleet: %v", name, err)
		}
		t.Cleanup(func() {
			if err := f.close(); err != nil {
				t.Errorf("%s close: %v", name, err)
			}
		})
		m.fleets, m.names = append(m.fleets, f), append(m.names, name)
	}
	return m
}

func (m *machine) take(t *rapid.T) {
	key := rapid.SampledFrom(machineKeys).Draw(t, "key")
	p := policyOf(key)
	cost := rapid.Int64Range(-1, p.Capacity()+1).Draw(t, "cost")
	i := m.cur
	refs := m.ref[0]
	if m.top == PerInstance {
		refs = m.ref[i]
	}
	now := m.clk.micros() + m.skew[i].Microseconds()
	st, want, wantErr := m.alg.Take(p, refs[key], now, cost)
	switch {
	case wantErr != nil:
	case m.alg.IdleAt(p, st) <= now:
		delete(refs, key) // full again: stores may forget it, and do
	default:
		refs[key] = st
	}
	m.steps++
	for k, f := range m.fleets {
		lim, err := f.use(i).limiter(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lim.Take(context.Background(), key, cost)
		switch {
		case wantErr != nil:
			if !errors.Is(err, wantErr) {
				t.Fatalf("step %d: %s instance %d Take(%q, %d) error %v, reference %v", m.steps, m.names[k], i, key, cost, err, wantErr)
			}
		case err != nil:
			t.Fatalf("step %d: %s instance %d Take(%q, %d): %v", m.steps, m.names[k], i, key, cost, err)
		case got != (ratebucket.Result{Result: want, Limit: p.Capacity()}):
			t.Fatalf("step %d: %s instance %d (skew %v) Take(%q, %d) at %v\n got %+v\nwant %+v",
				m.steps, m.names[k], i, m.skew[i], key, cost, m.clk.Now(), got, want)
		}
	}
}

func (m *machine) advance(t *rapid.T) {
	d := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 1000), rapid.Int64Range(1, 12_000_000)).Draw(t, "µs")
	m.clk.Add(time.Duration(d) * time.Microsecond)
}

func (m *machine) switchInstance(t *rapid.T) {
	m.cur = rapid.IntRange(0, len(m.skew)-1).Draw(t, "instance")
}

// check: every fleet's backend saw exactly the valid takes.
func (m *machine) check(t *rapid.T) {
	for k, f := range m.fleets {
		if c := f.calls(); c > int64(m.steps) {
			t.Fatalf("%s made %d backend calls for %d takes", m.names[k], c, m.steps)
		}
	}
}

func runMachine(t *testing.T, alg algo.Algorithm, top Topology, stores map[string]Config) {
	rapid.Check(t, func(t *rapid.T) {
		m := newMachine(t, alg, top, stores)
		t.Repeat(map[string]func(*rapid.T){
			"take":    m.take,
			"advance": m.advance,
			"switch":  m.switchInstance,
			"":        m.check,
		})
	})
}

// TestMachineMemstore: for every algorithm, the simulator's shared
// memstore (reading the calling instance's skewed clock) and its
// per-instance memstores answer exactly as the algo reference does.
func TestMachineMemstore(t *testing.T) {
	for _, alg := range algorithms {
		for _, top := range []Topology{Shared, PerInstance} {
			t.Run(alg.Name()+"/"+top.String(), func(t *testing.T) {
				runMachine(t, alg, top, map[string]Config{"memstore": {}})
			})
		}
	}
}

// redisStores is a Config.Stores for the tests: redisstore stores on rdb,
// each on its clock, under a key prefix of their own per call, with no
// expiry (virtual time runs far ahead of Redis's clock). The server is the
// test's, so no key is deleted; cmd/ratebucket's --redis passes the
// factory users run, which deletes them.
func redisStores(rdb redis.UniversalClient) func(algo.Algorithm, []store.Clock) ([]store.Store, func() error, error) {
	var calls int
	return func(alg algo.Algorithm, clocks []store.Clock) ([]store.Store, func() error, error) {
		if _, ok := alg.(algo.TokenBucket); !ok {
			return nil, nil, store.ErrUnsupported
		}
		calls++
		var ss []store.Store
		var closeAll []func() error
		for _, clk := range clocks {
			rs, err := redisstore.New(rdb, redisstore.Config{Prefix: fmt.Sprintf("rb:simtest:%d:", calls), Clock: clk, TTLMargin: -1})
			if err != nil {
				return nil, nil, err
			}
			ss, closeAll = append(ss, rs), append(closeAll, rs.Close)
		}
		return ss, func() error {
			var errs []error
			for _, c := range closeAll {
				errs = append(errs, c())
			}
			return errors.Join(errs...)
		}, nil
	}
}

// TestMachineRedis: a fleet of redisstore stores from Config.Stores (one
// per instance, each on its own skewed client clock, sharing one real
// Redis) and the shared memstore both agree with the algo token bucket at
// every step.
func TestMachineRedis(t *testing.T) {
	srv := redistest.Start(t)
	runMachine(t, algo.TokenBucket{}, Shared, map[string]Config{
		"memstore":   {},
		"redisstore": {Stores: redisStores(srv.Client()), Backend: "redisstore"},
	})
}

// TestRedisRunMatchesMemstore: a whole scenario through three redisstore
// instances on one real Redis, each on its own skewed client clock, gives
// the same report as the shared memstore model of it.
func TestRedisRunMatchesMemstore(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{Scenario: "boundary-spike", Instances: 3, Seed: 5, Skew: []time.Duration{-300 * time.Millisecond, 0, 700 * time.Millisecond}}
	mem, err := run1(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Stores, cfg.Backend = redisStores(srv.Client()), "redisstore"
	red, err := run1(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if red.Backend != "redisstore" || red.Setup() != "redis×3+skew" {
		t.Errorf("redis run reports backend %q, setup %q", red.Backend, red.Setup())
	}
	red.Backend = mem.Backend
	a, _ := mem.JSON()
	b, _ := red.JSON()
	if string(a) != string(b) {
		t.Fatalf("redisstore and memstore runs differ:\n%s", firstDiff(b, a))
	}
	if !red.Law.Holds || red.Law.Slack != time.Second {
		t.Errorf("law on the redis run: %v, slack %v", red.Law, red.Law.Slack)
	}
}

// TestStoresPerInstance: under PerInstance, Stores is asked once per
// instance, with that instance's skewed clock, and a factory of memstores
// gives the report and timeline the default memstores give.
func TestStoresPerInstance(t *testing.T) {
	cfg := Config{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Topologies: []Topology{PerInstance}, Instances: 3, Seed: 2,
		Skew: []time.Duration{0, 400 * time.Millisecond, -time.Second}, Duration: 3 * time.Minute}
	want, err := run1(cfg)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	cfg.Stores = func(alg algo.Algorithm, clocks []store.Clock) ([]store.Store, func() error, error) {
		calls++
		if len(clocks) != 1 {
			t.Errorf("Stores asked for %d stores under PerInstance, want 1", len(clocks))
		}
		ms, err := memstore.New(memstore.Config{Clock: clocks[0], Algorithm: alg})
		if err != nil {
			return nil, nil, err
		}
		return []store.Store{ms}, ms.Close, nil
	}
	cfg.Backend = "ownstore"
	got, err := run1(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 || got.Backend != "ownstore" {
		t.Fatalf("Stores called %d times, backend %q; want 3, ownstore", calls, got.Backend)
	}
	got.Backend = want.Backend
	for _, v := range [][2]any{{want, got}, {want.Timeline, got.Timeline}} {
		a, _ := json.Marshal(v[0])
		b, _ := json.Marshal(v[1])
		if !bytes.Equal(a, b) {
			t.Fatalf("memstores from Stores and the default differ:\n%s", firstDiff(b, a))
		}
	}
}
