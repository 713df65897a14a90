package sim_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/sim"
)

// The package doc's tour: two runs, a table comparing them, one in detail,
// and a chart. It writes a file, so it is compiled but not run;
// ExampleRun and ExampleReports_Table show the output.
func Example_tour() {
	ctx := context.Background()
	f, _ := os.Create("mobile-fixed.svg")
	defer f.Close()

	reps, err := sim.Run(ctx, sim.Config{Scenario: "mobile", Instances: 3,
		Algorithms: []algo.Algorithm{algo.TokenBucket{}, algo.FixedWindow{}}})
	fmt.Print(reps.Table())       // compare the runs in 80 columns
	fmt.Print(reps[1].Markdown()) // the fixed window's run in detail
	reps[1].Timeline.WriteSVG(f)  // a chart a reader can open

	fmt.Println(err)
}
