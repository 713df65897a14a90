// Command scaling measures whether the in-process limiters scale from one
// core to several on a machine shared with other work, where a
// RunParallel benchmark's ns/op mostly says how much of the machine it
// got. It takes over 100k pre-filled keys in rounds, each of a fixed
// number of takes per goroutine, in these modes:
//
//	hot        one goroutine takes one key, over and over
//	seq        one goroutine walks all the keys in order
//	stretches  GOMAXPROCS goroutines, each walks its own stretch of the keys
//	split      the same, each on a limiter of its own holding its stretch:
//	           the same work with nothing shared
//	random     one goroutine takes keys at random
//	prandom    GOMAXPROCS goroutines take keys at random, each its own order
//	fresh      random, with keys that are other strings than the ones the
//	           limiter was filled with (the same bytes), as a caller that
//	           builds its key per request passes: the other modes take
//	           with the very strings filled, which a limiter that keeps the
//	           caller's string may compare by pointer
//	pfresh     prandom with those fresh keys
//
// Each goroutine is locked to a thread whose CPU time is read around its
// round, and a round counts only if every goroutine was on a core for at
// least -overlap of the round's wall time; the modes and implementations
// take turns round by round, so the machine's load falls on all alike.
// It prints, per implementation and mode, the rounds kept, the median CPU
// time and wall time per take, and a parallel mode's wall time per take
// (its throughput) ÷ its sequential mode's. A parallel mode's CPU time
// per take above its sequential one's is time the cores spent waiting on
// each other's cache lines.
//
//	cd bench && go run ./cmd/scaling -impl ratebucket,xtimerate -rounds 200
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ratebucket/ratebucket/bench"
	"github.com/ratebucket/ratebucket/internal/benchkeys"
	"github.com/ratebucket/ratebucket/internal/obstest"
)

const numKeys = 100_000

func main() {
	impls := flag.String("impl", "", "comma-separated implementations (default: every in-process one)")
	policy := flag.String("policy", "admit", "admit or deny")
	rounds := flag.Int("rounds", 100, "rounds of every mode")
	ops := flag.Int("ops", 100_000, "takes per goroutine per round")
	overlap := flag.Float64("overlap", 0.8, "the share of a round's wall time every goroutine must have had a core")
	modes := flag.String("modes", "seq,stretches,split,random,prandom,fresh,pfresh", "comma-separated modes (hot too)")
	flag.Parse()
	if err := run(os.Stdout, *impls, *policy, strings.Split(*modes, ","), *rounds, *ops, *overlap); err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		os.Exit(1)
	}
}

// A lane is one goroutine's part of a mode: its limiter and its walk,
// which goes on from round to round.
type lane struct {
	l    bench.Limiter
	walk benchkeys.Walk
}

// mode is one way of taking: its lanes run at once, taking keys[i] for
// the walks' indices i.
type mode struct {
	impl, name string
	keys       []string
	lanes      []lane
	cpu, wall  []float64 // ns per take, of the rounds kept
}

func run(w io.Writer, impls, policy string, modeNames []string, rounds, ops int, overlap float64) error {
	p := bench.Admit
	if policy == "deny" {
		p = bench.Deny
	} else if policy != "admit" {
		return fmt.Errorf("policy %q: want admit or deny", policy)
	}
	keys := bench.Keys(numKeys, "")
	fresh := make([]string, len(keys)) // the same bytes in other strings
	for i, k := range keys {
		fresh[i] = strings.Clone(k)
	}
	procs := runtime.GOMAXPROCS(0)
	var all []*mode
	for _, impl := range bench.InProc {
		if impls != "" && !slices.Contains(strings.Split(impls, ","), impl.Name) {
			continue
		}
		open := func(ks []string) (bench.Limiter, error) {
			l, _, err := impl.New(p) // released when the program ends
			if err != nil {
				return nil, err
			}
			for _, k := range ks {
				if _, err := l.Allow(k); err != nil {
					return nil, err
				}
			}
			return l, nil
		}
		shared, err := open(keys)
		if err != nil {
			return fmt.Errorf("%s: %w", impl.Name, err)
		}
		for _, name := range modeNames {
			m := &mode{impl: impl.Name, name: name, keys: keys}
			switch name {
			case "hot":
				m.lanes = []lane{{shared, benchkeys.From(0, 1)}}
			case "seq":
				m.lanes = []lane{{shared, benchkeys.Stretch(0, 1, numKeys)}}
			case "random", "fresh":
				m.lanes = []lane{{shared, benchkeys.Random(0, numKeys)}}
			case "stretches", "split", "prandom", "pfresh":
				for g := range procs {
					ln := lane{shared, benchkeys.Stretch(g, procs, numKeys)}
					switch name {
					case "prandom", "pfresh":
						ln.walk = benchkeys.Random(g, numKeys)
					case "split":
						lo, hi := g*numKeys/procs, (g+1)*numKeys/procs
						if ln.l, err = open(keys[lo:hi]); err != nil {
							return fmt.Errorf("%s: %w", impl.Name, err)
						}
					}
					m.lanes = append(m.lanes, ln)
				}
			default:
				return fmt.Errorf("mode %q: want hot, seq, stretches, split, random, prandom, fresh or pfresh", name)
			}
			if name == "fresh" || name == "pfresh" {
				m.keys = fresh
			}
			all = append(all, m)
		}
	}
	if len(all) == 0 {
		return fmt.Errorf("no implementation named in %q", impls)
	}
	for range rounds {
		for _, m := range all {
			m.round(ops, overlap)
		}
	}
	return report(w, all, overlap)
}

// round runs ops takes on every lane at once, each on a thread of its
// own, and keeps the round's figures if every lane had a core for at
// least overlap of the wall time.
func (m *mode) round(ops int, overlap float64) {
	cpu := make([]int64, len(m.lanes))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range m.lanes {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ln := &m.lanes[i]
			c0 := obstest.ThreadCPU()
			for range ops {
				ln.l.Allow(m.keys[ln.walk.Next()])
			}
			cpu[i] = obstest.ThreadCPU() - c0
		})
	}
	wg.Wait()
	wall := time.Since(start)
	total := int64(0)
	for _, c := range cpu {
		if float64(c) < overlap*float64(wall) {
			return
		}
		total += c
	}
	n := float64(ops * len(m.lanes))
	m.cpu = append(m.cpu, float64(total)/n)
	m.wall = append(m.wall, float64(wall)/n)
}

// base names the sequential mode each parallel mode is compared with.
var base = map[string]string{"stretches": "seq", "split": "seq", "prandom": "random", "pfresh": "fresh"}

func report(w io.Writer, all []*mode, overlap float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "impl\tmode\tgoroutines\trounds kept\tCPU ns/take\twall ns/take\twall ÷ sequential\t\n")
	medians := map[[2]string]float64{}
	for _, m := range all {
		if len(m.wall) > 0 {
			medians[[2]string{m.impl, m.name}] = median(m.wall)
		}
	}
	for _, m := range all {
		if len(m.wall) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t0\t–\t–\t–\t\n", m.impl, m.name, len(m.lanes))
			continue
		}
		ratio := "–"
		if b, ok := medians[[2]string{m.impl, base[m.name]}]; ok {
			ratio = fmt.Sprintf("%.2f", median(m.wall)/b)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%s\t\n", m.impl, m.name, len(m.lanes), len(m.wall), median(m.cpu), median(m.wall), ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "rounds kept: every goroutine on a core for at least %.0f%% of the wall time; figures are medians\n", 100*overlap)
	return err
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
