package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// testQuota checks calendar quotas (algo.Quota): the Results of random
// takes match algo's on the same sequence across day, week, month and
// year boundaries, leap days and the 2^53 µs bound; a denial is admitted
// exactly at the next period's start and not a µs earlier; a refund gives
// back to the period's count; bad quotas and costs above n are errors
// that charge nothing; and a quota beside a token bucket in one
// multi-limit take charges both or neither.
func testQuota(t *testing.T, e *env) {
	t.Run("reference", func(t *testing.T) { testQuotaReference(t, e) })
	t.Run("retry at the boundary", func(t *testing.T) { testQuotaBoundary(t, e) })
	t.Run("bad input", func(t *testing.T) { testQuotaBadInput(t, e) })
	t.Run("multi", func(t *testing.T) { testQuotaMulti(t, e) })
	t.Run("multi reference", func(t *testing.T) { testQuotaMultiReference(t, e) })
}

// genQuota draws a valid quota of at most 20 per period, with an offset
// of none, whole quarter hours, or any whole number of seconds.
func genQuota(t *rapid.T, label string) algo.Policy {
	period := algo.CalendarPeriod(rapid.IntRange(int(algo.Day), int(algo.Month)).Draw(t, label+"period"))
	var off time.Duration
	switch rapid.IntRange(0, 2).Draw(t, label+"offset kind") {
	case 1:
		off = time.Duration(rapid.IntRange(-95, 95).Draw(t, label+"quarter hours")) * 15 * time.Minute
	case 2:
		off = time.Duration(rapid.Int64Range(-86399, 86399).Draw(t, label+"offset s")) * time.Second
	}
	p := algo.Quota(rapid.Int64Range(1, 20).Draw(t, label+"n"), period, off)
	err := p.Validate()
	if err != nil {
		t.Fatalf("generated quota: %v", err)
	}
	return p
}

// genQuotaStart draws a starting instant: any µs up to a month and a half
// before 2^53, or within a few seconds of a month's or a leap day's first
// instant in UTC.
func genQuotaStart(t *rapid.T) time.Time {
	const room = 45 * 86400 * 1_000_000
	var us int64
	switch rapid.IntRange(0, 2).Draw(t, "start kind") {
	case 0:
		us = rapid.Int64Range(0, algo.MaxTime-room).Draw(t, "start")
	case 1:
		y, m := rapid.IntRange(1970, 2255).Draw(t, "year"), time.Month(rapid.IntRange(1, 5).Draw(t, "month"))
		us = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	default:
		y := 4 * rapid.IntRange(493, 563).Draw(t, "leap year/4") // 1972..2252; 2100 and 2200 are not leap
		us = time.Date(y, time.February, 29, 0, 0, 0, 0, time.UTC).UnixMicro()
	}
	us += rapid.Int64Range(-3_000_000, 3_000_000).Draw(t, "jitter")
	return time.UnixMicro(min(max(us, 0), algo.MaxTime-room)).UTC()
}

// genQuotaStep draws how far to move the clock: not at all, a µs, a
// second, an hour, a day, a week, or to a µs before, at or after the end
// of p's current period (all clamped to algo.MaxTime).
func genQuotaStep(t *rapid.T, p algo.Policy, now time.Time) time.Time {
	us := now.UnixMicro()
	_, end := p.QuotaPeriod(us)
	next := us
	switch rapid.IntRange(0, 6).Draw(t, "step kind") {
	case 1:
		next = us + rapid.SampledFrom([]int64{1, 1e6, 3600e6}).Draw(t, "step")
	case 2:
		next = us + rapid.SampledFrom([]int64{86400e6, 7 * 86400e6}).Draw(t, "step")
	case 3, 4, 5:
		next = end + rapid.Int64Range(-1, 1).Draw(t, "past the end")
	case 6:
		next = us + rapid.Int64Range(0, 40*86400e6).Draw(t, "step")
	}
	return time.UnixMicro(min(next, algo.MaxTime)).UTC()
}

// testQuotaReference: takes and refunds on a quota, with the clock moving forward in steps that
// land on period boundaries, match algo's Results, and a take's waits end
// where package time says the period does.
func testQuotaReference(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		r := &ref{p: genQuota(t, "")}
		key := e.key()
		e.clk.Set(genQuotaStart(t))
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			e.clk.Set(genQuotaStep(t, r.p, e.clk.Now()))
			n := genCost(t, r.p)
			if rapid.IntRange(0, 3).Draw(t, "refund") != 0 {
				res := e.check(t, key, r, n)
				checkTimeEnd(t, r.p, e.clk.Now(), res)
				continue
			}
			now := e.clk.Now()
			st, want, err := algo.TokenBucket{}.Refund(r.p, r.s, now.UnixMicro(), n)
			if err != nil {
				t.Fatalf("reference Refund: %v", err)
			}
			r.s = st
			got, err := e.s.Refund(context.Background(), store.Request{Key: key, Policy: r.p, Cost: n})
			if err != nil || got != want {
				t.Fatalf("at %v: Refund(%q, %v, %d) = %+v, %v; algo says %+v", now, key, r.p, n, got, err, want)
			}
		}
	})
}

