package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/limitheader"
)

// Headers chooses which rate-limit header sets the middleware sends. Combine
// them with |. Retry-After is sent on every 429 and 503 whatever the choice.
type Headers uint8

const (
	// DefaultHeaders, the zero value, sends XRateLimitHeaders and
	// DraftHeaders.
	DefaultHeaders Headers = 0
	// XRateLimitHeaders sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, as GitHub-style clients expect: the capacity, the
	// whole tokens left, and the Unix time (seconds, rounded up) at which
	// the bucket is full again. With several limits they describe the one
	// closest to denying: the denying limit with the longest wait, or,
	// when admitted, the one with the fewest requests of the request's
	// cost left, and of those the longest until full again (see
	// Decision.Decider).
	XRateLimitHeaders Headers = 1 << 0
	// DraftHeaders sends RateLimit-Policy and RateLimit as defined by
	// draft-ietf-httpapi-ratelimit-headers-10, one list item per limit
	// (see [Decision]).
	DraftHeaders Headers = 1 << 1
	// ShadowHeaders adds the route's shadow limits (Limit.Shadow) to the
	// RateLimit-Policy and RateLimit fields, so clients can see a limit
	// coming before it is enforced; X-RateLimit-*, Retry-After and the
	// status never describe a shadow limit. Alone it means the default
	// sets plus shadows. Default: shadow limits are not sent.
	ShadowHeaders Headers = 1 << 2
	// NoHeaders sends neither set.
	NoHeaders Headers = 1 << 7
)

func (h Headers) has(set Headers) bool {
	if h&^ShadowHeaders == DefaultHeaders {
		h |= XRateLimitHeaders | DraftHeaders
	}
	return h&set != 0
}

// Decision is what the middleware decided for one request: one LimitResult
// per limit that applied, in the order of the limits.
type Decision struct {
	// Allowed reports whether every limit admitted the request.
	Allowed bool
	// Limits holds each limit's answer. When the request was denied by
	// a store that takes several limits atomically, nothing was charged,
	// and each Result shows its bucket as it stands: a limit that would
	// have admitted the request reports Allowed with the tokens it still
	// has. (Taken in order, see [Limit], the limits before the refusing
	// one were charged.)
	Limits []LimitResult
	// RetryAfter is the earliest the request could be admitted; zero
	// when Allowed.
	RetryAfter time.Duration
	// Decider is the index in Limits of the limit closest to denying,
	// which the X-RateLimit headers describe (and the Event's Limit
	// names): the denying limit with the longest RetryAfter (the earliest
	// the request could be admitted, which Retry-After reports), or when
	// Allowed the one that would admit the fewest more requests of this
	// one's cost (Remaining / cost, whole), and of those the one longest
	// until full again, so a daily quota with 4 left comes before a burst
	// limit with 4 left that refills in seconds.
	Decider int
	// Shadow holds the answers of the route's shadow limits
	// (Limit.Shadow), in the order of the limits, as a shadow
	// ratebucket.Limiter answers: Allowed, with a positive RetryAfter
	// when the limit would have refused. They took no part in Allowed,
	// RetryAfter or Decider. A shadow limit whose take failed is missing.
	Shadow []LimitResult
	// Concurrency is the store's answer to the route's [Concurrency]
	// limit (Limit 0 when it has none). When it refused the request, the
	// buckets were not asked: Limits is empty, no rate-limit header is
	// sent, RetryAfter is the lease's, and Violated names the limit.
	Concurrency algo.LeaseResult

	concName, concClass string // the Concurrency limit's name and key class
}

// LimitResult is one limit's part of a [Decision].
type LimitResult struct {
	Name   string      // the Limit's name, e.g. "burst"
	Tier   string      // the tier or plan a Resolve answered (its Name); "" for the Limit's Policy
	Class  string      // the key class, e.g. "ip"
	Policy algo.Policy // the policy applied
	Result algo.Result // the store's answer
}

// Violated returns the names of the limits that denied the request, for the
// problem type's "violated-policies" member.
func (d Decision) Violated() []string {
	var names []string
	if c := d.Concurrency; c.Limit > 0 && !c.Allowed {
		names = append(names, d.concName)
	}
	for _, l := range d.Limits {
		if !l.Result.Allowed {
			names = append(names, l.Name)
		}
	}
	return names
}

// retryAfterSeconds is Retry-After for a refusal: rounded up, and never 0,
// which clients read as "retry at once".
func retryAfterSeconds(d time.Duration) int64 { return limitheader.RetryAfterSeconds(d) }

// retryAfterMillis is the body's retry_after_ms: rounded up, at least 1.
func retryAfterMillis(d time.Duration) int64 {
	return max(1, int64((d+time.Millisecond-1)/time.Millisecond))
}

