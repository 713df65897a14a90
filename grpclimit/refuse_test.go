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

// TestNewRefusesAnExemptRuleWithLimits: an Exempt rule has no bucket, so
// a Name, Policy, Cost, Key or Fail beside it would never apply; New
// refuses it, naming the rule and the fields, rather than ignore them.
func TestNewRefusesAnExemptRuleWithLimits(t *testing.T) {
	for _, c := range []struct {
		rule   grpclimit.Rule
		fields string
	}{
		{grpclimit.Rule{Exempt: true, Name: "health"}, "its Name would"},
		{grpclimit.Rule{Exempt: true, Policy: algo.PerSecond(1).Burst(5), Cost: 2}, "its Policy and Cost would"},
		{grpclimit.Rule{Exempt: true, Key: grpclimit.Peer, Fail: grpclimit.FailClosed}, "its Key and Fail would"},
	} {
		_, err := grpclimit.New(grpclimit.Config{Methods: map[string]grpclimit.Rule{"/pkg.S/*": c.rule}})
		if !errors.Is(err, grpclimit.ErrInvalidConfig) || !strings.Contains(err.Error(), `Methods["/pkg.S/*"]: an Exempt rule`) || !strings.Contains(err.Error(), c.fields) {
			t.Errorf("New(%+v): %v; want ErrInvalidConfig naming Methods[\"/pkg.S/*\"] and %q", c.rule, err, c.fields)
		}
	}
	if _, err := grpclimit.New(grpclimit.Config{Methods: map[string]grpclimit.Rule{"/pkg.S/*": {Exempt: true}}}); err != nil {
		t.Fatalf("an Exempt rule alone: %v", err)
	}
}