// testQuotaBoundary: a quota spent just before a month's end is denied
// until exactly its first µs (February of a leap year, 29 days), and
// admitted then; a daily quota with an offset resets at the customer's
// midnight.
func testQuotaBoundary(t *testing.T, e *env) {
	for _, c := range []struct {
		p    algo.Policy
		at   time.Time // when the quota is spent
		next time.Time // the next period's first instant
	}{
		{algo.Quota(3, algo.Month, 0), time.Date(2028, 2, 29, 23, 59, 59, 999_000, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{algo.Quota(3, algo.Month, 0), time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
		{algo.Quota(2, algo.Day, -5*time.Hour), time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 5, 0, 0, 0, time.UTC)},
		{algo.Quota(1, algo.Week, 0), time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)},
	} {
		key := e.key()
		e.clk.Set(c.at)
		if res := e.take(t, key, c.p, c.p.Capacity()); !res.Allowed || res.ResetAfter != c.next.Sub(c.at) {
			t.Fatalf("%v: spending it at %v = %+v, want allowed, reset after %v", c.p, c.at, res, c.next.Sub(c.at))
		}
		res := e.take(t, key, c.p, 1)
		if res.Allowed || res.RetryAfter != c.next.Sub(c.at) || res.Remaining != 0 {
			t.Fatalf("%v: one more at %v = %+v, want denied with RetryAfter %v", c.p, c.at, res, c.next.Sub(c.at))
		}
		e.clk.Set(c.next.Add(-time.Microsecond))
		if res := e.take(t, key, c.p, 1); res.Allowed || res.RetryAfter != time.Microsecond {
			t.Fatalf("%v: a µs before %v = %+v, want denied for 1µs", c.p, c.next, res)
		}
		e.clk.Set(c.next)
		want := algo.Result{Allowed: true, Remaining: c.p.Capacity() - 1, ResetAfter: mustEnd(t, c.p, c.next).Sub(c.next)}
		if res := e.take(t, key, c.p, 1); res != want {
			t.Fatalf("%v: at %v = %+v, want %+v", c.p, c.next, res, want)
		}
	}
}

// checkTimeEnd fails the test unless a take's Result at now, with the
// clock moving only forward, waits for the end of the period that package
// time gives: the first instant of the next day, Monday or 1st in the
// quota's zone.
func checkTimeEnd(t tb, p algo.Policy, now time.Time, res algo.Result) {
	t.Helper()
	period, off, _ := p.Calendar()
	zone := time.FixedZone("quota", int(off/time.Second))
	at := now.In(zone)
	var end time.Time
	switch period {
	case algo.Day:
		end = time.Date(at.Year(), at.Month(), at.Day()+1, 0, 0, 0, 0, zone)
	case algo.Week:
		end = time.Date(at.Year(), at.Month(), at.Day()+7-(int(at.Weekday())+6)%7, 0, 0, 0, 0, zone)
	default:
		end = time.Date(at.Year(), at.Month()+1, 1, 0, 0, 0, 0, zone)
	}
	wait := end.Sub(now)
	if (!res.Allowed && res.RetryAfter != wait) || (res.Remaining < p.Capacity() && res.ResetAfter != wait) {
		t.Fatalf("%v at %v: %+v, but package time says the period ends at %v, in %v", p, at, res, end, wait)
	}
}

// mustEnd returns the end of p's period holding at.
func mustEnd(t tb, p algo.Policy, at time.Time) time.Time {
	t.Helper()
	_, end := p.QuotaPeriod(at.UnixMicro())
	if end == 0 {
		t.Fatalf("%v has no period at %v", p, at)
	}
	return time.UnixMicro(end).UTC()
}

// testQuotaBadInput: an invalid quota and a cost above n are errors
// matching their sentinels, and charge nothing.
func testQuotaBadInput(t *testing.T, e *env) {
	ctx := context.Background()
	p := algo.Quota(5, algo.Day, 0)
	key := e.key()
	if _, err := e.s.Take(ctx, store.Request{Key: key, Policy: algo.Quota(0, algo.Day, 0), Cost: 1}); !errors.Is(err, algo.ErrInvalidPolicy) {
		t.Errorf("Take with a quota of 0 = %v, want algo.ErrInvalidPolicy", err)
	}
	if _, err := e.s.Take(ctx, store.Request{Key: key, Policy: algo.Quota(5, algo.Day, 24*time.Hour), Cost: 1}); !errors.Is(err, algo.ErrInvalidQuota) {
		t.Errorf("Take with an offset of 24h = %v, want algo.ErrInvalidQuota", err)
	}
	if _, err := e.s.Take(ctx, store.Request{Key: key, Policy: p, Cost: 6}); !errors.Is(err, algo.ErrCostExceedsCapacity) {
		t.Errorf("Take of 6 from a quota of 5 = %v, want algo.ErrCostExceedsCapacity", err)
	}
	e.full(t, key, p)
}

// testQuotaMulti: "bursts of 100 at 2/s AND 10,000 a month", shrunk to a
// burst of 3 and 5 a month: a multi-limit take charges both or neither,
// when the quota denies and when the bucket does.
func testQuotaMulti(t *testing.T, e *env) {
	burst, quota := algo.PerSecond(2).Burst(3), algo.Quota(5, algo.Month, 0)
	keys := e.tagged(2)
	refs := []*ref{{p: burst}, {p: quota}}
	e.clk.Set(time.Date(2027, 1, 31, 23, 59, 58, 0, time.UTC))
	multi := func(cost int64) store.MultiResult {
		t.Helper()
		reqs := []store.Request{{Key: keys[0], Policy: burst, Cost: cost}, {Key: keys[1], Policy: quota, Cost: cost}}
		return checkMulti(t, e, refs, []int{0, 1}, reqs)
	}
	if res := multi(3); !res.Allowed {
		t.Fatalf("3 of a burst of 3 and of 5 a month: %+v", res)
	}
	// The bucket denies: the quota is not charged.
	if res := multi(1); res.Allowed || res.Denied != 0 || !res.Results[1].Allowed {
		t.Fatalf("the bucket empty: %+v, want denied by request 0", res)
	}
	if res := e.check(t, keys[1], refs[1], 0); res.Remaining != 2 {
		t.Fatalf("quota after the bucket denied: %+v, want 2 remaining (uncharged)", res)
	}
	// 1.5 s later the bucket holds 3 again; the quota has 2: it denies and
	// the bucket is not charged.
	e.clk.Add(1500 * time.Millisecond)
	if res := multi(3); res.Allowed || res.Denied != 1 || res.RetryAfter != 500*time.Millisecond {
		t.Fatalf("the quota short: %+v, want denied by request 1 until February (500ms)", res)
	}
	if res := e.check(t, keys[0], refs[0], 0); res.Remaining != 3 {
		t.Fatalf("bucket after the quota denied: %+v, want 3 remaining (uncharged)", res)
	}
	// At February's first µs the quota is fresh.
	e.clk.Add(500 * time.Millisecond)
	if res := multi(3); !res.Allowed || res.Results[1].Remaining != 2 {
		t.Fatalf("on February 1st: %+v", res)
	}
}

// testQuotaMultiReference: random multi-limit takes over a token bucket
// and two quotas match algo applied all-or-nothing.
func testQuotaMultiReference(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		keys := e.tagged(3)
		refs := []*ref{{p: genPolicy(t, "bucket ")}, {p: genQuota(t, "a ")}, {p: genQuota(t, "b ")}}
		e.clk.Set(genQuotaStart(t))
		for range rapid.IntRange(1, 20).Draw(t, "ops") {
			if rapid.Bool().Draw(t, "bucket step") {
				if e.clk.Add(genStep(t, refs[0].p)).UnixMicro() > algo.MaxTime {
					e.clk.Set(time.UnixMicro(algo.MaxTime))
				}
			} else {
				e.clk.Set(genQuotaStep(t, refs[rapid.IntRange(1, 2).Draw(t, "step of")].p, e.clk.Now()))
			}
			idx := rapid.SliceOfNDistinct(rapid.IntRange(0, 2), 1, 3, rapid.ID[int]).Draw(t, "keys")
			reqs := make([]store.Request, len(idx))
			for j, i := range idx {
				reqs[j] = store.Request{Key: keys[i], Policy: refs[i].p, Cost: genCost(t, refs[i].p)}
			}
			checkMulti(t, e, refs, idx, reqs)
		}
	})
}

// checkMulti makes the multi-limit take reqs (on keys idx of refs) on the
// store and on the reference, fails the test unless they agree, keeps the
// reference's states when it admits, and returns the store's answer.
func checkMulti(t tb, e *env, refs []*ref, idx []int, reqs []store.Request) store.MultiResult {
	t.Helper()
	want, states := expectMulti(t, e, refs, idx, reqs)
	got, err := e.s.TakeMulti(context.Background(), reqs)
	if err != nil {
		t.Fatalf("TakeMulti(%+v): %v", reqs, err)
	}
	if !sameMulti(got, want) {
		t.Fatalf("at %v: TakeMulti(%+v) =\n%+v\nwant\n%+v", e.clk.Now(), reqs, got, want)
	}
	if want.Allowed {
		for j, i := range idx {
			refs[i].s = states[j]
		}
	}
	return got
}