// writeHeaders sets the chosen rate-limit headers for d; now is the
// middleware's clock, for X-RateLimit-Reset. The values are
// internal/limitheader's, which grpclimit and rls send too, pinned by
// internal/testdata/ratelimit-headers.json.
//
// The draft fields follow draft-ietf-httpapi-ratelimit-headers-10
// (https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/10/),
// Structured Field Lists (RFC 9651) with one Item per policy, named by a
// String:
//
//	RateLimit-Policy: "burst";q=100;w=50, "daily";q=10000;w=86400
//	RateLimit: "burst";r=0;t=50, "daily";r=9876;t=11
//
// Every limit of the route is one item of each field, in the order of the
// limits (the draft's multiple quota policies); the X-RateLimit fields
// and Retry-After describe the one closest to denying (Decision.Decider).
// In RateLimit-Policy, q is the quota (the bucket's capacity, in requests
// of cost 1) and w the window in seconds. A token bucket has no fixed
// window; the nearest honest figure is its fill time, capacity/rate
// rounded up: the bucket admits at most q plus what refills, so q per w
// is the sustained rate. A calendar quota (algo.Quota) has one: w is its
// period that holds now, 86400 for a day, 604800 for a week, 2419200 to
// 2678400 for a month. In RateLimit, r is the remaining quota (whole
// tokens) and t the delay-seconds until the quota is fully available
// again (the bucket is full; a quota's period ends), rounded up. The draft's "qu" (quota unit)
// is omitted: its default, "requests", is what a cost of 1 means here.
//
// Shadow limits are listed after the enforced ones when set has
// ShadowHeaders; an all-shadow route sends no X-RateLimit fields.
func writeHeaders(h http.Header, set Headers, d Decision, now time.Time) {
	listed := d.Limits
	if set.has(ShadowHeaders) && len(d.Shadow) > 0 {
		listed = append(listed[:len(listed):len(listed)], d.Shadow...)
	}
	x, draft := set.has(XRateLimitHeaders) && len(d.Limits) > 0, set.has(DraftHeaders)
	if len(listed) == 0 || !x && !draft {
		return
	}
	// One backing array for the values and one string for all the
	// numbers: two allocations for five fields. The keys are in the
	// canonical form http.Header.Set would store them in.
	vals := make([]string, 0, 5)
	put := func(key, v string) {
		vals = append(vals, v)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	var buf [256]byte
	b := buf[:0]
	var cut [4]int // ends of the fields in b
	if x {
		l := d.Limits[d.Decider]
		r := l.Result
		b = strconv.AppendInt(b, l.Policy.Capacity(), 10)
		cut[0] = len(b)
		b = strconv.AppendInt(b, r.Remaining, 10)
		cut[1] = len(b)
		b = strconv.AppendInt(b, limitheader.ResetUnix(now, r.ResetAfter), 10)
	}
	cut[2] = len(b)
	if draft {
		for i, l := range listed {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = limitheader.AppendPolicy(b, l.Name, l.Policy.Capacity(), limitheader.Window(l.Policy, now))
		}
		cut[3] = len(b)
		for i, l := range listed {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = limitheader.AppendRateLimit(b, l.Name, l.Result.Remaining, l.Result.ResetAfter)
		}
	}
	all := string(b)
	if x {
		put("X-Ratelimit-Limit", all[:cut[0]])
		put("X-Ratelimit-Remaining", all[cut[0]:cut[1]])
		put("X-Ratelimit-Reset", all[cut[1]:cut[2]])
	}
	if draft {
		put("Ratelimit-Policy", all[cut[2]:cut[3]])
		put("Ratelimit", all[cut[3]:])
	}
}

// jsonDenied is the default Config.Denied (see there).
func jsonDenied(w http.ResponseWriter, r *http.Request, d Decision) {
	writeJSON(w, "application/json", http.StatusTooManyRequests, struct {
		Error        string `json:"error"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}{"rate_limited", retryAfterMillis(d.RetryAfter)})
}

// quotaExceededType is the problem type URI that
// draft-ietf-httpapi-ratelimit-headers-10 registers for a request refused
// because its quota is exhausted.
const quotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ProblemDenied is a Config.Denied writing an RFC 9457 problem details body
// (Content-Type application/problem+json) of the draft's quota-exceeded type,
// with the names of the limits that refused in "violated-policies" and the
// wait in retry_after_ms:
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Request cannot be satisfied as assigned quota has been exceeded",
//	 "status":429,"violated-policies":["burst"],"retry_after_ms":1234}
func ProblemDenied(w http.ResponseWriter, r *http.Request, d Decision) {
	writeJSON(w, "application/problem+json", http.StatusTooManyRequests, struct {
		Type         string   `json:"type"`
		Title        string   `json:"title"`
		Status       int      `json:"status"`
		Violated     []string `json:"violated-policies"`
		RetryAfterMS int64    `json:"retry_after_ms"`
	}{quotaExceededType, "Request cannot be satisfied as assigned quota has been exceeded",
		http.StatusTooManyRequests, d.Violated(), retryAfterMillis(d.RetryAfter)})
}

// writeJSON writes v as the whole response. The values written here are
// structs of strings and integers, which always encode.
func writeJSON(w http.ResponseWriter, contentType string, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
