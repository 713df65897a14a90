package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/cmd/ratebucket/internal/choices"
	"github.com/ratebucket/ratebucket/sim"
)

var simCommand = &command{
	name:    "sim",
	summary: "compare token bucket, fixed and sliding window in simulated traffic",
	usage: `sim [--scenario NAME|all] [--algo token,fixed,sliding]
                     [--instances N] [--seed S] [--svg DIR] [--json]

Runs the simulator's scenarios (a phone's feed burst, a boundary-spike
attacker, steady sensors, an abuser, a campus NAT, mixed costs) in virtual
time, deterministically: the same seed prints the same numbers. Each
scenario runs under the token bucket, the fixed window and the sliding
window, with the instances sharing one store (what Redis gives) and with a
memstore per instance (the broken setup), and prints one table per scenario:

  admitted, denied   requests, over all clients
  false 429          share of legitimate clients' requests that were denied
  peak 1s/10s/60s    most admitted in any window of that length, against
                     its bound capacity + rate*w (above 1 breaks the law)
  law                "ok" when no interval admits more than
                     capacity + rate*length, else the worst ratio and "!"

--svg writes one chart per run that a browser opens: every request at the
scenario's focus key, admitted or denied, and the room left in its bucket as
a continuous line, with window boundaries and the law's worst interval; the
boundary spike adds a panel zoomed on that instant. 'ratebucket play' shows
the same in an interactive page. --redis runs the token bucket, shared, on
your Redis (with a client clock in virtual time), to check it agrees.

Examples:
  ratebucket sim
  ratebucket sim --scenario boundary-spike --algo fixed,token
  ratebucket sim --scenario mobile --instances 5 --seed 7 --svg charts
  ratebucket sim --scenario abuser --skew 0,2s,-2s --topology shared
  ratebucket sim --scenario mobile --capacity 20 --rate 20/m
  ratebucket sim --scenario fleet --topology shared,leased --instances 100
  ratebucket sim --list
  ratebucket sim --json > runs.json`,
	flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		var cfg simConfig
		rf := addRedisFlags(fs, "run on this Redis (token bucket, shared) instead of memstore")
		fs.StringVar(&cfg.scenario, "scenario", "all", "scenario `name`, or all (see --list)")
		fs.StringVar(&cfg.algos, "algo", "all", "comma-separated `algorithms`: token, fixed, sliding, or all")
		fs.StringVar(&cfg.topos, "topology", "all", "comma-separated `layouts`: shared, per-instance, leased (token bucket only), or all (but leased)")
		fs.IntVar(&cfg.instances, "instances", 3, "app instances behind the load balancer")
		fs.Uint64Var(&cfg.seed, "seed", 1, "random seed of the traffic")
		fs.DurationVar(&cfg.duration, "duration", 0, "virtual time per run (0: each scenario's own)")
		fs.IntVar(&cfg.scale, "scale", 1, "multiply the number of clients in every class")
		fs.Var(&cfg.skew, "skew", "comma-separated clock `offsets` of the instances, e.g. 0,400ms,-400ms (client clocks out of step)")
		pf := addPolicyFlags(fs, 100, "2/s")
		fs.StringVar(&cfg.svgDir, "svg", "", "write one SVG timeline per run into `dir`")
		fs.BoolVar(&cfg.json, "json", false, "print the reports as JSON")
		fs.BoolVar(&cfg.detail, "detail", false, "also print each run's per-class table")
		fs.BoolVar(&cfg.list, "list", false, "list the scenarios and exit")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			cfg.redis = rf
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if set["capacity"] || set["rate"] { // else each scenario's own policy
				var err error
				if cfg.policy, err = pf.policy(); err != nil {
					return err
				}
			}
			return runSim(ctx, e, &cfg)
		}
	},
}

// simConfig is one sim invocation.
type simConfig struct {
	redis                  *redisFlags
	scenario, algos, topos string
	instances, scale       int
	seed                   uint64
	duration               time.Duration
	svgDir                 string
	json, detail, list     bool
	skew                   skewFlag
	policy                 algo.Policy // zero: the scenarios' own
}

// skewFlag is a comma-separated list of durations, one per instance.
type skewFlag []time.Duration

func (s *skewFlag) String() string {
	parts := make([]string, len(*s))
	for i, d := range *s {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (s *skewFlag) Set(v string) error {
	var out []time.Duration
	for _, part := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q: want comma-separated durations such as 0,400ms,-1s", part)
		}
		out = append(out, d)
	}
	*s = out
	return nil
}

