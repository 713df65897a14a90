package limitheader

import (
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// TestFixture: Render gives exactly the fixture's values.
func TestFixture(t *testing.T) {
	cases, err := ReadCases("../testdata/ratelimit-headers.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		f := Render(c.Now(), c.Answer())
		got := map[string][]string{"X-RateLimit-Limit": {f.Limit}, "X-RateLimit-Remaining": {f.Remaining},
			"X-RateLimit-Reset": {f.Reset}, "RateLimit": {f.RateLimit}}
		if f.RetryAfter != "" {
			got["Retry-After"] = []string{f.RetryAfter}
		}
		for _, m := range c.Mismatches(func(name string) []string { return got[name] }) {
			t.Errorf("%s: %s", c.Case, m)
		}
	}
}

func TestRounding(t *testing.T) {
	for _, c := range []struct {
		d            time.Duration
		delay, retry int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{time.Nanosecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + time.Microsecond, 2, 2},
	} {
		if got := DelaySeconds(c.d); got != c.delay {
			t.Errorf("DelaySeconds(%v) = %d, want %d", c.d, got, c.delay)
		}
		if got := RetryAfterSeconds(c.d); got != c.retry {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", c.d, got, c.retry)
		}
	}
	now := time.Unix(100, 0)
	if got := ResetUnix(now, 0); got != 100 {
		t.Errorf("ResetUnix(full) = %d, want 100", got)
	}
	if got := ResetUnix(now.Add(time.Nanosecond), 0); got != 101 {
		t.Errorf("ResetUnix(1ns past a second) = %d, want 101", got)
	}
}

// TestWindow: the draft's w is a bucket's fill time in whole seconds,
// rounded up and at least 1, or the calendar period that holds now.
func TestWindow(t *testing.T) {
	feb := time.Date(2026, time.February, 10, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		p    algo.Policy
		want int64
	}{
		{algo.PerSecond(2).Burst(100), 50},
		{algo.PerSecond(3).Burst(100), 34},
		{algo.PerSecond(1000).Burst(1), 1},
		{algo.Quota(10, algo.Day, 0), 86400},
		{algo.Quota(10, algo.Week, -5*time.Hour), 604800},
		{algo.Quota(10, algo.Month, 0), 28 * 86400},
	} {
		if got := Window(c.p, feb); got != c.want {
			t.Errorf("Window(%v) = %d, want %d", c.p, got, c.want)
		}
	}
}

func TestAppendName(t *testing.T) {
	if got := string(AppendName(nil, "a\"b\\c\x01é")); got != `"a\"b\\c???"` {
		t.Errorf("AppendName = %s", got)
	}
}
