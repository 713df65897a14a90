// Command benchtables turns the output of this module's benchmarks and of
// redisbench into the Markdown tables of BENCHMARKS.md: per row the median
// over runs and its spread (the 95% confidence interval of the median, in
// percent, computed by golang.org/x/perf/benchmath exactly as benchstat
// does; "±∞" when there are too few runs for one), and ratios of medians
// against ratebucket and against the redis-benchmark ceiling.
//
//	go run ./cmd/benchtables [-svg throughput.svg] inproc.txt redis.txt
//
// With -svg it also draws Redis throughput against goroutines.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// ours is the implementation every ratio is taken against.
const ours = "ratebucket"

// peer reports whether impl is another library, not ratebucket in some
// configuration (such as ratebucket-direct, pipelining off).
func peer(impl string) bool { return !strings.HasPrefix(impl, ours) }

// samples holds values by group (the benchmark name without its impl=
// or script= part), implementation and unit, in input order.
type samples struct {
	groups []string
	impls  map[string][]string
	vals   map[string]map[string]map[string][]float64
}

func main() {
	svg := flag.String("svg", "", "also write a throughput chart to this SVG file")
	flag.Parse()
	if flag.NArg() == 0 {
		log.Fatal("usage: benchtables [-svg FILE] FILE...")
	}
	s := &samples{impls: map[string][]string{}, vals: map[string]map[string]map[string][]float64{}}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			log.Fatal(err)
		}
		if err := s.read(f, name); err != nil {
			log.Fatal(err)
		}
		f.Close()
	}
	s.write(os.Stdout)
	if *svg != "" {
		var b bytes.Buffer
		if err := s.writeSVG(&b); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(*svg, b.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// read adds every benchmark result in r.
func (s *samples) read(r io.Reader, name string) error {
	br := benchfmt.NewReader(r, name)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		base, parts := res.Name.Parts()
		group, impl := string(base), ""
		for _, p := range parts {
			p := string(p)
			switch {
			case strings.HasPrefix(p, "/impl=") || strings.HasPrefix(p, "/script="):
				impl = p[strings.Index(p, "=")+1:]
			case strings.HasPrefix(p, "/"):
				group += p
			}
		}
		if impl == "" {
			continue
		}
		if s.vals[group] == nil {
			s.groups = append(s.groups, group)
			s.vals[group] = map[string]map[string][]float64{}
		}
		if s.vals[group][impl] == nil {
			s.impls[group] = append(s.impls[group], impl)
			s.vals[group][impl] = map[string][]float64{}
		}
		for _, v := range res.Values {
			s.vals[group][impl][v.Unit] = append(s.vals[group][impl][v.Unit], v.Value)
		}
	}
	return br.Err()
}

// summary returns the median of one cell and its spread, ok false when
// there is no such cell.
func (s *samples) summary(group, impl, unit string) (benchmath.Summary, int, bool) {
	v := s.vals[group][impl][unit]
	if len(v) == 0 {
		return benchmath.Summary{}, 0, false
	}
	sample := benchmath.NewSample(v, &benchmath.DefaultThresholds)
	return benchmath.AssumeNothing.Summary(sample, 0.95), len(v), true
}

// median returns the median of one cell, NaN when absent.
func (s *samples) median(group, impl, unit string) float64 {
	sum, _, ok := s.summary(group, impl, unit)
	if !ok {
		return math.NaN()
	}
	return sum.Center
}

// cell formats a median with its spread.
func (s *samples) cell(group, impl, unit string, format func(float64) string) string {
	sum, _, ok := s.summary(group, impl, unit)
	if !ok {
		return "–"
	}
	return format(sum.Center) + " ±" + sum.PctRangeString()
}

// plain formats a median without spread (allocations, bytes per key).
func (s *samples) plain(group, impl, unit string, format func(float64) string) string {
	m := s.median(group, impl, unit)
	if math.IsNaN(m) {
		return "–"
	}
	return format(m)
}

func (s *samples) write(w io.Writer) {
	var b bytes.Buffer
	s.headlines(&b)
	for _, bench := range []string{"HotKey", "DistinctKeys", "ParallelDistinctKeys", "ParallelStretches", "RandomKeys", "ParallelRandomKeys"} {
		s.inProcTable(&b, bench)
	}
	s.redisTable(&b, "distinct")
	s.redisTable(&b, "hot")
	s.ceilingTable(&b)
	s.memoryTable(&b)
	w.Write(b.Bytes())
}

// runs reports the number of runs behind a group's first cell.
func (s *samples) runs(group string, unit string) int {
	for _, impl := range s.impls[group] {
		if _, n, ok := s.summary(group, impl, unit); ok {
			return n
		}
	}
	return 0
}

// headlines writes the comparisons the issues set goals for.
func (s *samples) headlines(w io.Writer) {
	var rows []string
	for _, g := range s.groups {
		if strings.HasPrefix(g, "Redis") || len(s.impls[g]) < 2 {
			continue
		}
		base := s.median(g, ours, "sec/op")
		best, bestV := "", math.Inf(1)
		for _, impl := range s.impls[g] {
			if v := s.median(g, impl, "sec/op"); peer(impl) && v < bestV {
				best, bestV = impl, v
			}
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s |", g, sig(base*1e9),
			s.plain(g, ours, "allocs/op", sig), best+" "+sig(bestV*1e9), ratio(bestV, base, "")))
	}
	if len(rows) > 0 {
		fmt.Fprintln(w, "### Headlines: in process")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| benchmark | ratebucket ns/op | allocs/op | fastest peer, ns/op | peer ÷ ratebucket (time; above 1: ratebucket faster) |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
		fmt.Fprintln(w, strings.Join(rows, "\n"))
		fmt.Fprintln(w)
	}
	d64 := "Redis/keys=distinct/conc=64"
	if _, ok := s.vals[d64][ours]; !ok {
		return
	}
	fmt.Fprintln(w, "### Headlines: Redis (goals of issues 3 and 8)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| comparison | measured | goal |")
	fmt.Fprintln(w, "|---|---:|---|")
	o64 := s.median(d64, ours, "checks/s")
	for _, spec := range []string{"c=64/P=1", "c=50/P=1", "c=64/P=16"} {
		if c := s.median("RedisCeiling/"+spec, ours, "checks/s"); !math.IsNaN(c) {
			goal := ""
			switch spec {
			case "c=64/P=1":
				goal = "≥ 0.9"
			case "c=64/P=16":
				goal = "≥ 0.8 (issue 8)"
			}
			fmt.Fprintf(w, "| ratebucket, 64 goroutines, distinct keys ÷ redis-benchmark of its script (%s) | %s | %s |\n", spec, ratio(o64, c, ""), goal)
		}
	}
	for _, impl := range s.impls[d64] {
		if impl != ours {
			goal := ""
			if impl == "redis_rate" || impl == "ratebucket-direct" {
				goal = "> 1"
			}
			fmt.Fprintf(w, "| ratebucket ÷ %s throughput, 64 goroutines, distinct keys | %s | %s |\n", impl, ratio(o64, s.median(d64, impl, "checks/s"), ""), goal)
		}
	}
	p1, p16 := "Redis/keys=distinct/conc=1", "Redis/keys=distinct/conc=16"
	fmt.Fprintf(w, "| p50 at 1 goroutine, ratebucket ÷ redis_rate | %s | ≤ 1 (issue 8) |\n", ratio(s.median(p1, ours, "p50-us"), s.median(p1, "redis_rate", "p50-us"), ""))
	fmt.Fprintf(w, "| p99 at 16 goroutines, ratebucket ÷ redis_rate | %s | |\n", ratio(s.median(p16, ours, "p99-us"), s.median(p16, "redis_rate", "p99-us"), ""))
	bestT, bestTV := s.bestPeer(d64, "checks/s", math.Max)
	fmt.Fprintf(w, "| ratebucket ÷ best peer (%s) throughput, 64 goroutines, distinct keys | %s | ≥ 1.5 (issue 8) |\n", bestT, ratio(o64, bestTV, ""))
	bestP, bestPV := s.bestPeer(p16, "p99-us", math.Min)
	fmt.Fprintf(w, "| p99 at 16 goroutines, ratebucket ÷ best peer (%s) | %s | ≤ 1 (issue 8) |\n", bestP, ratio(s.median(p16, ours, "p99-us"), bestPV, ""))
	fmt.Fprintf(w, "| MEMORY USAGE of one 20-byte key, ratebucket | %s B | ≤ 72 B |\n", s.plain("RedisMemory", ours, "usage-B/key", sig))
	fmt.Fprintf(w, "| used_memory delta per key over %s keys, ratebucket | %s B | ≤ 135 B |\n",
		s.plain("RedisMemory", ours, "keys", sig), s.plain("RedisMemory", ours, "delta-B/key", sig))
	fmt.Fprintln(w)
}