// scenarios returns the scenarios --scenario names, in its order.
func (cfg *simConfig) scenarios() ([]sim.Scenario, error) {
	if cfg.scenario == "all" {
		return sim.Scenarios(), nil
	}
	var out []sim.Scenario
	for _, name := range strings.Split(cfg.scenario, ",") {
		s, err := choices.Scenario(strings.TrimSpace(name))
		if err != nil {
			return nil, usageError{err}
		}
		out = append(out, s)
	}
	return out, nil
}

// config returns the sim.Config of the flags, for every scenario: sim
// checks it. Only what the flags mean otherwise than the Config is checked
// here: 0 instances or scale is the Config's default, 1, but no instance
// at all on the command line; and --redis narrows the runs to the token
// bucket on a shared store, which is what redisstore runs.
func (cfg *simConfig) config() (sim.Config, error) {
	algos, err := pick("--algo", cfg.algos, choices.Algorithms(), func(a algo.Algorithm) []string {
		return []string{choices.Short(a.Name()), a.Name()}
	})
	if err != nil {
		return sim.Config{}, err
	}
	topos, err := pick("--topology", cfg.topos, []sim.Topology{sim.Shared, sim.PerInstance, sim.Leased}, func(t sim.Topology) []string {
		return []string{t.String()}
	})
	if err != nil {
		return sim.Config{}, err
	}
	if strings.TrimSpace(cfg.topos) == "all" { // leased runs the token bucket only: ask for it by name
		topos = slices.DeleteFunc(topos, func(t sim.Topology) bool { return t == sim.Leased })
	}
	if slices.Contains(topos, sim.Leased) && strings.TrimSpace(cfg.algos) == "all" { // …and all means it
		algos = slices.DeleteFunc(algos, func(a algo.Algorithm) bool { return a.Name() != (algo.TokenBucket{}).Name() })
	}
	switch {
	case cfg.instances < 1:
		return sim.Config{}, usagef("--instances %d: want at least 1", cfg.instances)
	case cfg.scale < 1:
		return sim.Config{}, usagef("--scale %d: want at least 1", cfg.scale)
	}
	if cfg.redis.url != "" {
		algos = slices.DeleteFunc(algos, func(a algo.Algorithm) bool { return a.Name() != (algo.TokenBucket{}).Name() })
		topos = slices.DeleteFunc(topos, func(t sim.Topology) bool { return t == sim.PerInstance })
		if len(algos) == 0 || len(topos) == 0 {
			return sim.Config{}, usagef("--redis runs only the token bucket on a shared store: include token in --algo and shared or leased in --topology")
		}
	}
	return sim.Config{Algorithms: algos, Topologies: topos, Instances: cfg.instances, Seed: cfg.seed,
		Duration: cfg.duration, Scale: cfg.scale, Skew: cfg.skew, Policy: cfg.policy}, nil
}

// pick parses a comma-separated list of names (or "all") against the
// choices, each known by the names names returns.
func pick[T any](flagName, list string, choices []T, names func(T) []string) ([]T, error) {
	if strings.TrimSpace(list) == "all" {
		return choices, nil
	}
	var out []T
	var known []string
	for _, c := range choices {
		known = append(known, names(c)[0])
	}
	for _, want := range strings.Split(list, ",") {
		want = strings.ToLower(strings.TrimSpace(want))
		i := slices.IndexFunc(choices, func(c T) bool { return slices.Contains(names(c), want) })
		if i < 0 {
			return nil, usagef("%s %q: want a comma-separated list of %s, or all", flagName, want, strings.Join(known, ", "))
		}
		out = append(out, choices[i])
	}
	return out, nil
}

// runSim runs each scenario, every algorithm on every layout in one call
// of sim.Run, and prints them.
func runSim(ctx context.Context, e *env, cfg *simConfig) error {
	scenarios, err := cfg.scenarios()
	if err != nil {
		return err
	}
	if cfg.list {
		for _, s := range scenarios {
			fmt.Fprintf(e.stdout, "%-16s %s\n", s.Name, s.Summary)
		}
		return nil
	}
	base, err := cfg.config()
	if err != nil {
		return err
	}
	if cfg.redis.url != "" {
		rdb, err := cfg.redis.connect(ctx)
		if err != nil {
			return err
		}
		defer rdb.Close()
		base.Stores, base.Backend = simRedisStores(rdb), "redisstore"
	}
	if cfg.svgDir != "" {
		if err := os.MkdirAll(cfg.svgDir, 0o755); err != nil {
			return err
		}
	}
	prog := startProgress(e.stderr, int64(len(scenarios)*len(base.Algorithms)*len(base.Topologies)), "runs")
	defer prog.finish()
	var all sim.Reports
	var charts []string
	for i, s := range scenarios {
		c := base
		c.Scenario = s.Name
		reports, err := sim.Run(ctx, c)
		if errors.Is(err, sim.ErrInvalidConfig) || errors.Is(err, algo.ErrCostExceedsCapacity) {
			return usageError{err} // the flags do not fit sim, or this scenario
		}
		if err != nil {
			return err
		}
		prog.add(int64(len(reports)))
		for _, rep := range reports {
			if cfg.svgDir != "" {
				path, err := writeChart(cfg.svgDir, rep)
				if err != nil {
					return err
				}
				charts = append(charts, path)
			}
		}
		all = append(all, reports...)
		if cfg.json {
			continue
		}
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		printScenario(e, s, reports, cfg.detail)
	}
	prog.finish()
	if cfg.json {
		return writeJSON(e, all)
	}
	fmt.Fprint(e.stdout, simLegend)
	if len(scenarios) > 1 {
		fmt.Fprint(e.stdout, "\nOver all the runs above:\n\n")
		simVerdict(e.stdout, all)
	}
	if len(charts) > 0 {
		fmt.Fprintf(e.stdout, "Wrote %d SVG charts, such as %s, to\n  %s\n", len(charts), filepath.Base(charts[0]), cfg.svgDir)
	}
	return nil
}

