package sim_test

import (
	"fmt"
	"os"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/sim"
)

// The package doc's tour: a run, its report, a table comparing runs, and a
// chart. It writes a file, so it is compiled but not run; ExampleRun and
// ExampleWriteTable show the output.
func Example_tour() {
	f, _ := os.Create("mobile-fixed.svg")
	defer f.Close()
	var reports []*sim.Report // runs to compare, from sim.Run or sim.RunMatrix

	rep, err := sim.Run(sim.Config{Scenario: "mobile", Algorithm: algo.FixedWindow{}, Instances: 3})
	fmt.Print(rep.Markdown())
	sim.WriteTable(os.Stdout, reports...) // compare runs in 80 columns
	sim.WriteSVG(f, rep.Timeline)         // a chart a reader can open

	fmt.Println(err)
}
