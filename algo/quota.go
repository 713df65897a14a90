package algo

import (
	"fmt"
	"time"
)

// CalendarPeriod is the period of a calendar quota ([Quota]): a day, a
// week starting on Monday, or a month starting on the 1st, each beginning
// at midnight in UTC shifted by the quota's offset.
type CalendarPeriod uint8

// The calendar periods.
const (
	// Day is a calendar day: from midnight to midnight.
	Day CalendarPeriod = iota + 1
	// Week is a calendar week, from Monday's midnight (ISO 8601).
	Week
	// Month is a calendar month, from the 1st's midnight: 28 to 31 days,
	// February's 29th in leap years included.
	Month
)

// String returns "day", "week" or "month".
func (c CalendarPeriod) String() string {
	switch c {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("CalendarPeriod(%d)", uint8(c))
}

// Quota returns the Policy of a calendar quota: at most n tokens in each
// calendar period (a day, a week from Monday, a month from the 1st), whose
// count resets to zero at the period's first instant in UTC shifted by
// offset (for a customer's day: -5h is midnight in New York in winter;
// there is no daylight saving, the offset is fixed). So
//
//	algo.Quota(10_000, algo.Month, 0) // 10,000 a month, from the 1st, 00:00 UTC
//
// A quota is a Policy like a bucket's, and goes wherever one does: a
// store.Request, a ratebucket.Limiter, a multi-limit take beside a burst limit
// ("bursts of 100 at 2/s AND 10,000 a month", all charged or none) and
// every store's TokenBucket.Take, where it is decided by the quota's own
// math ([Policy.QuotaPeriod]): a request of cost c is admitted when the
// period's count plus c is at most n; a denial's RetryAfter is
// exactly the time until the next period starts; ResetAfter is the same
// while the period's count is above zero. TokenBucket.Refund gives back to
// the period's count, never below 0 (httplimit's ChargeIf). Its State is
// the count (Level) and the end of its period in µs (Stamp). A quota
// whose n, period or offset changes keeps its stored period until that
// period's end, its count read as at most the new n.
//
// The result may be invalid: [Policy.Validate] says why (an error wrapping
// [ErrInvalidQuota]), and every Take with it returns that error: call
// Validate to get it at once. The partial-grant and reservation
// operations of TokenBucket, and the window algorithms, return
// [ErrQuotaUnsupported] for a quota.
func Quota(n int64, period CalendarPeriod, offset time.Duration) Policy {
	code, reason := quotaCode(n, period, offset)
	if reason != 0 {
		code = reason << 2 // kind 0: invalid, with why
	}
	return mkPolicy(n, 0, -code)
}

// Reasons a quota is invalid, kept in an invalid quota's code.
const (
	badQuotaN = 1 + iota
	badQuotaPeriod
	badQuotaOffset
)

// quotaCode packs a quota's period and offset into one positive integer,
// kind + 4·(offset in s + 86399), or returns why it cannot. The wire
// carries it negated as the policy's refill (WIRE.md).
func quotaCode(n int64, period CalendarPeriod, offset time.Duration) (code, reason int64) {
	switch {
	case n < 1 || n > MaxCapacity:
		return 0, badQuotaN
	case period < Day || period > Month:
		return 0, badQuotaPeriod
	case offset <= -MaxQuotaOffset || offset >= MaxQuotaOffset || offset%time.Second != 0:
		return 0, badQuotaOffset
	}
	return int64(period) + 4*(int64(offset/time.Second)+86399), 0
}

// IsQuota reports whether p is a calendar quota (made by [Quota]), valid
// or not.
func (p Policy) IsQuota() bool {
	ps := p.shape()
	return ps.unit == 0 && ps.refill < 0
}

// Calendar returns a valid quota's period and offset from UTC; ok is false
// for anything else.
func (p Policy) Calendar() (period CalendarPeriod, offset time.Duration, ok bool) {
	kind, off := p.quota()
	if kind == 0 {
		return 0, 0, false
	}
	return CalendarPeriod(kind), time.Duration(off) * time.Second, true
}

// quota returns a valid quota's kind (1 day, 2 week, 3 month) and offset
// in seconds; kind 0 for anything else.
func (p Policy) quota() (kind, offset int64) {
	ps := p.shape()
	c := -ps.refill
	if ps.unit != 0 || c <= 0 || c&3 == 0 {
		return 0, 0
	}
	return c & 3, c>>2 - 86399
}

// notBucket returns what a token-bucket operation returns for a policy
// that is not a valid bucket (unit ≤ 0): ErrQuotaUnsupported for a valid
// quota, which TokenBucket's Take decides instead, else Validate's error.
func (p Policy) notBucket() error {
	if kind, _ := p.quota(); kind != 0 {
		return ErrQuotaUnsupported
	}
	return p.Validate()
}

// validateQuota is Validate for a quota.
func (p Policy) validateQuota() error {
	ps := p.shape()
	c := -ps.refill
	if c&3 != 0 {
		return nil
	}
	switch c >> 2 {
	case badQuotaN:
		return fmt.Errorf("%w: %d per period outside [1, %d]", ErrInvalidQuota, ps.capacity, int64(MaxCapacity))
	case badQuotaPeriod:
		return fmt.Errorf("%w: the period is not Day, Week or Month", ErrInvalidQuota)
	}
	return fmt.Errorf("%w: the offset is not a whole number of seconds strictly within ±%v", ErrInvalidQuota, MaxQuotaOffset)
}

// QuotaPeriod returns the calendar period of the quota p that contains
// now (µs since the Unix epoch, in [0, MaxTime]): its first µs, start, and
// the first µs of the next, end. start may be negative (the week or month
// around the epoch), end may pass MaxTime (the month around it). For
// anything but a valid quota, or a now out of range, it returns 0, 0.
//
// Its math, which the Lua twin repeats in doubles: boundaries are whole
// seconds, so the period of now is that of its second ts = ⌊now/10⁶⌋. The
// local day is dn = ⌊(ts + offset)/86400⌋ (days since 1970-01-01, a
// Thursday); a week starts on day dn − (dn+3) mod 7, a Monday; a month on
// the 1st of the civil date of dn (Howard Hinnant's civil_from_days), and
// lasts its month's days (29 in February of a leap year). A period from
// day a to day b is [a·86400 − offset, b·86400 − offset) seconds. Every
// intermediate is an integer below 2^34, and the ends (multiples of 10⁶
// below 2^54) are exact in doubles too.
func (p Policy) QuotaPeriod(now int64) (start, end int64) {
	kind, off := p.quota()
	if kind == 0 || now < 0 || now > MaxTime {
		return 0, 0
	}
	a, b := periodDays(kind, off, now)
	return (a*86400 - off) * 1e6, (b*86400 - off) * 1e6
}

// periodDays returns the first day of the period of kind that holds now,
// and the first of the next, in days since 1970-01-01 in the quota's
// calendar.
func periodDays(kind, off, now int64) (first, next int64) {
	dn := (now/1e6+off+86400)/86400 - 1 // ≥ -1: a floor for ts+off ≥ -86399
	switch kind {
	case 1:
		return dn, dn + 1
	case 2:
		first = dn - (dn+3)%7
		return first, first + 7
	}
	y, m, d := civilFromDays(dn)
	first = dn - d + 1
	return first, first + monthDays(y, m)
}

// civilFromDays returns the proleptic Gregorian date of day z since
// 1970-01-01, for z ≥ -719468 (Howard Hinnant, "chrono-Compatible Low-Level
// Date Algorithms").
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := z / 146097
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365], from March 1st
	mp := (5*doy + 2) / 153                                // [0, 11], March = 0
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