// simLegend explains the columns, after the tables, where a reader who has
// just run the command looks first.
const simLegend = `
admit, deny: requests admitted and denied, over all clients. false429: the
share of legitimate clients' requests (within the policy's long-run rate)
that were denied. peak: the most admitted at one key in any 1 s, 10 s and
60 s window, divided by its bound capacity + rate*w. law: "ok" when no
interval admits more than capacity + rate*length, else the worst interval's
admitted/bound and "!". shared×N: N instances share one store, as with Redis
(redis×N: on Redis itself); per-inst×N: each instance has its own memstore;
leased×N: each spends leased batches of the shared store (hybrid.Leases),
its law's bound raised by the tokens they may hold (algo's BatchBound).
calls/s: backend calls per second, in all and per Cluster shard (s0, s1...).
`

// simVerdict sums up the runs as a table: for each algorithm and layout, in
// how many scenarios the law held, and in which legitimate clients were
// denied.
func simVerdict(w io.Writer, reports sim.Reports) {
	type tally struct {
		algo, setup string
		runs, held  int
		denied      []string // scenarios with false 429s
	}
	var rows []*tally
	byName := map[string]*tally{}
	for _, r := range reports {
		name := r.Algorithm + " " + r.Setup()
		t, ok := byName[name]
		if !ok {
			t = &tally{algo: choices.Short(r.Algorithm), setup: r.Setup()}
			byName[name] = t
			rows = append(rows, t)
		}
		t.runs++
		if r.Law.Holds {
			t.held++
		}
		if r.Total.LegitDenied > 0 {
			t.denied = append(t.denied, r.Scenario)
		}
	}
	fmt.Fprintf(w, "| algo    | store      | law held | false 429s in                        |\n")
	fmt.Fprintf(w, "|---------|------------|---------:|--------------------------------------|\n")
	for _, t := range rows {
		where := fmt.Sprintf("%d of %d", len(t.denied), t.runs)
		if len(t.denied) > 0 {
			if list := strings.Join(t.denied, ", "); len(where)+len(list) <= 33 {
				where += ": " + list
			}
		}
		fmt.Fprintf(w, "| %-7s | %-10s | %3d of %d | %-36s |\n", t.algo, t.setup, t.held, t.runs, where)
	}
}

// printScenario writes one scenario's heading and comparison table.
func printScenario(e *env, s sim.Scenario, reports sim.Reports, detail bool) {
	r := reports[0]
	fmt.Fprintf(e.stdout, "## %s\n", s.Name)
	summary := strings.ToUpper(s.Summary[:1]) + s.Summary[1:] + "."
	for _, line := range wrap(summary, 80) {
		fmt.Fprintln(e.stdout, line)
	}
	fmt.Fprintf(e.stdout, "Policy %s; %d instance(s); %v simulated; seed %d.\n\n", r.Policy, r.Instances, r.Duration, r.Seed)
	fmt.Fprint(e.stdout, reports.Table())
	if detail {
		for _, r := range reports {
			fmt.Fprintf(e.stdout, "\n%s", r.Markdown())
		}
	}
}

// writeChart writes rep's timeline as DIR/<scenario>-<algo>-<setup>.svg.
func writeChart(dir string, rep *sim.Report) (path string, err error) {
	name := fmt.Sprintf("%s-%s-%s.svg", rep.Scenario, choices.Short(rep.Algorithm), rep.Topology)
	path = filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := rep.Timeline.WriteSVG(f); err != nil {
		f.Close()
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, f.Close()
}

// writeJSON prints v as indented JSON.
func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
