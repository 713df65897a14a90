package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// custom is the scenario name of traffic drawn by hand (Config.Traffic).
const custom = "custom"

// traffic is Config.Traffic: one Pattern per client.
type traffic []Pattern

// Pattern is one client's requests in traffic drawn by hand
// ([Config.Traffic]). As text, which [Pattern.String] writes and
// [Pattern.UnmarshalText] reads, it is comma-separated parts, each "N at
// T" (a burst of N at T), "N at T over D" (spread over D), "every D"
// (steady) or "cost C", with durations as time.ParseDuration reads them:
// "100 at 59.5s over 490ms, 100 at 60.01s over 490ms, every 5s".
type Pattern struct {
	// Bursts are sent as given.
	Bursts []Burst
	// Every, when positive, adds a steady request every Every, from a
	// phase in [0, Every) drawn from the seed.
	Every time.Duration
	// Cost is every request's cost; zero means 1.
	Cost int64
}

// Burst is Count requests spread evenly over [At, At+Over].
type Burst struct {
	At    time.Duration
	Count int64
	Over  time.Duration
}

// customKey is the one bucket every client of Config.Traffic shares.
const customKey = "client"

// UnmarshalText reads p from text, as the playground's form and URL carry
// it (see [Pattern]). Errors wrap [ErrInvalidConfig], and leave p as it
// was.
func (p *Pattern) UnmarshalText(text []byte) error {
	q, err := parsePattern(string(text))
	if err == nil {
		*p = q
	}
	return err
}

// parsePattern reads a Pattern written as its String.
func parsePattern(s string) (Pattern, error) {
	var p Pattern
	bad := func(part, why string) (Pattern, error) {
		return Pattern{}, fmt.Errorf(`%w: traffic %q: %s (want "N at T [over D]", "every D" or "cost C")`, ErrInvalidConfig, part, why)
	}
	for _, part := range strings.Split(s, ",") {
		f := strings.Fields(part)
		switch {
		case len(f) == 0:
			continue
		case len(f) == 2 && f[0] == "every":
			d, err := time.ParseDuration(f[1])
			if err != nil || d <= 0 {
				return bad(part, "not a positive duration")
			}
			p.Every = d
		case len(f) == 2 && f[0] == "cost":
			c, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || c < 1 {
				return bad(part, "not a positive cost")
			}
			p.Cost = c
		case (len(f) == 3 || len(f) == 5 && f[3] == "over") && f[1] == "at":
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || n < 1 {
				return bad(part, "not a positive count")
			}
			b := Burst{Count: n}
			if b.At, err = time.ParseDuration(f[2]); err != nil || b.At < 0 {
				return bad(part, "not a time from the start")
			}
			if len(f) == 5 {
				if b.Over, err = time.ParseDuration(f[4]); err != nil || b.Over < 0 {
					return bad(part, "not a duration")
				}
			}
			p.Bursts = append(p.Bursts, b)
		default:
			return bad(part, "not understood")
		}
	}
	return p, nil
}

// String writes p as text (see [Pattern]).
func (p Pattern) String() string {
	var parts []string
	for _, b := range p.Bursts {
		s := fmt.Sprintf("%d at %v", b.Count, b.At)
		if b.Over > 0 {
			s += fmt.Sprintf(" over %v", b.Over)
		}
		parts = append(parts, s)
	}
	if p.Every > 0 {
		parts = append(parts, fmt.Sprintf("every %v", p.Every))
	}
	if p.Cost > 1 {
		parts = append(parts, fmt.Sprintf("cost %d", p.Cost))
	}
	return strings.Join(parts, ", ")
}

// check reports whether t can run for length: requests in bounds.
func (t traffic) check(length time.Duration) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: traffic: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	if len(t) > 10 {
		return bad("%d clients, want 1 to 10", len(t))
	}
	var n int64
	for i, p := range t {
		if p.Cost < 0 || p.Every < 0 || p.Every > 0 && p.Every < time.Microsecond {
			return bad("client %d: negative cost or steady period below 1µs", i+1)
		}
		if p.Every > 0 {
			n += int64(length / p.Every)
		}
		for _, b := range p.Bursts {
			if b.At < 0 || b.Over < 0 || b.Count < 1 || b.Count > MaxTrafficRequests {
				return bad("client %d: burst %+v out of range", i+1, b)
			}
			n += b.Count
		}
		if n > MaxTrafficRequests {
			return bad("more than %d requests", MaxTrafficRequests)
		}
	}
	return nil
}

// length is the default duration of t: two minutes, or 30 s after the
// end of its last burst.
func (t traffic) length() time.Duration {
	d := 2 * time.Minute
	for _, p := range t {
		for _, b := range p.Bursts {
			d = max(d, b.At+b.Over+30*time.Second)
		}
	}
	return min(d.Round(time.Second), MaxDuration)
}

// scenario makes t a Scenario.
func (t traffic) scenario() Scenario {
	var names []string
	for _, p := range t {
		names = append(names, p.String())
	}
	return Scenario{
		Name:    custom,
		Summary: "traffic drawn by hand: " + strings.Join(names, "; "),
		Policy:  perMinute100, Duration: t.length(), Focus: "client 1",
		classes: func(base algo.Policy) []class {
			var cs []class
			for i, p := range t {
				cs = append(cs, class{name: fmt.Sprintf("client %d", i+1), count: 1,
					key: func(int) string { return customKey }, policy: base,
					gen: func(int, *rand.Rand) generator { return newScripted(p) }})
			}
			return cs
		},
	}
}

// scripted sends a Pattern's bursts and its steady stream, in time order.
type scripted struct {
	bursts    []req
	i         int
	every, at int64 // the steady stream's period and next request, µs
	begun     bool
	cost      int64
}

func newScripted(p Pattern) *scripted {
	s := &scripted{every: p.Every.Microseconds(), cost: max(p.Cost, 1)}
	for _, b := range p.Bursts {
		from := b.At.Microseconds()
		s.bursts = spread(s.bursts, from, from+b.Over.Microseconds(), b.Count, s.cost)
	}
	slices.SortStableFunc(s.bursts, byTime)
	return s
}

func (s *scripted) next(r *rand.Rand, now int64, _ *algo.Result) (req, bool) {
	if s.every > 0 && !s.begun {
		s.at, s.begun = between(r, 0, s.every-1), true
	}
	if s.i < len(s.bursts) && (s.every <= 0 || s.bursts[s.i].at <= s.at) {
		s.i++
		return s.bursts[s.i-1], true
	}
	if s.every <= 0 {
		return req{}, false
	}
	q := req{s.at, s.cost}
	s.at += s.every
	return q, true
}