// monthDays returns the number of days of month m (1-12) of year y.
func monthDays(y, m int64) int64 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// maxQuotaEnd bounds a quota state's stamp: the end of the month that
// holds MaxTime, with the largest offset, is below it.
const maxQuotaEnd = MaxTime + 33*86400*1e6

// takeQuota is TokenBucket.TakeTo for a valid quota p.
//
// The state is (c, E): the count c charged in the period that ends at E
// (µs). A now before E is in that period (or, a stale clock, before it: it
// is decided in the stored period, as algo's windows decide a lagging
// clock, so it never opens an earlier one); from E on the count is 0 in
// the period of now. A count above n (the quota shrank) reads as n. Then a
// request of cost is admitted when c + cost ≤ n, and charged; RetryAfter
// is E − now (a new period admits any cost ≤ n), and ResetAfter is E − now
// while c > 0. A state with count 0 is returned as the zero State (with
// s.Prev): there is nothing to keep.
func takeQuota(res *Result, p Policy, s State, now, cost int64) (State, error) {
	c, end, err := rollQuota(p, s, now, cost)
	if err != nil {
		*res = Result{}
		return s, err
	}
	res.Allowed = c+cost <= p.shape().capacity
	res.RetryAfter = 0
	if res.Allowed {
		c += cost
	} else {
		res.RetryAfter = Micros(end - now)
	}
	return reportQuota(res, p, s, c, end, now), nil
}

// refundQuota is TokenBucket.RefundTo for a valid quota p: the count of
// the period that holds now (the stored one for a clock behind it) less n,
// never below 0. A period that has ended has nothing to give back.
func refundQuota(res *Result, p Policy, s State, now, n int64) (State, error) {
	c, end, err := rollQuota(p, s, now, n)
	if err != nil {
		*res = Result{}
		return s, err
	}
	res.Allowed, res.RetryAfter = true, 0
	return reportQuota(res, p, s, max(0, c-n), end, now), nil
}

// rollQuota checks a call's arguments (n is its cost) and returns the
// count of the quota in state s at now, and the end of its period: see
// takeQuota.
func rollQuota(p Policy, s State, now, n int64) (c, end int64, err error) {
	ps := p.shape()
	switch {
	case n < 0:
		return 0, 0, ErrInvalidCost
	case n > ps.capacity:
		return 0, 0, ErrCostExceedsCapacity
	case now < 0 || now > MaxTime:
		return 0, 0, ErrInvalidTime
	case s.Level < 0 || s.Prev < 0 || s.Stamp < 0 || s.Stamp > maxQuotaEnd:
		return 0, 0, ErrInvalidState
	}
	if now < s.Stamp {
		return min(s.Level, ps.capacity), s.Stamp, nil
	}
	kind, off := p.quota()
	_, b := periodDays(kind, off, now)
	return 0, (b*86400 - off) * 1e6, nil
}

// reportQuota writes the Result's Remaining and ResetAfter for
// count c in the period ending at end, and returns the state to keep.
func reportQuota(res *Result, p Policy, s State, c, end, now int64) State {
	res.Remaining = p.shape().capacity - c
	if c == 0 {
		res.ResetAfter = 0
		return State{Prev: s.Prev}
	}
	res.ResetAfter = Micros(end - now)
	return State{Level: c, Stamp: end, Prev: s.Prev}
}

// unchargedQuota is TokenBucket.Uncharged for a quota: the count had cost not
// been charged is n − Remaining − cost, and a count of 0 has no reset.
func unchargedQuota(p Policy, res Result, cost int64) Result {
	ps := p.shape()
	res.Remaining = min(ps.capacity, res.Remaining+cost)
	if res.Remaining == ps.capacity {
		res.ResetAfter = 0
	}
	return res
}
