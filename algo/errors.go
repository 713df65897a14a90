package algo

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by this package. They are sentinel values: wrap them with
// %w and match them with [errors.Is].
var (
	// ErrInvalidPolicy reports a Policy outside the documented bounds, or
	// the zero Policy.
	ErrInvalidPolicy = errors.New("algo: invalid policy")
	// ErrInvalidCost reports a negative cost.
	ErrInvalidCost = errors.New("algo: invalid cost")
	// ErrCostExceedsCapacity reports a cost larger than the bucket's
	// capacity: such a request can never be admitted, so it is an error
	// rather than a denial with an infinite retry-after.
	ErrCostExceedsCapacity = errors.New("algo: cost exceeds capacity")
	// ErrInvalidTime reports a time outside [0, MaxTime].
	ErrInvalidTime = errors.New("algo: time out of range")
	// ErrInvalidState reports a State that no Take could have produced,
	// such as a negative stamp or count. Stores that read state from
	// outside the process (Redis) return it for garbage they find.
	ErrInvalidState = errors.New("algo: invalid state")
	// ErrInvalidQuota reports a quota outside its bounds: n outside
	// [1, MaxCapacity], an unknown CalendarPeriod, or an offset that is not a
	// whole number of seconds strictly within ±24h. It wraps ErrInvalidPolicy,
	// so errors.Is matches either.
	ErrInvalidQuota = fmt.Errorf("%w: bad quota", ErrInvalidPolicy)
	// ErrQuotaUnsupported reports an operation that a calendar quota does not
	// have: a quota is taken from (TokenBucket.Take, alone or in a multi-limit
	// take) and refunded (TokenBucket.Refund), not partly granted, reserved,
	// rebased or windowed.
	ErrQuotaUnsupported = fmt.Errorf("algo: not an operation of a calendar quota: %w", errors.ErrUnsupported)
	// ErrInvalidReservation reports a Reservation passed to
	// [TokenBucket.Cancel] that no Reserve under that policy could have
	// returned (negative units or time, or more units than two full buckets).
	ErrInvalidReservation = errors.New("algo: invalid reservation")
	// ErrInvalidHold reports a Hold passed to [TokenBucket.Settle] that no
	// Hold could have made (the zero Hold, a negative estimate or one above
	// the capacity, a deadline out of range), or a hold's TTL outside
	// [1µs, MaxHoldTTL].
	ErrInvalidHold = errors.New("algo: invalid hold")
	// ErrHoldPolicy reports a Settle under another policy than the one its
	// hold was made under: the estimate was charged in other tokens.
	ErrHoldPolicy = errors.New("algo: hold made under another policy")
	// ErrHoldExpired reports a Settle after the hold's deadline: the hold
	// has settled itself at its estimate, which stays charged.
	ErrHoldExpired = errors.New("algo: hold expired: settled at its estimate")
	// ErrHoldSettled reports a Settle of a hold that is not open on the
	// key: settled already, or never made there. Stores, which keep a
	// record of each open hold, return it; nothing is charged or given
	// back.
	ErrHoldSettled = errors.New("algo: hold already settled or unknown")
	// ErrInvalidLeasePolicy reports a LeasePolicy outside the documented
	// bounds (see [LeasePolicy.Validate]), or the zero LeasePolicy.
	ErrInvalidLeasePolicy = errors.New("algo: invalid lease policy")
	// ErrInvalidLeaseID reports an empty lease id, or one longer than
	// [MaxLeaseIDLen] bytes.
	ErrInvalidLeaseID = errors.New("algo: invalid lease id")
)

// Bounds enforced by [Policy.Validate], [TokenBucket.Take] and
// [LeasePolicy.Validate].
const (
	// MaxCapacity is the largest capacity a Policy may have. A burst
	// also needs capacity × (µs per token, in lowest terms) ≤ [MaxLevel]:
	// MaxCapacity itself needs at most 4503 µs per token in lowest terms
	// (PerSecond(1000) has 1000); at 1 per second the largest burst is
	// 4,503,599,627. Validate's error gives the largest at the rate.
	MaxCapacity = 1_000_000_000_000
	// MaxLevel bounds Capacity·Unit and Refill, so that every intermediate
	// of the token-bucket math stays below 2^53 (see tokenbucket.go).
	MaxLevel = 1 << 52
	// MaxTime is the largest time, in microseconds since the Unix epoch,
	// that Take accepts (2^53-1 µs, about the year 2255).
	MaxTime = 1<<53 - 1
	// MaxPeriod is the longest period a Rate may have.
	MaxPeriod = 366 * 24 * time.Hour
	// MaxPerSecond is the highest rate, in tokens per second.
	MaxPerSecond = 1_000_000_000
	// MaxQuotaOffset bounds the offset of a quota's calendar from UTC: it lies
	// strictly between -MaxQuotaOffset and MaxQuotaOffset.
	MaxQuotaOffset = 24 * time.Hour
	// MaxLeaseLimit is the largest Limit a LeasePolicy may have. A call
	// costs time linear in the key's live leases (see [LeasePolicy.Acquire]),
	// and a key holds at most Limit of them.
	MaxLeaseLimit = 1 << 16
	// MaxLeaseTTL is the longest TTL a LeasePolicy may have. The TTL is
	// how long a crashed holder keeps its slot; a holder that runs longer
	// renews its lease ([LeasePolicy.Renew]) instead.
	MaxLeaseTTL = 24 * time.Hour
	// MaxLeaseIDLen is the longest lease id, in bytes. It bounds a key's
	// memory with Limit: a 128-bit id in base32 (store.NewLeaseID) is 26
	// bytes, a UUID 36.
	MaxLeaseIDLen = 64
)
