package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

func TestConfigErrors(t *testing.T) {
	// A Stores that must not be called: the config is refused before.
	never := func(algo.Algorithm, []store.Clock) ([]store.Store, func() error, error) {
		t.Error("Stores called for an invalid config")
		return nil, nil, nil
	}
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"unknown scenario", Config{Scenario: "nope"}, ErrUnknownScenario},
		{"empty scenario", Config{}, ErrUnknownScenario},
		{"negative instances", Config{Scenario: "sensor", Instances: -1}, ErrInvalidConfig},
		{"too many instances", Config{Scenario: "sensor", Instances: MaxInstances + 1}, ErrInvalidConfig},
		{"more skews than instances", Config{Scenario: "sensor", Instances: 2, Skew: make([]time.Duration, 3)}, ErrInvalidConfig},
		{"skew beyond an hour", Config{Scenario: "sensor", Skew: []time.Duration{2 * time.Hour}}, ErrInvalidConfig},
		{"negative scale", Config{Scenario: "sensor", Scale: -1}, ErrInvalidConfig},
		{"duration beyond a day", Config{Scenario: "sensor", Duration: MaxDuration + time.Second}, ErrInvalidConfig},
		{"sub-microsecond duration", Config{Scenario: "sensor", Duration: time.Second + 1}, ErrInvalidConfig},
		{"unknown topology", Config{Scenario: "sensor", Topologies: []Topology{Shared, 7}}, ErrInvalidConfig},
		{"leased under a window", Config{Scenario: "leases", Topologies: []Topology{Leased},
			Algorithms: []algo.Algorithm{algo.TokenBucket{}, algo.FixedWindow{}}}, ErrInvalidConfig},
		{"nil algorithm", Config{Scenario: "sensor", Algorithms: []algo.Algorithm{algo.TokenBucket{}, nil}}, ErrInvalidConfig},
		{"invalid policy", Config{Scenario: "sensor", Policy: algo.PerSecond(0).Burst(10)}, algo.ErrInvalidPolicy},
		{"stores without a backend name", Config{Scenario: "sensor", Stores: never}, ErrInvalidConfig},
		{"a backend name without stores", Config{Scenario: "sensor", Backend: "redisstore"}, ErrInvalidConfig},
		{"stores refusing the algorithm", Config{Scenario: "sensor", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Backend: "tokenstore",
			Stores: func(algo.Algorithm, []store.Clock) ([]store.Store, func() error, error) {
				return nil, nil, store.ErrUnsupported
			}},
			store.ErrUnsupported},
		{"stores building too few", Config{Scenario: "sensor", Instances: 2, Backend: "fewstore",
			Stores: func(_ algo.Algorithm, clocks []store.Clock) ([]store.Store, func() error, error) {
				ms, err := memstore.New(memstore.Config{Clock: clocks[0]})
				return []store.Store{ms}, ms.Close, err
			}}, ErrInvalidConfig},
		{"cost above the policy's capacity", Config{Scenario: "cost", Policy: algo.PerSecond(2).Burst(5)}, algo.ErrCostExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := run1(tt.cfg)
			if !errors.Is(err, tt.want) || rep != nil {
				t.Fatalf("Run = %v, %v; want nil, error matching %v", rep, err, tt.want)
			}
		})
	}
	if top := PerInstance; top.UnmarshalText([]byte("mesh")) == nil || top != PerInstance {
		t.Errorf("Topology.UnmarshalText(mesh) took it, or changed the topology to %v", top)
	}
	if b, err := Leased.MarshalText(); err != nil || string(b) != "leased" {
		t.Errorf("Leased.MarshalText() = %q, %v", b, err)
	} else if top := Topology(0); top.UnmarshalText(b) != nil || top != Leased {
		t.Errorf("Topology.UnmarshalText(leased) = %v", top)
	}
	failing := func(int, store.Clock, store.Store) (store.Store, error) { return nil, io.ErrUnexpectedEOF }
	if _, err := run1(Config{Scenario: "sensor", Wrap: failing}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Run with a failing Wrap: error = %v, want the wrapper's", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Config{Scenario: "sensor"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Run(cancelled) error = %v", err)
	}
}

func TestLookupAndScenarios(t *testing.T) {
	names := map[string]bool{}
	for _, sc := range Scenarios() {
		if names[sc.Name] || sc.Summary == "" || sc.Policy.Validate() != nil || sc.Duration <= 0 {
			t.Errorf("scenario %+v: duplicate or incomplete", sc)
		}
		names[sc.Name] = true
		got, err := lookup(sc.Name)
		if err != nil || got.Name != sc.Name {
			t.Errorf("lookup(%q) = %v, %v", sc.Name, got.Name, err)
		}
	}
	for _, n := range []string{"mobile", "boundary-spike", "sensor", "abuser", "campus-nat-ip", "campus-nat-user", "cost"} {
		if !names[n] {
			t.Errorf("scenario %q missing", n)
		}
	}
}

