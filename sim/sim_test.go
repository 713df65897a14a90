package sim

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

var update = flag.Bool("update", false, "rewrite sim/testdata/*.golden from the current output")

// run1 runs cfg, which names at most one algorithm and one topology, and
// returns its one report.
func run1(cfg Config) (*Report, error) {
	reps, err := Run(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	return reps[0], nil
}

// algorithms are the algorithms the simulator exists to compare.
var algorithms = []algo.Algorithm{algo.TokenBucket{}, algo.FixedWindow{}, algo.SlidingWindow{}}

// everyTopology is both topologies, shared first.
var everyTopology = []Topology{Shared, PerInstance}

// matrices caches the runs of every algorithm on every topology per
// scenario for the fixed golden setup (3 instances, seed 1), shared by
// the tests that read it.
var matrices sync.Map // name → Reports

func matrix(t *testing.T, name string) Reports {
	t.Helper()
	if v, ok := matrices.Load(name); ok {
		return v.(Reports)
	}
	reps, err := Run(context.Background(), Config{Scenario: name, Algorithms: algorithms, Topologies: everyTopology, Instances: 3, Seed: 1})
	if err != nil {
		t.Fatalf("Run(%s): %v", name, err)
	}
	matrices.Store(name, reps)
	return reps
}

// scenarioText is what the golden files hold: the comparison table, then
// each run in detail.
func scenarioText(t *testing.T, sc Scenario, reps Reports) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("## " + sc.Name + ": " + sc.Summary + "\n\n")
	b.WriteString(reps.Table())
	for _, r := range reps {
		b.WriteString("\n" + r.Markdown())
	}
	return b.Bytes()
}

// TestGolden compares every scenario's tables, for seed 1 and 3
// instances, with sim/testdata/<scenario>.golden. A change in behaviour
// shows up there in review; go test ./sim -run Golden -update rewrites them.
func TestGolden(t *testing.T) {
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			got := scenarioText(t, sc, matrix(t, sc.Name))
			path := filepath.Join("testdata", sc.Name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the current output (go test ./sim -run Golden -update rewrites it):\n%s", path, firstDiff(got, want))
			}
		})
	}
}

// firstDiff shows the first differing line.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + a + "\nwant: " + b
		}
	}
	return "(lengths differ)"
}

// TestTablesFit80Columns checks that every line of every golden table fits
// an 80-column terminal.
func TestTablesFit80Columns(t *testing.T) {
	for _, sc := range Scenarios() {
		for i, line := range strings.Split(string(scenarioText(t, sc, matrix(t, sc.Name))), "\n") {
			if n := len([]rune(line)); n > 80 && !strings.HasPrefix(line, "## ") {
				t.Errorf("%s line %d is %d columns: %q", sc.Name, i+1, n, line)
			}
		}
	}
}

// TestDeterministic runs the same configs twice and requires identical
// bytes in every rendering; a different seed must change the traffic.
func TestDeterministic(t *testing.T) {
	cfgs := []Config{
		{Scenario: "mobile", Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Instances: 3, Seed: 7, Duration: 8 * time.Minute},
		{Scenario: "cost", Instances: 2, Topologies: []Topology{PerInstance}, Seed: 7, Skew: []time.Duration{time.Second}},
		{Scenario: "boundary-spike", Algorithms: []algo.Algorithm{algo.SlidingWindow{}}, Instances: 3, Seed: 7, Skew: []time.Duration{-time.Second, 0, 2 * time.Second}},
	}
	render := func(cfg Config) []byte {
		rep, err := run1(cfg)
		if err != nil {
			t.Fatalf("Run(%+v): %v", cfg, err)
		}
		js, err := rep.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.Write(js)
		b.WriteString(rep.Markdown())
		b.WriteString(Reports{rep}.Table())
		if err := rep.Timeline.WriteSVG(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, cfg := range cfgs {
		t.Run(cfg.Scenario, func(t *testing.T) {
			a, b := render(cfg), render(cfg)
			if !bytes.Equal(a, b) {
				t.Fatalf("two runs of the same config differ:\n%s", firstDiff(a, b))
			}
			other := cfg
			other.Seed++
			if bytes.Equal(a, render(other)) {
				t.Fatalf("seeds %d and %d gave identical output: the seed does not reach the traffic", cfg.Seed, other.Seed)
			}
		})
	}
}
