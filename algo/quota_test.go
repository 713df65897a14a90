package algo_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"pgregory.net/rapid"
)

// refPeriod is a quota's period containing now, computed by package time.
func refPeriod(period algo.CalendarPeriod, offset time.Duration, now int64) (start, end int64) {
	zone := time.FixedZone("q", int(offset/time.Second))
	t := time.UnixMicro(now).In(zone)
	var s, e time.Time
	switch period {
	case algo.Day:
		s = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, zone)
		e = s.AddDate(0, 0, 1)
	case algo.Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		s = time.Date(t.Year(), t.Month(), t.Day()-back, 0, 0, 0, 0, zone)
		e = s.AddDate(0, 0, 7)
	case algo.Month:
		s = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, zone)
		e = s.AddDate(0, 1, 0)
	}
	return s.UnixMicro(), e.UnixMicro()
}

func utc(y int, m time.Month, d, h, min, s int) int64 {
	return time.Date(y, m, d, h, min, s, 0, time.UTC).UnixMicro()
}

// TestQuotaPeriodNamed checks named instants: month lengths, leap years
// (2000 is one, 2100 is not), weeks from Monday around the epoch, and
// offsets that move a day across a month or a year.
func TestQuotaPeriodNamed(t *testing.T) {
	for _, c := range []struct {
		name       string
		period     algo.CalendarPeriod
		offset     time.Duration
		now        int64
		start, end int64
	}{
		{"epoch day", algo.Day, 0, 0, 0, utc(1970, 1, 2, 0, 0, 0)},
		{"epoch week: Monday 1969-12-29", algo.Week, 0, 0, utc(1969, 12, 29, 0, 0, 0), utc(1970, 1, 5, 0, 0, 0)},
		{"epoch month", algo.Month, 0, 0, 0, utc(1970, 2, 1, 0, 0, 0)},
		{"epoch, UTC-5: 1969-12-31 in New York", algo.Day, -5 * time.Hour, 0, utc(1969, 12, 31, 5, 0, 0), utc(1970, 1, 1, 5, 0, 0)},
		{"epoch month, UTC-23:59:59", algo.Month, -(24*time.Hour - time.Second), 0, utc(1969, 12, 1, 23, 59, 59), utc(1970, 1, 1, 23, 59, 59)},
		{"February 2024, leap", algo.Month, 0, utc(2024, 2, 29, 23, 59, 59), utc(2024, 2, 1, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0)},
		{"February 2100, not leap", algo.Month, 0, utc(2100, 2, 28, 12, 0, 0), utc(2100, 2, 1, 0, 0, 0), utc(2100, 3, 1, 0, 0, 0)},
		{"February 2000, leap", algo.Month, 0, utc(2000, 2, 15, 0, 0, 0), utc(2000, 2, 1, 0, 0, 0), utc(2000, 3, 1, 0, 0, 0)},
		{"April: 30 days", algo.Month, 0, utc(2026, 4, 30, 23, 0, 0), utc(2026, 4, 1, 0, 0, 0), utc(2026, 5, 1, 0, 0, 0)},
		{"December into January", algo.Month, 0, utc(2026, 12, 31, 23, 59, 59), utc(2026, 12, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0)},
		{"first µs of a month", algo.Month, 0, utc(2026, 3, 1, 0, 0, 0), utc(2026, 3, 1, 0, 0, 0), utc(2026, 4, 1, 0, 0, 0)},
		{"last µs of a month", algo.Month, 0, utc(2026, 3, 1, 0, 0, 0) - 1, utc(2026, 2, 1, 0, 0, 0), utc(2026, 3, 1, 0, 0, 0)},
		{"UTC+14: next year already", algo.Month, 14 * time.Hour, utc(2026, 12, 31, 10, 0, 0), utc(2026, 12, 31, 10, 0, 0), utc(2027, 1, 31, 10, 0, 0)},
		{"week: Thursday 2026-12-03", algo.Week, 0, utc(2026, 12, 3, 11, 0, 0), utc(2026, 11, 30, 0, 0, 0), utc(2026, 12, 7, 0, 0, 0)},
		{"week across a year, UTC+05:45", algo.Week, 5*time.Hour + 45*time.Minute, utc(2026, 12, 31, 20, 0, 0),
			utc(2026, 12, 28, 0, 0, 0) - (5*time.Hour + 45*time.Minute).Microseconds(), utc(2027, 1, 4, 0, 0, 0) - (5*time.Hour + 45*time.Minute).Microseconds()},
		{"the 2^53 bound: June 2255", algo.Month, 0, algo.MaxTime, utc(2255, 6, 1, 0, 0, 0), utc(2255, 7, 1, 0, 0, 0)},
	} {
		p := algo.Quota(1, c.period, c.offset)
		start, end := p.QuotaPeriod(c.now)
		if start != c.start || end != c.end {
			t.Errorf("%s: QuotaPeriod(%d) = [%v, %v), want [%v, %v)", c.name, c.now,
				time.UnixMicro(start).UTC(), time.UnixMicro(end).UTC(), time.UnixMicro(c.start).UTC(), time.UnixMicro(c.end).UTC())
		}
		if rs, re := refPeriod(c.period, c.offset, c.now); rs != c.start || re != c.end {
			t.Errorf("%s: the test's want disagrees with package time: [%d, %d)", c.name, rs, re)
		}
	}
}