// bestPeer returns the peer whose median of unit in group is best by
// pick (math.Max or math.Min), and that median.
func (s *samples) bestPeer(group, unit string, pick func(a, b float64) float64) (string, float64) {
	best, bestV := "–", math.NaN()
	for _, impl := range s.impls[group] {
		v := s.median(group, impl, unit)
		if !peer(impl) || math.IsNaN(v) {
			continue
		}
		if math.IsNaN(bestV) || pick(v, bestV) == v && v != bestV {
			best, bestV = impl, v
		}
	}
	return best, bestV
}

// withPrefix returns the groups whose names start with prefix.
func (s *samples) withPrefix(prefix string) []string {
	var groups []string
	for _, g := range s.groups {
		if strings.HasPrefix(g, prefix) {
			groups = append(groups, g)
		}
	}
	return groups
}

func (s *samples) inProcTable(w io.Writer, bench string) {
	groups := s.withPrefix(bench + "/")
	if len(groups) == 0 {
		return
	}
	fmt.Fprintf(w, "### %s (n=%d runs)\n\n", bench, s.runs(groups[0], "sec/op"))
	fmt.Fprintln(w, "| policy | impl | ns/op | peer ÷ ratebucket (time) | B/op | allocs/op | heap B/key | admitted |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, g := range groups {
		policy := strings.TrimPrefix(g, bench+"/policy=")
		base := s.median(g, ours, "sec/op")
		for _, impl := range s.impls[g] {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", policy, impl,
				s.cell(g, impl, "sec/op", func(v float64) string { return sig(v * 1e9) }),
				ratio(s.median(g, impl, "sec/op"), base, impl),
				s.plain(g, impl, "B/op", sig), s.plain(g, impl, "allocs/op", sig),
				s.plain(g, impl, "heapB/key", sig), s.plain(g, impl, "admit/op", pct))
		}
	}
	fmt.Fprintln(w)
}

