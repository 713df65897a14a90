package choices

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/sim"
)

// TestShortIsTheTables: each algorithm's short name is the one sim's
// comparison table prints for its run, so flags, file names and tables
// name an algorithm alike; and Algorithm finds it by either name.
func TestShortIsTheTables(t *testing.T) {
	reps, err := sim.Run(context.Background(), sim.Config{Scenario: "sensor", Duration: 10 * time.Second, Algorithms: Algorithms()})
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(reps.Table()), "\n")[2:]
	for i, a := range Algorithms() {
		short := Short(a.Name())
		if cell := strings.TrimSpace(strings.Split(rows[i], "|")[1]); cell != short {
			t.Errorf("%s: short name %q, sim's table prints %q", a.Name(), short, cell)
		}
		if Algorithm(short) != a || Algorithm(a.Name()) != a {
			t.Errorf("Algorithm(%q) or Algorithm(%q) is not %s", short, a.Name(), a.Name())
		}
	}
	if Algorithm("leaky") != nil || Short("leakybucket") != "leakybucket" {
		t.Error("an algorithm the command does not compare has a name")
	}
}

func TestScenario(t *testing.T) {
	for _, s := range sim.Scenarios() {
		if got, err := Scenario(s.Name); err != nil || got.Name != s.Name {
			t.Errorf("Scenario(%q) = %q, %v", s.Name, got.Name, err)
		}
	}
	if _, err := Scenario("tsunami"); !errors.Is(err, sim.ErrUnknownScenario) || !strings.Contains(err.Error(), "mobile") {
		t.Errorf("Scenario(tsunami) error = %v", err)
	}
}