// drawInstant draws a time in [0, MaxTime], often near a month's, a year's
// or a leap day's boundary, or at the bounds.
func drawInstant(t *rapid.T, offset time.Duration) int64 {
	switch rapid.IntRange(0, 3).Draw(t, "where") {
	case 0:
		return rapid.Int64Range(0, algo.MaxTime).Draw(t, "now")
	case 1: // around the first of a month in the quota's zone
		y := rapid.IntRange(1970, 2255).Draw(t, "year")
		m := time.Month(rapid.IntRange(1, 12).Draw(t, "month"))
		at := time.Date(y, m, 1, 0, 0, 0, 0, time.FixedZone("q", int(offset/time.Second))).UnixMicro()
		at += rapid.Int64Range(-2e6, 2e6).Draw(t, "jitter")
		return min(max(at, 0), algo.MaxTime)
	case 2: // around a 29th of February
		y := 4 * rapid.IntRange(493, 563).Draw(t, "leap/4")
		at := time.Date(y, 2, 29+rapid.IntRange(0, 1).Draw(t, "day"), 0, 0, 0, 0, time.FixedZone("q", int(offset/time.Second))).UnixMicro()
		at += rapid.Int64Range(-2e6, 2e6).Draw(t, "jitter")
		return min(max(at, 0), algo.MaxTime)
	}
	return rapid.SampledFrom([]int64{0, 1, algo.MaxTime, algo.MaxTime - 1, utc(2255, 6, 1, 0, 0, 0)}).Draw(t, "bound")
}

func drawQuota(t *rapid.T) (algo.Policy, algo.CalendarPeriod, time.Duration) {
	period := algo.CalendarPeriod(rapid.IntRange(1, 3).Draw(t, "period"))
	var offset time.Duration
	switch rapid.IntRange(0, 2).Draw(t, "offsetKind") {
	case 1:
		offset = time.Duration(rapid.IntRange(-95, 95).Draw(t, "quarterHours")) * 15 * time.Minute
	case 2:
		offset = time.Duration(rapid.Int64Range(-86399, 86399).Draw(t, "offsetSeconds")) * time.Second
	}
	n := rapid.Int64Range(1, algo.MaxCapacity).Draw(t, "n")
	p := algo.Quota(n, period, offset)
	err := p.Validate()
	if err != nil {
		t.Fatalf("Quota(%d, %v, %v): %v", n, period, offset, err)
	}
	return p, period, offset
}

// TestPropQuotaPeriodTime checks QuotaPeriod against package time for
// random instants up to 2^53 µs, offsets and periods.
func TestPropQuotaPeriodTime(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p, period, offset := drawQuota(t)
		now := drawInstant(t, offset)
		start, end := p.QuotaPeriod(now)
		rs, re := refPeriod(period, offset, now)
		if start != rs || end != re || !(start <= now && now < end) {
			t.Fatalf("%v at %d (%v): QuotaPeriod = [%d, %d), package time says [%d, %d)", p, now, time.UnixMicro(now).UTC(), start, end, rs, re)
		}
	})
}

