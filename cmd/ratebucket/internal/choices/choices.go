// Package choices names what the command's users pick from package sim, in
// `ratebucket sim`'s flags and the playground's query strings alike: the
// algorithms the command compares, by the short names sim's tables print,
// and the scenarios, by name.
package choices

import (
	"fmt"
	"slices"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/sim"
)

// algorithms are the rules the command compares, in the order its tables
// list them, each with its short name.
var algorithms = []struct {
	short string
	alg   algo.Algorithm
}{{"token", algo.TokenBucket{}}, {"fixed", algo.FixedWindow{}}, {"sliding", algo.SlidingWindow{}}}

// Algorithms returns the rules the command compares: the token bucket, the
// fixed window and the sliding window, in that order.
func Algorithms() []algo.Algorithm {
	out := make([]algo.Algorithm, len(algorithms))
	for i, a := range algorithms {
		out[i] = a.alg
	}
	return out
}

// Short returns the short name of the algorithm whose Name is name, as
// sim's tables print it ("token" for "tokenbucket"), or name itself for an
// algorithm the command does not compare.
func Short(name string) string {
	for _, a := range algorithms {
		if a.alg.Name() == name {
			return a.short
		}
	}
	return name
}

// Algorithm returns the algorithm called name, short or full ("token" or
// "tokenbucket"), or nil.
func Algorithm(name string) algo.Algorithm {
	for _, a := range algorithms {
		if name == a.short || name == a.alg.Name() {
			return a.alg
		}
	}
	return nil
}

// Scenario returns sim's scenario called name, or an error wrapping
// sim.ErrUnknownScenario that lists the names.
func Scenario(name string) (sim.Scenario, error) {
	all := sim.Scenarios()
	i := slices.IndexFunc(all, func(s sim.Scenario) bool { return s.Name == name })
	if i < 0 {
		names := make([]string, len(all))
		for k, s := range all {
			names[k] = s.Name
		}
		return sim.Scenario{}, fmt.Errorf("%w: %q (have %v)", sim.ErrUnknownScenario, name, names)
	}
	return all[i], nil
}
