package sim_test

import (
	"context"
	"fmt"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/sim"
)

// The boundary spike: a fixed window lets an attacker who reads the reset
// time spend a full limit on each side of a boundary.
func ExampleRun() {
	reps, err := sim.Run(context.Background(), sim.Config{Scenario: "boundary-spike",
		Algorithms: []algo.Algorithm{algo.FixedWindow{}}, Instances: 3, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reps[0].Law)
	// Output: BROKEN: 199 admitted in [59.5s, 1m0.5s] at ip:203.0.113.0, bound 101
}

// Every algorithm, on one shared store and on per-instance stores.
func ExampleReports_Table() {
	reps, err := sim.Run(context.Background(), sim.Config{Scenario: "abuser", Instances: 3, Seed: 1,
		Algorithms: []algo.Algorithm{algo.TokenBucket{}, algo.FixedWindow{}, algo.SlidingWindow{}},
		Topologies: []sim.Topology{sim.Shared, sim.PerInstance}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(reps.Table())
	// Output:
	// | algo    | store      | admit |  deny | false429 | peak 1s 10s 60s |    law |
	// |---------|------------|------:|------:|---------:|----------------:|-------:|
	// | token   | shared×3   |  1455 | 35760 |    0.00% |  0.99 0.99 1.00 |     ok |
	// | token   | per-inst×3 |  2133 | 35082 |    0.00% |  2.97 2.98 2.99 | 3.00×! |
	// | fixed   | shared×3   |  1416 | 35799 |    0.00% |  0.98 0.83 0.91 |     ok |
	// | fixed   | per-inst×3 |  2016 | 35199 |    0.00% |  2.94 2.50 2.73 | 2.98×! |
	// | sliding | shared×3   |  1355 | 35860 |    0.00% |  0.98 0.83 0.55 |     ok |
	// | sliding | per-inst×3 |  1833 | 35382 |    0.00% |  2.94 2.50 1.64 | 2.12×! |
}