// TestPropQuotaTake replays random takes and refunds against a reference
// built on package time (a count per period start), and checks every
// Result: the
// decision, Remaining, and RetryAfter and ResetAfter to the period's end,
// exact to the µs. Times only move forward here; stale clocks are in
// TestQuotaStaleClock.
func TestPropQuotaTake(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, period, offset := drawQuota(t)
		n := rapid.Int64Range(1, 20).Draw(t, "small n")
		p := algo.Quota(n, period, offset)
		now := drawInstant(t, offset)
		var (
			s        algo.State
			refStart int64 = -1 << 62
			refCount int64
		)
		for i := range rapid.IntRange(1, 40).Draw(t, "steps") {
			now = min(now+rapid.SampledFrom([]int64{0, 1, 1e6, 3600e6, 86400e6, 9 * 86400e6}).Draw(t, "step"), algo.MaxTime)
			cost := rapid.Int64Range(0, n).Draw(t, "cost")
			refund := rapid.IntRange(0, 3).Draw(t, "refund") == 0
			rs, re := refPeriod(period, offset, now)
			if rs != refStart {
				refStart, refCount = rs, 0
			}
			var res algo.Result
			var err error
			if refund {
				s, res, err = algo.TokenBucket{}.Refund(p, s, now, cost)
			} else {
				s, res, err = algo.TokenBucket{}.Take(p, s, now, cost)
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			want := algo.Result{Allowed: refund || refCount+cost <= n}
			switch {
			case refund:
				refCount = max(0, refCount-cost)
			case want.Allowed:
				refCount += cost
			default:
				want.RetryAfter = time.Duration(re-now) * time.Microsecond
			}
			want.Remaining = n - refCount
			if refCount > 0 {
				want.ResetAfter = time.Duration(re-now) * time.Microsecond
			}
			if res != want {
				t.Fatalf("step %d: refund %v of %d to %v at %v = %+v, want %+v", i, refund, cost, p, time.UnixMicro(now).UTC(), res, want)
			}
			if idle := (algo.TokenBucket{}).IdleAt(p, s); (refCount > 0) != (idle > now) || (refCount > 0 && idle != re) {
				t.Fatalf("step %d: IdleAt = %d with count %d, period end %d", i, idle, refCount, re)
			}
		}
	})
}

// TestQuotaStaleClock: a clock behind the stored period is decided in that
// period; it neither opens an earlier one nor resets the count.
func TestQuotaStaleClock(t *testing.T) {
	p := algo.Quota(2, algo.Day, 0)
	tb := algo.TokenBucket{}
	now := utc(2026, 12, 3, 0, 0, 0)
	s, _, _ := tb.Take(p, algo.State{}, now, 2)
	back := utc(2026, 12, 2, 23, 0, 0) // an hour before the period, a lagging instance
	s2, res, err := tb.Take(p, s, back, 1)
	if err != nil || res.Allowed || res.RetryAfter != 25*time.Hour || s2 != s {
		t.Fatalf("stale take = %+v, %v, state %+v; want denied for 25h, state unchanged", res, err, s2)
	}
}

// TestQuotaErrors checks the constructors' errors and Take's.
func TestQuotaErrors(t *testing.T) {
	for _, c := range []struct {
		n      int64
		period algo.CalendarPeriod
		offset time.Duration
	}{
		{0, algo.Day, 0},
		{algo.MaxCapacity + 1, algo.Day, 0},
		{1, 0, 0},
		{1, algo.Month + 1, 0},
		{1, algo.Day, 24 * time.Hour},
		{1, algo.Day, -24 * time.Hour},
		{1, algo.Day, time.Millisecond},
	} {
		p := algo.Quota(c.n, c.period, c.offset)
		err := p.Validate()
		if !errors.Is(err, algo.ErrInvalidQuota) || !errors.Is(err, algo.ErrInvalidPolicy) {
			t.Errorf("Quota(%d, %v, %v) = %v, want ErrInvalidQuota", c.n, c.period, c.offset, err)
		}
		if _, _, err := (algo.TokenBucket{}).Take(p, algo.State{}, 0, 0); !errors.Is(err, algo.ErrInvalidQuota) {
			t.Errorf("Take with %v = %v, want ErrInvalidQuota", p, err)
		}
		if !p.IsQuota() {
			t.Errorf("invalid quota %+v: IsQuota false", p)
		}
	}
	p := algo.Quota(3, algo.Week, time.Hour)
	tb := algo.TokenBucket{}
	for _, c := range []struct {
		s         algo.State
		now, cost int64
		want      error
	}{
		{algo.State{}, 0, 4, algo.ErrCostExceedsCapacity},
		{algo.State{}, 0, -1, algo.ErrInvalidCost},
		{algo.State{}, -1, 1, algo.ErrInvalidTime},
		{algo.State{}, algo.MaxTime + 1, 1, algo.ErrInvalidTime},
		{algo.State{Level: -1}, 0, 1, algo.ErrInvalidState},
		{algo.State{Stamp: 1 << 60}, 0, 1, algo.ErrInvalidState},
	} {
		if _, _, err := tb.Take(p, c.s, c.now, c.cost); !errors.Is(err, c.want) {
			t.Errorf("Take(%+v, %d, %d) = %v, want %v", c.s, c.now, c.cost, err, c.want)
		}
	}
	if _, _, _, err := tb.TakeAtMost(p, algo.State{}, 0, 1); !errors.Is(err, algo.ErrQuotaUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("TakeAtMost of a quota = %v, want ErrQuotaUnsupported", err)
	}
	if _, _, err := tb.Refund(p, algo.State{}, 0, 4); !errors.Is(err, algo.ErrCostExceedsCapacity) {
		t.Errorf("Refund of 4 to a quota of 3 = %v, want ErrCostExceedsCapacity", err)
	}
	if _, _, err := (algo.FixedWindow{}).Take(p, algo.State{}, 0, 1); !errors.Is(err, algo.ErrQuotaUnsupported) {
		t.Errorf("FixedWindow with a quota = %v, want ErrQuotaUnsupported", err)
	}
}

