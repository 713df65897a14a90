package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want algo.Rate
	}{
		{"bare number is per second", "2", algo.PerSecond(2)},
		{"per second", "2/s", algo.PerSecond(2)},
		{"per sec spelled out", "2/second", algo.PerSecond(2)},
		{"per minute", "200/m", algo.PerMinute(200)},
		{"per min", "200/min", algo.PerMinute(200)},
		{"per hour upper case", "1000/H", algo.PerHour(1000)},
		{"per day", "10/d", algo.PerDay(10)},
		{"per millisecond", "1/ms", algo.Per(1, time.Millisecond)},
		{"go duration period", "5/10s", algo.Per(5, 10*time.Second)},
		{"compound duration", "3/1m30s", algo.Per(3, 90*time.Second)},
		{"half per second is one per two seconds", "0.5", algo.Per(1, 2*time.Second)},
		{"decimal per minute", "2.5/m", algo.Per(5, 2*time.Minute)},
		{"trailing zeros", "1.50/s", algo.Per(3, 2*time.Second)},
		{"leading dot", ".25/s", algo.Per(1, 4*time.Second)},
		{"spaces around", " 2 / s ", algo.PerSecond(2)},
		{"whole rates kept as written", "120/m", algo.PerMinute(120)},
		{"huge rate", "1000000/s", algo.PerSecond(1_000_000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRate(tt.in)
			if err != nil {
				t.Fatalf("parseRate(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("parseRate(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseRateErrors(t *testing.T) {
	tests := []struct {
		name, in, wantMsg string
	}{
		{"empty", "", "want N"},
		{"zero", "0/s", "above zero"},
		{"negative", "-2/s", "want N"},
		{"exponent", "1e3/s", "want N"},
		{"unknown unit", "2/fortnight", `period "fortnight"`},
		{"empty period", "2/", `period ""`},
		{"negative period", "2/-1s", `period "-1s"`},
		{"zero period", "2/0s", "must be positive"},
		{"words", "fast", "want N"},
		{"too many decimals", "0.0000000001/s", "at most 9 decimals"},
		{"too large", "99999999999999999999/s", "too large"},
		{"two slashes", "2/s/s", `period "s/s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseRate(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("parseRate(%q) error = %v, want one containing %q", tt.in, err, tt.wantMsg)
			}
		})
	}
}

func TestPolicyFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    algo.Policy
		wantErr error
	}{
		{"defaults", nil, algo.PerSecond(2).Burst(100), nil},
		{"the article's policy", []string{"--capacity", "100", "--rate", "2/s"}, algo.PerSecond(2).Burst(100), nil},
		{"per minute", []string{"--capacity=50", "--rate=50/m"}, algo.PerMinute(50).Burst(50), nil},
		{"zero capacity", []string{"--capacity", "0"}, algo.Policy{}, algo.ErrInvalidPolicy},
		{"rate above the bound", []string{"--rate", "2000000000/s"}, algo.Policy{}, algo.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			pf := addPolicyFlags(fs, 100, "2")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			p, err := pf.policy()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("policy() error = %v, want %v", err, tt.wantErr)
			}
			var ue usageError
			if err != nil && !errors.As(err, &ue) {
				t.Fatalf("policy() error %v is not a usage error", err)
			}
			if err == nil && p != tt.want {
				t.Fatalf("policy() = %v, want %v", p, tt.want)
			}
		})
	}
}

func TestConcurrencyFlag(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // String() of the result, or "" for an error
	}{
		{"default shape", "1,16,64", "1,16,64"},
		{"one", "8", "8"},
		{"spaces", "1, 2", "1,2"},
		{"zero", "0,1", ""},
		{"not a number", "a", ""},
		{"empty item", "1,,2", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c concurrencyFlag
			err := c.Set(tt.in)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("Set(%q) = %v, want an error", tt.in, c)
				}
				return
			}
			if err != nil || c.String() != tt.want {
				t.Fatalf("Set(%q) = %v, %v; want %s", tt.in, c.String(), err, tt.want)
			}
		})
	}
}

// TestParseRateProperty: whatever tokens, decimals and period a user
// writes, the parsed rate is exactly the same rate: tokens/period as a
// fraction, with no rounding.
func TestParseRateProperty(t *testing.T) {
	units := []struct {
		text string
		d    time.Duration
	}{{"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}, {"ms", time.Millisecond}, {"250ms", 250 * time.Millisecond}, {"90s", 90 * time.Second}}
	rapid.Check(t, func(t *rapid.T) {
		whole := rapid.Int64Range(0, 1_000_000).Draw(t, "whole")
		decimals := rapid.IntRange(0, 6).Draw(t, "decimals")
		frac := rapid.Int64Range(0, int64(math.Pow10(decimals))-1).Draw(t, "frac")
		unit := rapid.SampledFrom(units).Draw(t, "unit")
		scale := int64(math.Pow10(decimals))
		mantissa := whole*scale + frac
		if mantissa == 0 {
			t.Skip("zero rate")
		}
		text := strconv.FormatInt(whole, 10)
		if decimals > 0 {
			text += fmt.Sprintf(".%0*d", decimals, frac)
		}
		text += "/" + unit.text
		got, err := parseRate(text)
		if s := scale / gcd(mantissa, scale); unit.d > math.MaxInt64/time.Duration(s) {
			// The period would not fit a Duration: refused, not wrapped.
			if err == nil || !strings.Contains(err.Error(), "too many decimals") {
				t.Fatalf("parseRate(%q) = %v, %v; want a too-many-decimals error", text, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("parseRate(%q): %v", text, err)
		}
		// got.Tokens/got.Period == mantissa/(scale·unit), cross-multiplied
		// in 128 bits.
		lhs := new(big.Int).Mul(big.NewInt(got.Tokens), new(big.Int).Mul(big.NewInt(scale), big.NewInt(int64(unit.d))))
		rhs := new(big.Int).Mul(big.NewInt(mantissa), big.NewInt(int64(got.Period)))
		if lhs.Cmp(rhs) != 0 {
			t.Fatalf("parseRate(%q) = %v, not %d/(%d×%v)", text, got, mantissa, scale, unit.d)
		}
	})
}