func (s *samples) redisTable(w io.Writer, keys string) {
	prefix := "Redis/keys=" + keys + "/conc="
	groups := s.withPrefix(prefix)
	if len(groups) == 0 {
		return
	}
	fmt.Fprintf(w, "### Redis, %s keys (n=%d rounds)\n\n", keys, s.runs(groups[0], "checks/s"))
	fmt.Fprintln(w, "| goroutines | impl | checks/s | ratebucket ÷ impl | p50 µs | p99 µs | server CPU µs/check | checks per server read | admitted | errors |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, g := range groups {
		conc := strings.TrimPrefix(g, prefix)
		base := s.median(g, ours, "checks/s")
		for _, impl := range s.impls[g] {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", conc, impl,
				s.cell(g, impl, "checks/s", thousands), ratio(base, s.median(g, impl, "checks/s"), impl),
				s.cell(g, impl, "p50-us", sig), s.cell(g, impl, "p99-us", sig), s.plain(g, impl, "srvcpu-us/op", sig),
				s.plain(g, impl, "checks/read", sig), s.plain(g, impl, "admit/op", pct), s.plain(g, impl, "err/op", pct))
		}
	}
	fmt.Fprintln(w)
}

func (s *samples) ceilingTable(w io.Writer) {
	groups := s.withPrefix("RedisCeiling/")
	if len(groups) == 0 {
		return
	}
	fmt.Fprintf(w, "### Ceiling: redis-benchmark replaying each library's EVALSHA on 100k random keys (n=%d rounds)\n\n", s.runs(groups[0], "checks/s"))
	fmt.Fprintln(w, "| script | clients | pipeline | checks/s | p50 µs | p99 µs | server CPU µs/check | ratebucket (Go, 64 goroutines, distinct) ÷ this |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	ours64 := s.median("Redis/keys=distinct/conc=64", ours, "checks/s")
	for _, g := range groups {
		var c, p string
		fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(g, "RedisCeiling/"), "/", " "), "c=%s P=%s", &c, &p)
		for _, impl := range s.impls[g] {
			r := "–"
			if impl == ours {
				r = ratio(ours64, s.median(g, impl, "checks/s"), "")
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", impl, c, p,
				s.cell(g, impl, "checks/s", thousands), s.cell(g, impl, "p50-us", sig), s.cell(g, impl, "p99-us", sig),
				s.plain(g, impl, "srvcpu-us/op", sig), r)
		}
	}
	fmt.Fprintln(w)
}

func (s *samples) memoryTable(w io.Writer) {
	g := "RedisMemory"
	if len(s.impls[g]) == 0 {
		return
	}
	fmt.Fprintf(w, "### Redis memory per key (%s keys, one take each)\n", s.plain(g, ours, "keys", sig))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| impl | key bytes | MEMORY USAGE B | used_memory delta B/key |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, impl := range s.impls[g] {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", impl, s.plain(g, impl, "keylen-B", sig),
			s.plain(g, impl, "usage-B/key", sig), s.plain(g, impl, "delta-B/key", sig))
	}
	fmt.Fprintln(w)
}

// ratio formats a/b as "1.23×", or "1" for ratebucket's own row.
func ratio(a, b float64, impl string) string {
	switch {
	case impl == ours:
		return "1"
	case math.IsNaN(a) || math.IsNaN(b) || b == 0:
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// sig formats v with three significant digits (whole numbers above 100
// and whole numbers as they are).
func sig(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || a == math.Trunc(a):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// thousands formats a throughput as "81.2k".
func thousands(v float64) string { return fmt.Sprintf("%.1fk", v/1000) }

// pct formats a fraction as a percentage.
func pct(v float64) string {
	if v == 0 {
		return "0"
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", 100*v), ".0") + "%"
}
