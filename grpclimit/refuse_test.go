package grpclimit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/grpclimit"
)

// TestNewRefusesNamingTheRule: a rule its policy cannot honour is refused
// by New, naming the rule and matching ErrInvalidConfig and algo's
// sentinel, never left to fail each call (a quota is a rule's policy like
// a bucket: its calls are takes, which a quota has).
func TestNewRefusesNamingTheRule(t *testing.T) {
	for _, c := range []struct {
		name string
		rule grpclimit.Rule
		is   error
	}{
		{"cost above capacity", grpclimit.Rule{Name: "daily", Policy: algo.Quota(5, algo.Day, 0), Cost: 6}, algo.ErrCostExceedsCapacity},
		{"invalid quota", grpclimit.Rule{Name: "daily", Policy: algo.Quota(0, algo.Day, 0)}, algo.ErrInvalidPolicy},
		{"negative cost", grpclimit.Rule{Name: "burst", Policy: algo.PerSecond(1).Burst(5), Cost: -1}, algo.ErrInvalidCost},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := grpclimit.New(grpclimit.Config{Methods: map[string]grpclimit.Rule{"/pkg.S/M": c.rule}})
			if !errors.Is(err, grpclimit.ErrInvalidConfig) || !errors.Is(err, c.is) || !strings.Contains(err.Error(), `Methods["/pkg.S/M"]`) {
				t.Fatalf("New: %v; want ErrInvalidConfig and %v naming Methods[\"/pkg.S/M\"]", err, c.is)
			}
		})
	}
	if _, err := grpclimit.New(grpclimit.Config{Methods: map[string]grpclimit.Rule{"/pkg.S/M": {Name: "daily", Policy: algo.Quota(5, algo.Day, 0), Cost: 5}}}); err != nil {
		t.Fatalf("a quota rule whose cost fits: %v", err)
	}
}
