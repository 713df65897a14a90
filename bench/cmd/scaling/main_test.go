package main

import (
	"strings"
	"testing"
)

// TestRun runs every mode once, keeping every round, and checks that the
// report has a row for each with a ratio for the parallel ones.
func TestRun(t *testing.T) {
	var out strings.Builder
	modes := []string{"hot", "seq", "stretches", "split", "random", "prandom", "fresh", "pfresh"}
	if err := run(&out, "ratebucket", "deny", modes, 1, 100, 0); err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		row := ""
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) == 7 && f[0] == "ratebucket" && f[1] == m {
				row = line
			}
		}
		if row == "" {
			t.Fatalf("no row for mode %s in\n%s", m, out.String())
		}
		if parallel := m != "hot" && m != "seq" && m != "random" && m != "fresh"; parallel == strings.HasSuffix(strings.TrimSpace(row), "–") {
			t.Errorf("mode %s: ratio %q, want one for a parallel mode only", m, row)
		}
	}
	if err := run(&out, "ratebucket", "maybe", modes, 1, 1, 0); err == nil {
		t.Error("policy maybe: no error")
	}
}
