package promobserver_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/observe"
)

// TestMetricsPageQueries checks the operator's queries on the repository's
// metrics page (docs/metrics.md) against what this Observer exports: every
// metric they name is a family gathered, every label they group or match
// by is one of its labels, and every value they match is one it takes.
func TestMetricsPageQueries(t *testing.T) {
	page, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(page), "```promql\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/metrics.md has no promql block")
	}
	reg, obs := newObserver(t, promobserver.Options{})
	ctx := context.Background()
	for _, out := range []observe.Outcome{observe.OutcomeAllowed, observe.OutcomeDenied, observe.OutcomeShadowDenied, observe.OutcomeError} {
		obs.ObserveDecision(ctx, observe.Decision{Op: observe.OpTake, Outcome: out, Store: "redis", Policy: "p", Route: "r", Timed: true})
	}
	obs.ObserveBreaker(observe.BreakerChange{Store: "redis", From: observe.BreakerClosed, To: observe.BreakerOpen})
	obs.ObserveLeaseBatch(observe.LeaseBatch{Store: "leases", Taken: 10, Local: 4})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]map[string]map[string]bool{} // family, label, values
	for _, f := range fams {
		values[f.GetName()] = map[string]map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if values[f.GetName()][l.GetName()] == nil {
					values[f.GetName()][l.GetName()] = map[string]bool{}
				}
				values[f.GetName()][l.GetName()][l.GetValue()] = true
			}
		}
	}
	queries := 0
	for _, line := range strings.Split(block, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		queries++
		var named []string
		for _, sel := range regexp.MustCompile(`(ratebucket_\w+)(\{([^}]*)\})?`).FindAllStringSubmatch(line, -1) {
			labels, ok := values[sel[1]]
			named = append(named, sel[1])
			if !ok {
				t.Errorf("%q: no family %s is exported", line, sel[1])
				continue
			}
			for _, m := range regexp.MustCompile(`(\w+)(=|!=)"([^"]*)"`).FindAllStringSubmatch(sel[3], -1) {
				if !labels[m[1]][m[3]] {
					t.Errorf("%q: %s has no series with %s=%q", line, sel[1], m[1], m[3])
				}
			}
		}
		for _, by := range regexp.MustCompile(`by \(([^)]*)\)`).FindAllStringSubmatch(line, -1) {
			for _, l := range strings.Split(by[1], ",") {
				for _, f := range named {
					if _, ok := values[f][strings.TrimSpace(l)]; !ok {
						t.Errorf("%q: grouped by %s, not a label of %s", line, l, f)
					}
				}
			}
		}
	}
	if queries < 3 {
		t.Fatalf("%d query lines in docs/metrics.md's promql block, want the three queries", queries)
	}
}
