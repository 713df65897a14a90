package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/sim"
)

// TestSimGolden pins the output of the README's first command,
// `go run ./cmd/ratebucket sim`, byte for byte. After a deliberate change in
// the simulator, regenerate it with: go test ./cmd/ratebucket -run SimGolden -update
func TestSimGolden(t *testing.T) {
	stdout, stderr, code := runCLI(t, "sim")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	golden := filepath.Join("testdata", "sim.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if stdout != string(want) {
		t.Fatalf("sim output differs from %s (rerun with -update if the change is intended):\n%s", golden, stdout)
	}
	// Every scenario, every algorithm, both layouts, in 80 columns.
	var names []string
	for _, s := range sim.Scenarios() {
		names = append(names, "## "+s.Name+"\n")
	}
	wantText(t, stdout, append(names, "| token   | shared×3   |", "| fixed   | per-inst×3 |", "| sliding | shared×3   |", "law held")...)
}

func TestSimDeterministic(t *testing.T) {
	args := []string{"sim", "--scenario", "mobile,abuser", "--seed", "42", "--instances", "2", "--duration", "1m"}
	a, _, codeA := runCLI(t, args...)
	b, _, codeB := runCLI(t, args...)
	if codeA != exitOK || codeB != exitOK || a != b {
		t.Fatalf("two runs with seed 42 differ (exit %d, %d)", codeA, codeB)
	}
	c, _, _ := runCLI(t, "sim", "--scenario", "mobile,abuser", "--seed", "43", "--instances", "2", "--duration", "1m")
	if c == a {
		t.Fatal("seeds 42 and 43 print the same numbers")
	}
	wantText(t, a, "shared×2", "per-inst×2")
}

// TestSimJSONBoundarySpike reads the machine output and checks what the
// scenario exists to show: the fixed window breaks the law at a window
// boundary, the token bucket on a shared store does not.
func TestSimJSONBoundarySpike(t *testing.T) {
	stdout, stderr, code := runCLI(t, "sim", "--scenario", "boundary-spike", "--algo", "fixed,token", "--topology", "shared", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var reports []sim.Report
	if err := json.Unmarshal([]byte(stdout), &reports); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(reports) != 2 {
		t.Fatalf("got %d reports, want 2 (fixed, token)", len(reports))
	}
	fixed, token := reports[0], reports[1]
	if fixed.Algorithm != "fixedwindow" || token.Algorithm != "tokenbucket" || fixed.Topology != sim.Shared {
		t.Fatalf("reports for %s/%v and %s/%v", fixed.Algorithm, fixed.Topology, token.Algorithm, token.Topology)
	}
	if fixed.Law.Holds || fixed.Law.Admitted <= fixed.Law.Bound {
		t.Fatalf("fixed window kept the law: %+v", fixed.Law)
	}
	if !token.Law.Holds || token.Law.Admitted > token.Law.Bound {
		t.Fatalf("token bucket broke the law: %+v", token.Law)
	}
}

func TestSimSVG(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "charts")
	stdout, stderr, code := runCLI(t, "sim", "--scenario", "sensor", "--algo", "token,fixed", "--topology", "shared", "--duration", "1m", "--svg", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, name := range []string{"sensor-token-shared.svg", "sensor-fixed-shared.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); !strings.Contains(s, "<svg") || !strings.HasSuffix(strings.TrimSpace(s), "</svg>") {
			t.Fatalf("%s is not an SVG document: %.200s", name, s)
		}
	}
	if !strings.Contains(stdout, "Wrote 2 SVG charts, such as sensor-token-shared.svg, to\n  "+dir+"\n") {
		t.Fatalf("output does not name the charts:\n%s", stdout)
	}
}

// TestDocsChartsAreCurrent: the README's charts are what `ratebucket sim
// --scenario boundary-spike --algo fixed,token --topology shared --svg docs`
// draws today, byte for byte, so a change to the simulator or to its
// charts cannot leave stale pictures. After a deliberate change,
// regenerate them with that command.
func TestDocsChartsAreCurrent(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := runCLI(t, "sim", "--scenario", "boundary-spike", "--algo", "fixed,token", "--topology", "shared", "--svg", dir); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, name := range []string{"boundary-spike-fixed-shared.svg", "boundary-spike-token-shared.svg"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("docs/%s is stale: regenerate it with go run ./cmd/ratebucket sim --scenario boundary-spike --algo fixed,token --topology shared --svg docs", name)
		}
	}
}

func TestSimList(t *testing.T) {
	stdout, _, code := runCLI(t, "sim", "--list")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, s := range sim.Scenarios() {
		if !strings.Contains(stdout, s.Name+" ") {
			t.Errorf("--list lacks %s:\n%s", s.Name, stdout)
		}
	}
}

func TestSimUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"--scenario", "tsunami"}, `unknown scenario: "tsunami"`},
		{"unknown algorithm", []string{"--algo", "leaky"}, `--algo "leaky": want a comma-separated list of token, fixed, sliding`},
		{"unknown topology", []string{"--topology", "mesh"}, `--topology "mesh"`},
		{"no instances", []string{"--instances", "0"}, "--instances 0"},
		{"negative duration", []string{"--duration", "-1m"}, "duration -1m0s outside"},
		{"no scale", []string{"--scale", "0"}, "--scale 0"},
		{"scale too large", []string{"--scale", "100000"}, "scale 100000 outside [1, 1000]"},
		{"redis without the token bucket", []string{"--redis", "127.0.0.1:1", "--algo", "fixed"}, "--redis runs only the token bucket"},
		{"bad skew", []string{"--skew", "0,soon"}, `invalid value "0,soon" for flag -skew`},
		{"more skews than instances", []string{"--instances", "2", "--skew", "0,1s,2s"}, "3 skews for 2 instances"},
		{"skew beyond an hour", []string{"--scenario", "sensor", "--skew", "2h"}, "skew 2h0m0s outside ±1h"},
		{"policy too small for a scenario's costs", []string{"--scenario", "cost", "--capacity", "5", "--rate", "1/s"}, "cost exceeds capacity"},
		{"invalid policy", []string{"--capacity", "0"}, "capacity 0 outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, append([]string{"sim"}, tt.args...)...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d: %s", code, exitUsage, stderr)
			}
			wantOneLine(t, stderr, tt.want)
		})
	}
}

// TestSimRedisAgrees runs a scenario on a real Redis (redisstore with the
// simulator's clock) and on memstore: the token bucket must give the same
// numbers on both, request for request.
func TestSimRedisAgrees(t *testing.T) {
	srv := redistest.Start(t)
	args := []string{"sim", "--scenario", "boundary-spike", "--duration", "1m", "--json"}
	decode := func(stdout, stderr string, code int) sim.Report {
		t.Helper()
		var reports []sim.Report
		if code != exitOK || json.Unmarshal([]byte(stdout), &reports) != nil || len(reports) != 1 {
			t.Fatalf("exit %d: %s%s", code, stdout, stderr)
		}
		return reports[0]
	}
	onRedis := decode(runCLI(t, append(args, "--redis", srv.Addr)...))
	inMemory := decode(runCLI(t, append(args, "--algo", "token", "--topology", "shared")...))
	if onRedis.Backend != "redisstore" || inMemory.Backend != "memstore" {
		t.Fatalf("backends %q and %q", onRedis.Backend, inMemory.Backend)
	}
	if !reflect.DeepEqual(onRedis.Classes, inMemory.Classes) || onRedis.Law != inMemory.Law || !reflect.DeepEqual(onRedis.Windows, inMemory.Windows) {
		t.Fatalf("redisstore and memstore disagree:\nredis  %+v %+v\nmemory %+v %+v", onRedis.Classes, onRedis.Law, inMemory.Classes, inMemory.Law)
	}
	if onRedis.Total.Denied == 0 || !onRedis.Law.Holds {
		t.Fatalf("the attacker was never denied, or the law broke: %+v %v", onRedis.Total, onRedis.Law)
	}
	if keys, err := srv.Client().Keys(context.Background(), "rb:sim:*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys left behind after the run: %v, %v", keys, err)
	}
}

// TestSimPolicyAndSkew: --capacity/--rate replace the scenario's policy,
// and --skew puts the instances' clocks out of step (the law is then
// checked with the skews' spread as slack, which the token bucket keeps).
func TestSimPolicyAndSkew(t *testing.T) {
	stdout, stderr, code := runCLI(t, "sim", "--scenario", "abuser", "--duration", "1m", "--algo", "token",
		"--topology", "shared", "--capacity", "20", "--rate", "20/m", "--skew", "0,2s,-2s", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var reports []sim.Report
	if err := json.Unmarshal([]byte(stdout), &reports); err != nil || len(reports) != 1 {
		t.Fatalf("%v\n%s", err, stdout)
	}
	r := reports[0]
	if r.Policy != "burst 20, 20/1m0s" || len(r.Skew) != 3 || r.Skew[1] != 2*time.Second || !strings.HasSuffix(r.Setup(), "+skew") {
		t.Fatalf("policy %q skew %v setup %q", r.Policy, r.Skew, r.Setup())
	}
	if !r.Law.Holds || r.Law.Slack != 4*time.Second {
		t.Fatalf("law %v, want it held with 4s of slack", r.Law)
	}
}
