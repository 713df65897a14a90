package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// errBadRate is wrapped by every --rate parse error.
var errBadRate = errors.New("want N, N/s, N/m, N/h, N/d or N/DURATION, e.g. 2, 2/s, 200/m, 0.5/s, 5/10s")

// rateUnits are the period names --rate accepts after the slash.
var rateUnits = map[string]time.Duration{
	"us": time.Microsecond, "µs": time.Microsecond,
	"ms": time.Millisecond,
	"s":  time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// parseRate reads a refill rate written as tokens per period:
//
//	2        2 per second
//	2/s      the same; also /sec, /second
//	200/m    200 per minute (/min, /minute); /h, /hour; /d, /day; /ms
//	5/10s    5 every 10 seconds: any Go duration after the slash
//	0.5/s    decimals are exact: 1 per 2 seconds
//
// Decimals are turned into whole tokens (0.5/s is 1/2s). It is not
// validated against algo's bounds: [algo.NewPolicy] does that.
func parseRate(s string) (algo.Rate, error) {
	num, per, hasPer := strings.Cut(strings.TrimSpace(s), "/")
	period := time.Second
	if hasPer {
		per = strings.TrimSpace(per)
		if d, ok := rateUnits[strings.ToLower(per)]; ok {
			period = d
		} else if d, err := time.ParseDuration(per); err == nil && per != "" && per[0] >= '0' && per[0] <= '9' {
			period = d
		} else {
			return algo.Rate{}, fmt.Errorf("period %q: %w", per, errBadRate)
		}
	}
	if period <= 0 {
		return algo.Rate{}, fmt.Errorf("period %v must be positive: %w", period, errBadRate)
	}
	tokens, scale, err := parseDecimal(strings.TrimSpace(num))
	if err != nil {
		return algo.Rate{}, err
	}
	// tokens/scale per period = tokens per period·scale; reduce only the
	// decimal scaling, so 0.5/s is 1/2s but 120/m stays 120/m.
	g := gcd(tokens, scale)
	tokens, scale = tokens/g, scale/g
	if period > math.MaxInt64/time.Duration(scale) {
		return algo.Rate{}, fmt.Errorf("rate %q has too many decimals for its period", s)
	}
	period *= time.Duration(scale)
	return algo.Per(tokens, period), nil
}

// parseDecimal reads a positive decimal such as "2", "0.5" or "1.25" as
// mantissa/scale, with scale a power of ten.
func parseDecimal(s string) (mantissa, scale int64, err error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.ContainsAny(s, "+-eE_ ") {
		return 0, 0, fmt.Errorf("tokens %q: %w", s, errBadRate)
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > 9 {
		return 0, 0, fmt.Errorf("tokens %q: at most 9 decimals", s)
	}
	m, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, 0, fmt.Errorf("tokens %q: too large", s)
		}
		return 0, 0, fmt.Errorf("tokens %q: %w", s, errBadRate)
	}
	if m <= 0 {
		return 0, 0, fmt.Errorf("tokens %q: the rate must be above zero", s)
	}
	return m, int64(math.Pow10(len(frac))), nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// rateFlag is a flag.Value holding a rate parsed by [parseRate].
type rateFlag struct {
	text string
	rate algo.Rate
}

func (r *rateFlag) String() string { return r.text }

func (r *rateFlag) Set(s string) error {
	v, err := parseRate(s)
	if err != nil {
		return err
	}
	r.text, r.rate = s, v
	return nil
}

// policyFlags are --capacity and --rate: the shape of a bucket.
type policyFlags struct {
	capacity int64
	rate     rateFlag
}

// addPolicyFlags registers --capacity and --rate on fs with the given
// defaults.
func addPolicyFlags(fs *flag.FlagSet, capacity int64, rate string) *policyFlags {
	pf := &policyFlags{capacity: capacity}
	if err := pf.rate.Set(rate); err != nil {
		panic("ratebucket: bad default rate " + rate) // a programming error, caught by every test
	}
	fs.Int64Var(&pf.capacity, "capacity", capacity, "bucket `size` in tokens: the largest burst")
	fs.Var(&pf.rate, "rate", "refill `rate`: 2 (per second), 2/s, 200/m, 1000/h, 0.5/s or 5/10s")
	return pf
}

// policy returns the validated policy, or a usage error saying which bound
// failed.
func (pf *policyFlags) policy() (algo.Policy, error) {
	p, err := algo.NewPolicy(pf.capacity, pf.rate.rate)
	if err != nil {
		return p, usageError{fmt.Errorf("--capacity %d --rate %s: %w", pf.capacity, pf.rate.text, err)}
	}
	return p, nil
}

// concurrencyFlag is a comma-separated list of positive integers, such as
// "1,16,64".
type concurrencyFlag []int

func (c *concurrencyFlag) String() string {
	parts := make([]string, len(*c))
	for i, n := range *c {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (c *concurrencyFlag) Set(s string) error {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > 100_000 {
			return fmt.Errorf("%q: want a comma-separated list of goroutine counts from 1 to 100000, e.g. 1,16,64", part)
		}
		out = append(out, n)
	}
	*c = out
	return nil
}

// positiveInt checks a flag that must be at least min.
func positiveInt(name string, v, min int) error {
	if v < min {
		return usagef("--%s %d: must be at least %d", name, v, min)
	}
	return nil
}
