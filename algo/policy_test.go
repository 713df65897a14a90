package algo_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// TestValidate walks every bound of Policy.Validate, with the valid policy
// on each side of it. Invalid policies must fail with ErrInvalidPolicy and
// say which bound failed: a zero or tiny rate is an error, never a limiter
// that is jammed open (golang/go#71154, #18763).
func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    algo.Policy
		want string // substring of the error; "" for a valid policy
	}{
		{"zero policy", algo.Policy{}, "capacity 0"},
		{"capacity 1", algo.PerSecond(1).Burst(1), ""},
		{"capacity 0", algo.PerSecond(1).Burst(0), "capacity 0 outside"},
		{"negative capacity", algo.PerSecond(1).Burst(-3), "capacity -3 outside"},
		{"capacity MaxCapacity", algo.PerSecond(1_000_000).Burst(algo.MaxCapacity), ""},
		{"capacity above MaxCapacity", algo.PerSecond(1_000_000).Burst(algo.MaxCapacity + 1), "outside [1,"},
		{"capacity 1e9 at 1e6/s", algo.PerSecond(1_000_000).Burst(1e9), ""},
		{"zero tokens", algo.PerSecond(0).Burst(1), "tokens must be at least 1"},
		{"negative tokens", algo.PerSecond(-1).Burst(1), "tokens must be at least 1"},
		{"zero period", algo.Per(1, 0).Burst(1), "period outside"},
		{"negative period", algo.Per(1, -time.Second).Burst(1), "period outside"},
		{"period 1µs", algo.Per(1, time.Microsecond).Burst(1), ""},
		{"period under 1µs", algo.Per(1, 999*time.Nanosecond).Burst(1), "period outside"},
		{"period not whole µs", algo.Per(1, 1500*time.Nanosecond).Burst(1), "not a whole number of microseconds"},
		{"period MaxPeriod", algo.Per(1, algo.MaxPeriod).Burst(1), ""},
		{"period above MaxPeriod", algo.Per(1, algo.MaxPeriod+time.Microsecond).Burst(1), "period outside"},
		{"1 per day", algo.PerDay(1).Burst(1), ""},
		{"rate MaxPerSecond", algo.PerSecond(algo.MaxPerSecond).Burst(1), ""},
		{"rate above MaxPerSecond", algo.PerSecond(algo.MaxPerSecond + 1).Burst(1), "above 1000000000 per second"},
		{"rate above MaxPerSecond in µs", algo.Per(1001, time.Microsecond).Burst(1), "above"},
		{"largest burst at 1 per day", algo.PerDay(1).Burst(52124), ""},
		{"burst at 1 per day above 2^52 units", algo.PerDay(1).Burst(52125), "above 2^52"},
		{"refill above 2^52", algo.Per(1<<52+1, algo.MaxPeriod).Burst(1), "above 2^52"},
		{"MaxCapacity at 1 per second", algo.PerSecond(1).Burst(algo.MaxCapacity), "above 2^52: at this rate a burst is at most 4503599627"},
		{"largest burst at 1 per second", algo.PerSecond(1).Burst(4503599627), ""},
		{"MaxCapacity at 1000 per second", algo.PerSecond(1000).Burst(algo.MaxCapacity), ""},
		{"half a token per second", algo.PerSecond(0.5).Burst(3), ""},
		{"a third per second", algo.PerSecond(1.0 / 3).Burst(3), ""},
		{"pi per second", algo.PerSecond(math.Pi).Burst(3), "rate 3.141592653589793/1s is not a whole number of tokens per whole microseconds"},
		{"NaN per second", algo.PerSecond(math.NaN()).Burst(3), "rate NaN/1s: tokens must be positive"},
		{"negative fraction", algo.PerMinute(-0.5).Burst(3), "tokens must be positive"},
		{"infinite", algo.PerHour(math.Inf(1)).Burst(3), "not a whole number of tokens"},
		{"2.5 per day, inexact per second", algo.PerDay(2.5).Burst(3), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			_, nerr := algo.NewPolicy(tt.p.Capacity(), tt.p.Rate())
			if tt.want == "" {
				if err != nil || nerr != nil {
					t.Fatalf("Validate() = %v, NewPolicy: %v; want valid", err, nerr)
				}
				if _, res, err := (algo.TokenBucket{}).Take(tt.p, algo.State{}, t0, 1); err != nil || !res.Allowed {
					t.Errorf("first Take = %+v, %v: want admitted", res, err)
				}
				return
			}
			if !errors.Is(err, algo.ErrInvalidPolicy) || !errors.Is(nerr, algo.ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v, NewPolicy: %v; want ErrInvalidPolicy", err, nerr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %q, want it to say %q", err, tt.want)
			}
			if tt.p.Unit() != 0 || tt.p.Refill() != 0 || tt.p.FillTime() != 0 {
				t.Errorf("invalid policy has unit %d, refill %d, fill time %v: want zeros", tt.p.Unit(), tt.p.Refill(), tt.p.FillTime())
			}
		})
	}
}

