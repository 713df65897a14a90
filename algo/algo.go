package algo

import (
	"math"
	"time"
)

// State is what a store keeps for one key. Its meaning depends on the
// [Algorithm] that produced it; stores treat it as opaque integers. The zero
// State is a key with no history (a full bucket, an empty window), so a
// store may forget any state for which the algorithm's IdleAt has passed.
type State struct {
	// Level is the token bucket's deficit below a full bucket, in
	// 1/Policy.Unit() tokens, or a window's (or a calendar quota's)
	// count of admitted cost.
	Level int64
	// Stamp is a time in µs since the Unix epoch: the token bucket's last
	// update, the start of the current window, or the end of a calendar
	// quota's period ([Quota]).
	Stamp int64
	// Prev is the sliding window's count in the previous window. The
	// token bucket does not read it and returns it unchanged from every
	// operation, so a store may keep a tag of its own there (memstore
	// keeps which policy the bucket was written under: see
	// [TokenBucket.Rebase]); the fixed window leaves it zero.
	Prev int64
}

// Result is the answer to one Take. It has four words and should keep to
// four: the compiler keeps a struct of at most four words (32 bytes) in
// registers, but builds a larger one in memory and copies it with 16-byte
// loads of what 8-byte stores have just written, which stall on store
// forwarding, in every caller of a store. A fifth word (the policy's
// capacity, as Limit) cost memstore's hot-key Take 6.8% (62.7 against
// 67.3 ns, p=0.002; bench/HISTORY.md, "One contract, before and after").
// The front door's ratebucket.Result adds the Limit, from the policy it
// called with.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Remaining is how many whole tokens are left after this request
	// (rounded down), between 0 and the policy's Capacity.
	Remaining int64
	// RetryAfter is zero when Allowed. When denied it is exact: the same
	// request made RetryAfter later, with no other traffic in between, is
	// admitted, and one made a microsecond earlier is not.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again (the window
	// resets) if nothing else is taken.
	ResetAfter time.Duration
}

// Algorithm is a rate-limiting rule over [State]. Implementations are pure
// functions: the same arguments give the same answer, and they never read a
// clock. now is in microseconds since the Unix epoch. A cost of 0 peeks: it
// is always allowed and charges nothing.
//
// Take returns the new state, which the store must keep, even when the
// request is denied (a denial changes nothing observable, but the new state
// may carry a later stamp). Take returns an error, and the unchanged state,
// for an invalid Policy ([ErrInvalidPolicy]), a negative cost
// ([ErrInvalidCost]), a cost above capacity ([ErrCostExceedsCapacity]), a
// time out of range ([ErrInvalidTime]) or a corrupt state
// ([ErrInvalidState]).
type Algorithm interface {
	Take(p Policy, s State, now, cost int64) (State, Result, error)
	// IdleAt returns the earliest time (µs) from which s behaves exactly
	// as the zero State under p: after it a store may drop the key.
	IdleAt(p Policy, s State) int64
	// Name returns a short lower-case name, such as "tokenbucket".
	Name() string
}

// checkTake validates the arguments every algorithm shares.
func checkTake(p Policy, s State, now, cost int64) error {
	ps := p.shape()
	switch {
	case ps.unit <= 0:
		return p.notBucket()
	case cost < 0:
		return ErrInvalidCost
	case cost > ps.capacity:
		return ErrCostExceedsCapacity
	case now < 0 || now > MaxTime:
		return ErrInvalidTime
	case s.Level < 0 || s.Prev < 0 || s.Stamp < 0 || s.Stamp > MaxTime:
		return ErrInvalidState
	}
	return nil
}

// maxMicros is the largest number of µs a Duration holds (about 292 years).
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// Micros converts µs to a Duration, saturating at the largest whole number
// of µs a Duration holds (about 292 years): a clock more than a century
// behind the stored state can produce a wait longer than a Duration holds.
// Every Result's durations are made by it, so a store that computes them
// elsewhere (redisstore's script) converts its µs with it too.
func Micros(us int64) time.Duration { return time.Duration(min(us, maxMicros)) * time.Microsecond }