// TestCountWrapsStores: Count counts every call and offers TakeMulti
// exactly when the store does.
func TestCountWrapsStores(t *testing.T) {
	ms, err := memstore.New(memstore.Config{Clock: newClock(runStart)})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	s, n := counted(ms)
	p := algo.PerSecond(1).Burst(2)
	ctx := context.Background()
	for range 3 {
		if _, err := s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TakeMulti(ctx, []store.Request{{Key: "a", Policy: p, Cost: 1}, {Key: "b", Policy: p, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if n.Calls() != 4 {
		t.Errorf("Calls() = %d, want 4", n.Calls())
	}
}

// TestWrapSeesBackendCalls: a wrapper that answers some calls itself
// (here: every other one) shows up as fewer backend calls.
func TestWrapSeesBackendCalls(t *testing.T) {
	plain, err := run1(Config{Scenario: "sensor", Instances: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	half, err := run1(Config{Scenario: "sensor", Instances: 2, Seed: 3,
		Wrap: func(_ int, _ store.Clock, s store.Store) (store.Store, error) { return &everyOther{Store: s}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if plain.BackendCalls != plain.Total.Requests {
		t.Errorf("plain run: %d backend calls for %d requests", plain.BackendCalls, plain.Total.Requests)
	}
	if half.Total.BackendCalls != half.BackendCalls || plain.Classes[0].BackendCalls != plain.Classes[0].Requests {
		t.Errorf("per-class calls: total %d of %d; plain class %+v", half.Total.BackendCalls, half.BackendCalls, plain.Classes[0])
	}
	if half.BackendCalls >= plain.BackendCalls*6/10 {
		t.Errorf("wrapped run made %d backend calls, plain %d: wrapper not counted above the backend", half.BackendCalls, plain.BackendCalls)
	}
}

type everyOther struct {
	store.Store
	n int
}

func (e *everyOther) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	e.n++
	if e.n%2 == 0 {
		return algo.Result{Allowed: true}, nil
	}
	return e.Store.Take(ctx, req)
}

func TestClock(t *testing.T) {
	c := newClock(runStart)
	if !c.Now().Equal(runStart) {
		t.Fatalf("Now() = %v, want %v", c.Now(), runStart)
	}
	s := c.Skewed(-1500 * time.Microsecond)
	c.Add(time.Minute)
	if got, want := s.Now(), runStart.Add(time.Minute-1500*time.Microsecond); !got.Equal(want) {
		t.Errorf("skewed Now() = %v, want %v", got, want)
	}
	c.Set(runStart)
	if !c.Now().Equal(runStart) {
		t.Errorf("after Set, Now() = %v", c.Now())
	}
}

func TestJSON(t *testing.T) {
	r := matrix(t, "abuser")[tokenPerInstance]
	js, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Topology != PerInstance || back.Total != r.Total || back.Law.Holds || back.Timeline != nil {
		t.Errorf("JSON round trip lost data: %+v", back)
	}
	if !bytes.Contains(js, []byte(`"topology": "per-instance"`)) {
		t.Errorf("topology not named in JSON:\n%s", js)
	}
}

func TestWriteSVG(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // in the SVG
		zoom bool
	}{
		{"boundary spike zooms on the worst interval", Config{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Instances: 3, Seed: 1},
			[]string{"zoomed on 59s to 1m1s", `fill="url(#hatch)"`, "199 admitted in 1s: bound 101", "stroke-dasharray=\"4 3\"", "BROKEN"}, true},
		{"an hour of sensors in one panel", Config{Scenario: "sensor", Duration: time.Hour, Seed: 1},
			[]string{"the whole run at device:0", "law holds"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := run1(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := r.Timeline.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
			paths := 0
			for {
				tok, err := d.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("SVG is not well-formed XML: %v", err)
				}
				if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
					paths++
				}
			}
			svg := b.String()
			for _, w := range tt.want {
				if !strings.Contains(svg, w) {
					t.Errorf("SVG lacks %q", w)
				}
			}
			if got := strings.Contains(svg, "zoomed on"); got != tt.zoom || paths < 2 {
				t.Errorf("zoom panel %v, want %v; %d paths", got, tt.zoom, paths)
			}
		})
	}
	if err := (&Timeline{}).WriteSVG(io.Discard); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("WriteSVG of an empty timeline: error = %v", err)
	}
}

// TestConcurrentRuns: runs share nothing, so runs in parallel give the
// same reports as one after another.
func TestConcurrentRuns(t *testing.T) {
	cfgs := []Config{
		{Scenario: "sensor", Instances: 2, Seed: 9},
		{Scenario: "cost", Instances: 3, Topologies: []Topology{PerInstance}, Seed: 9},
		{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Instances: 2, Seed: 9},
	}
	want := make([][]byte, len(cfgs))
	for i, cfg := range cfgs {
		r, err := run1(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want[i], _ = r.JSON()
	}
	got := make([][]byte, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() {
			r, err := run1(cfg)
			if errs[i] = err; err == nil {
				got[i], errs[i] = r.JSON()
			}
		})
	}
	wg.Wait()
	for i := range cfgs {
		if errs[i] != nil || !bytes.Equal(got[i], want[i]) {
			t.Errorf("%s run concurrently: %v, or a different report", cfgs[i].Scenario, errs[i])
		}
	}
}

// TestNoRedisInBuild: sim builds without go-redis, redisstore or anything
// else of Redis's; a caller brings Redis through Config.Stores (as
// cmd/ratebucket's --redis does). It asks the go command what sim's build
// depends on.
func TestNoRedisInBuild(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if strings.Contains(strings.ToLower(dep), "redis") {
			t.Errorf("sim depends on %s", dep)
		}
	}
	if !slices.Contains(deps, "github.com/ratebucket/ratebucket/memstore") {
		t.Errorf("go list -deps does not list memstore, which sim imports: %v", deps)
	}
}