func TestPolicyAccessors(t *testing.T) {
	tests := []struct {
		p            algo.Policy
		unit, refill int64
		fill         time.Duration
		str          string
	}{
		{algo.PerSecond(2).Burst(100), 500_000, 1, 50 * time.Second, "burst 100, 2/1s"},
		{algo.PerSecond(3).Burst(3), 1_000_000, 3, time.Second, "burst 3, 3/1s"},
		{algo.PerSecond(3).Burst(1), 1_000_000, 3, 333334 * time.Microsecond, "burst 1, 3/1s"},
		{algo.PerMinute(200).Burst(10), 300_000, 1, 3 * time.Second, "burst 10, 200/1m0s"},
		{algo.PerHour(7).Burst(7), 3_600_000_000, 7, time.Hour, "burst 7, 7/1h0m0s"},
		{algo.PerDay(1).Burst(2), 86_400_000_000, 1, 48 * time.Hour, "burst 2, 1/24h0m0s"},
		{algo.PerSecond(1_000_000).Burst(1e9), 1, 1, 1000 * time.Second, "burst 1000000000, 1000000/1s"},
		{algo.PerSecond(algo.MaxPerSecond).Burst(1), 1, 1000, time.Microsecond, "burst 1, 1000000000/1s"},
	}
	for _, tt := range tests {
		p := tt.p
		if p.Unit() != tt.unit || p.Refill() != tt.refill || p.FillTime() != tt.fill || p.String() != tt.str {
			t.Errorf("%v: unit %d, refill %d, fill %v, %q; want %d, %d, %v, %q",
				p.Rate(), p.Unit(), p.Refill(), p.FillTime(), p.String(), tt.unit, tt.refill, tt.fill, tt.str)
		}
	}
	if p := algo.PerSecond(2).Burst(100); p.Capacity() != 100 || p.Rate() != algo.Per(2, time.Second) {
		t.Errorf("capacity %d, rate %v", p.Capacity(), p.Rate())
	}
	if p, q := algo.PerSecond(2).Burst(100), algo.Per(4, 2*time.Second).Burst(100); p.Unit() != q.Unit() || p.Refill() != q.Refill() {
		t.Errorf("2/1s and 4/2s reduce to different terms: %d/%d vs %d/%d", p.Refill(), p.Unit(), q.Refill(), q.Unit())
	}
}

