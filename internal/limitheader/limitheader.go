// Package limitheader is the one definition of the rate-limit header
// values every Go front end sends: httplimit as HTTP headers, grpclimit as
// gRPC response metadata, rls as the headers Envoy adds to the client's
// response. internal/testdata/ratelimit-headers.json pins them; each front
// end runs its cases through its own header-writing code.
//
// Each field describes one limit, from the clock and the store's answer:
//
//   - X-RateLimit-Limit: the bucket's capacity.
//   - X-RateLimit-Remaining: the whole tokens left.
//   - X-RateLimit-Reset: the Unix time in seconds, rounded up, at which the
//     bucket is full again (GitHub's meaning).
//   - RateLimit: draft-ietf-httpapi-ratelimit-headers' `"name";r=R;t=T`, R
//     the whole tokens left, T the delay-seconds, rounded up, until the
//     bucket is full again.
//   - Retry-After: delay-seconds, rounded up and never 0, until a denied
//     request could be admitted; sent only on a denial.
//
// gRPC metadata and Envoy headers use the same names in lower case, the
// constants here; HTTP/1 spells them as http.CanonicalHeaderKey does.
package limitheader

import (
	"strconv"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// The field names, in lower case as gRPC metadata and Envoy's header
// mutations carry them.
const (
	Limit      = "x-ratelimit-limit"     // the capacity
	Remaining  = "x-ratelimit-remaining" // whole tokens left
	Reset      = "x-ratelimit-reset"     // Unix seconds, rounded up, when full again
	Policy     = "ratelimit-policy"      // draft: "name";q=capacity;w=window seconds
	RateLimit  = "ratelimit"             // draft: "name";r=remaining;t=delay-seconds until full
	RetryAfter = "retry-after"           // delay-seconds until a denied request could pass, at least 1
)

// DelaySeconds rounds d up to whole seconds, 0 for d <= 0: a client told
// to wait that long is never early. RateLimit's t is DelaySeconds of the
// time until the bucket is full.
func DelaySeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfterSeconds is Retry-After for a denial that could pass after d:
// DelaySeconds, and never 0, which clients read as "retry at once".
func RetryAfterSeconds(d time.Duration) int64 { return max(1, DelaySeconds(d)) }

// ResetUnix is X-RateLimit-Reset: the Unix time in seconds, rounded up, of
// now plus resetAfter, when the bucket is full again.
func ResetUnix(now time.Time, resetAfter time.Duration) int64 {
	at := now.Add(max(0, resetAfter))
	s := at.Unix()
	if at.Nanosecond() > 0 {
		s++
	}
	return s
}

// AppendName appends name as a Structured Field String (RFC 9651): quoted,
// with '"' and '\' escaped; a byte outside printable ASCII, which a String
// cannot hold, becomes '?'.
func AppendName(b []byte, name string) []byte {
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// AppendRateLimit appends one item of the draft's RateLimit field,
// `"name";r=remaining;t=DelaySeconds(resetAfter)`.
func AppendRateLimit(b []byte, name string, remaining int64, resetAfter time.Duration) []byte {
	b = strconv.AppendInt(append(AppendName(b, name), ";r="...), remaining, 10)
	return strconv.AppendInt(append(b, ";t="...), DelaySeconds(resetAfter), 10)
}

// Window is the draft's w for p at now, in whole seconds, at least 1: a
// bucket's fill time, rounded up (a token bucket has no fixed window; the
// bucket admits at most its capacity plus what refills, so capacity per
// fill time is its sustained rate); a calendar quota's period that holds
// now (86400 for a day, 604800 for a week, the month's days in seconds).
func Window(p algo.Policy, now time.Time) int64 {
	if _, _, ok := p.Calendar(); ok {
		start, end := p.QuotaPeriod(now.UnixMicro())
		return max(1, (end-start)/1e6)
	}
	return max(1, DelaySeconds(p.FillTime()))
}

// AppendPolicy appends one item of the draft's RateLimit-Policy field,
// `"name";q=quota;w=window`, window in seconds (see [Window]).
func AppendPolicy(b []byte, name string, quota, window int64) []byte {
	b = strconv.AppendInt(append(AppendName(b, name), ";q="...), quota, 10)
	return strconv.AppendInt(append(b, ";w="...), window, 10)
}

// Fields are one limit's header values, as strings.
type Fields struct {
	// Limit, Remaining, Reset and RateLimit are X-RateLimit-Limit,
	// X-RateLimit-Remaining, X-RateLimit-Reset and RateLimit.
	Limit, Remaining, Reset, RateLimit string
	// RetryAfter is empty unless the request was denied.
	RetryAfter string
}

// Answer is what the fields describe: one limit and the store's answer
// about it.
type Answer struct {
	Name       string        // the limit's name, RateLimit's item name
	Capacity   int64         // the bucket's capacity
	Remaining  int64         // whole tokens left
	ResetAfter time.Duration // until the bucket is full again
	RetryAfter time.Duration // until a denied request could be admitted
	Denied     bool          // the request was refused: Retry-After is sent
}

// Render returns a's fields at now. httplimit, which writes every field
// into one buffer, uses the Append functions and ResetUnix instead; the
// values are the same.
func Render(now time.Time, a Answer) Fields {
	f := Fields{
		Limit:     strconv.FormatInt(a.Capacity, 10),
		Remaining: strconv.FormatInt(a.Remaining, 10),
		Reset:     strconv.FormatInt(ResetUnix(now, a.ResetAfter), 10),
		RateLimit: string(AppendRateLimit(make([]byte, 0, len(a.Name)+32), a.Name, a.Remaining, a.ResetAfter)),
	}
	if a.Denied {
		f.RetryAfter = strconv.FormatInt(RetryAfterSeconds(a.RetryAfter), 10)
	}
	return f
}