// TestQuotaPolicy checks the accessors, the wire words and String.
func TestQuotaPolicy(t *testing.T) {
	p := algo.Quota(10_000, algo.Month, 5*time.Hour+30*time.Minute)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	period, off, ok := p.Calendar()
	if !ok || period != algo.Month || off != 5*time.Hour+30*time.Minute || !p.IsQuota() {
		t.Errorf("Calendar() = %v, %v, %v", period, off, ok)
	}
	if p.Capacity() != 10_000 || p.Unit() != 0 || p.Refill() >= 0 || p.FillTime() != 0 {
		t.Errorf("wire words %d, %d, %d, fill %v", p.Capacity(), p.Unit(), p.Refill(), p.FillTime())
	}
	if got := p.String(); got != "10000 per month, UTC+05:30" {
		t.Errorf("String() = %q", got)
	}
	if got := algo.Quota(5, algo.Week, -time.Hour-time.Second).String(); got != "5 per week, UTC-01:00:01" {
		t.Errorf("String() = %q", got)
	}
	if _, _, ok := algo.PerSecond(1).Burst(1).Calendar(); ok || algo.PerSecond(1).Burst(1).IsQuota() || (algo.Policy{}).IsQuota() {
		t.Error("a bucket or the zero Policy reads as a quota")
	}
	if s := p.Share(3); s != algo.Quota(3333, algo.Month, 5*time.Hour+30*time.Minute) {
		t.Errorf("Share(3) = %v", s)
	}
	if s := algo.Quota(2, algo.Day, 0).Share(3); s != algo.Quota(1, algo.Day, 0) {
		t.Errorf("Share(3) of 2 = %v", s)
	}
	// Uncharged gives a refused multi-take's charge back.
	tb := algo.TokenBucket{}
	q := algo.Quota(5, algo.Day, 0)
	_, res, _ := tb.Take(q, algo.State{}, 0, 2)
	if u := tb.Uncharged(q, res, 2); u.Remaining != 5 || u.ResetAfter != 0 {
		t.Errorf("Uncharged = %+v", u)
	}
}

// TestQuotaChange: a quota whose n, period or offset changes keeps its
// stored period until that period's end, its count read as at most the
// new n; then the new calendar applies.
func TestQuotaChange(t *testing.T) {
	tb := algo.TokenBucket{}
	now := utc(2026, 12, 3, 12, 0, 0)
	dayEnd := utc(2026, 12, 4, 0, 0, 0)
	s, _, _ := tb.Take(algo.Quota(5, algo.Day, 0), algo.State{}, now, 4)
	for _, c := range []struct {
		p    algo.Policy
		want algo.Result
	}{
		{algo.Quota(2, algo.Day, 0), algo.Result{Allowed: false, RetryAfter: 12 * time.Hour, ResetAfter: 12 * time.Hour}},
		{algo.Quota(10, algo.Month, 0), algo.Result{Allowed: true, Remaining: 5, ResetAfter: 12 * time.Hour}},
		{algo.Quota(10, algo.Week, 3*time.Hour), algo.Result{Allowed: true, Remaining: 5, ResetAfter: 12 * time.Hour}},
	} {
		if _, res, err := tb.Take(c.p, s, now, 1); err != nil || res != c.want {
			t.Errorf("after a change to %v: %+v, %v; want %+v", c.p, res, err, c.want)
		}
	}
	// At the day's end the month's calendar applies.
	p := algo.Quota(10, algo.Month, 0)
	if _, res, _ := tb.Take(p, s, dayEnd, 1); res.Remaining != 9 || res.ResetAfter != time.Duration(utc(2027, 1, 1, 0, 0, 0)-dayEnd)*time.Microsecond {
		t.Errorf("at the old period's end under %v: %+v", p, res)
	}
}