// TestRateForms: Rate gives the policy's rate as whole tokens per the
// first of second, minute, hour and day that holds a whole number, else in
// lowest terms; policies from one rate in different terms are equal; an
// invalid policy keeps the rate it was given, and Validate names it.
func TestRateForms(t *testing.T) {
	for _, tt := range []struct{ in, want algo.Rate }{
		{algo.PerSecond(2), algo.PerSecond(2)},
		{algo.PerMinute(60), algo.PerSecond(1)},
		{algo.PerMinute(90), algo.PerMinute(90)},
		{algo.PerHour(90), algo.PerHour(90)},
		{algo.Per(30, 2*time.Minute), algo.PerMinute(15)},
		{algo.PerDay(1), algo.PerDay(1)},
		{algo.Per(3, 7*time.Millisecond), algo.Per(3, 7*time.Millisecond)},
		{algo.Per(6, 14*time.Millisecond), algo.Per(3, 7*time.Millisecond)},
		{algo.Per(1, algo.MaxPeriod), algo.Per(1, algo.MaxPeriod)},
		{algo.PerSecond(algo.MaxPerSecond), algo.PerSecond(algo.MaxPerSecond)},
		{algo.PerSecond(0.5), algo.PerMinute(30)},
		{algo.PerSecond(2.5), algo.PerMinute(150)},
		{algo.PerSecond(1.0 / 3), algo.PerMinute(20)},
		{algo.PerSecond(0.001), algo.Per(1, 1000*time.Second)},
		{algo.PerMinute(0.5), algo.PerHour(30)},
		{algo.PerHour(1.5), algo.PerDay(36)},
		{algo.Every(2 * time.Second), algo.PerMinute(30)},
		{algo.Every(100 * time.Millisecond), algo.PerSecond(10)},
	} {
		if got := tt.in.Burst(10).Rate(); got != tt.want {
			t.Errorf("%v.Burst(10).Rate() = %v, want %v", tt.in, got, tt.want)
		}
	}
	if algo.PerMinute(120).Burst(5) != algo.PerSecond(2).Burst(5) {
		t.Error("PerMinute(120).Burst(5) != PerSecond(2).Burst(5)")
	}
	for _, tt := range []struct {
		p    algo.Policy
		rate algo.Rate
		msg  string
	}{
		{algo.Per(0, time.Second).Burst(3), algo.Per(0, time.Second), "rate 0/1s: tokens"},
		{algo.Per(5, 1500*time.Nanosecond).Burst(3), algo.Per(5, 1500*time.Nanosecond), "rate 5/1.5µs: period is not a whole"},
		{algo.Per(5, -3*time.Second).Burst(3), algo.Per(5, 0), "period outside"},
		{algo.PerSecond(1).Burst(0), algo.PerSecond(1), "capacity 0 outside"},
		{algo.PerDay(1).Burst(algo.MaxCapacity), algo.PerDay(1), "above 2^52"},
	} {
		err := tt.p.Validate()
		if !errors.Is(err, algo.ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.msg) || tt.p.Rate() != tt.rate ||
			tt.p.Unit() != 0 || tt.p.Refill() != 0 {
			t.Errorf("%v: Validate() = %v (want %q), Rate() = %v (want %v), Unit %d, Refill %d (want 0)",
				tt.p, err, tt.msg, tt.p.Rate(), tt.rate, tt.p.Unit(), tt.p.Refill())
		}
	}
}

// TestFractionalRates: a rate of t/d tokens per second (any whole t and d
// in range) is the policy of t tokens every d seconds, exactly; a rate no
// ratio gives is refused, never rounded.
func TestFractionalRates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tokens := rapid.Int64Range(1, 1_000_000).Draw(t, "tokens")
		secs := rapid.Int64Range(1, 10_000).Draw(t, "seconds")
		r := float64(tokens) / float64(secs)
		got, want := algo.PerSecond(r).Burst(10), algo.Per(tokens, time.Duration(secs)*time.Second).Burst(10)
		if got != want || got.Validate() != nil {
			t.Fatalf("PerSecond(%v) = %v (%v), want %v", r, got, got.Validate(), want)
		}
	})
	for _, r := range []float64{math.Pi, math.Sqrt2, 1e-9 / 3} {
		if err := algo.PerSecond(r).Burst(10).Validate(); !errors.Is(err, algo.ErrInvalidPolicy) {
			t.Errorf("PerSecond(%v): %v, want ErrInvalidPolicy", r, err)
		}
	}
}
