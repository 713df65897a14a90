package algo

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// LeasePolicy is the shape of a concurrency limit: at most Limit leases of
// a key are live at once, and a lease expires TTL after it was acquired or
// last renewed, so that a holder that crashes without releasing frees its
// slot after at most TTL.
//
//	algo.LeasePolicy{Limit: 10, TTL: 30 * time.Second} // 10 in flight
//
// It is valid when 1 ≤ Limit ≤ [MaxLeaseLimit] and TTL is a whole number of
// microseconds in [1µs, [MaxLeaseTTL]]. The zero value is invalid: every
// call with it returns [ErrInvalidLeasePolicy]. LeasePolicy is a small
// comparable value; copy it freely.
type LeasePolicy struct {
	// Limit is the most leases a key may hold at once.
	Limit int64
	// TTL is how long a lease lives unless released or renewed.
	TTL time.Duration
}

// Validate reports whether p is within the documented bounds. The error
// wraps [ErrInvalidLeasePolicy] and says which bound failed.
func (p LeasePolicy) Validate() error {
	switch {
	case p.Limit < 1 || p.Limit > MaxLeaseLimit:
		return fmt.Errorf("%w: limit %d outside [1, %d]", ErrInvalidLeasePolicy, p.Limit, MaxLeaseLimit)
	case p.TTL < time.Microsecond || p.TTL > MaxLeaseTTL:
		return fmt.Errorf("%w: ttl %v outside [1µs, %v]", ErrInvalidLeasePolicy, p.TTL, MaxLeaseTTL)
	case p.TTL%time.Microsecond != 0:
		return fmt.Errorf("%w: ttl %v is not a whole number of microseconds", ErrInvalidLeasePolicy, p.TTL)
	}
	return nil
}

// String formats p as "10 in flight, ttl 30s".
func (p LeasePolicy) String() string { return fmt.Sprintf("%d in flight, ttl %v", p.Limit, p.TTL) }

// Lease is one held slot: the holder's id and the time (µs since the Unix
// epoch) at which the lease expires unless renewed.
type Lease struct {
	// ID names the holder: 1 to MaxLeaseIDLen bytes, unique per key.
	ID string
	// Expiry is when the lease ends unless renewed, in µs since the Unix
	// epoch: its acquire's or last renewal's now plus the TTL.
	Expiry int64
}

// Leases is what a store keeps for one concurrency key: its leases, ordered
// by Expiry and then by ID (byte-wise, as Redis orders a sorted set's
// members of equal score). The empty (nil) Leases is a key with no leases.
// Only the functions of this package should change one; a Leases they did
// not produce may be refused with [ErrInvalidState].
//
// Those functions consume their Leases argument: like append, they may
// reuse its backing array for the result, so keep only the Leases they
// return, and clone one (slices.Clone) to keep the old state too.
type Leases []Lease

// IdleAt returns the time (µs) from which s behaves exactly as the empty
// Leases, the expiry of its last lease (0 for none): from then on a store
// may drop the key.
func (s Leases) IdleAt() int64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Expiry
}

// Live returns how many leases of s are live at now: those whose Expiry is
// after now.
func (s Leases) Live(now int64) int {
	i, _ := slices.BinarySearchFunc(s, now, func(l Lease, now int64) int {
		if l.Expiry <= now {
			return -1
		}
		return 1
	})
	return len(s) - i
}

// LeaseResult is the answer to one [LeasePolicy.Acquire].
type LeaseResult struct {
	// Allowed reports whether the lease is held: a new lease was admitted,
	// or the id already held a live one and it was renewed.
	Allowed bool
	// Limit is the policy's Limit.
	Limit int64
	// Remaining is how many more leases the key admits now: Limit minus
	// its live leases (this one included when Allowed), never below 0.
	Remaining int64
	// RetryAfter is zero when Allowed. When denied it is the time until
	// enough of the key's live leases expire for an acquire to be
	// admitted: exact if no lease is released or renewed meanwhile (an
	// acquire RetryAfter later is admitted, one a microsecond earlier is
	// not), and so an upper bound, since a holder may release sooner.
	RetryAfter time.Duration
}

// CheckLeaseID returns nil for an id the lease functions accept, and an
// error wrapping [ErrInvalidLeaseID] for an empty one or one longer than
// [MaxLeaseIDLen] bytes.
func CheckLeaseID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidLeaseID)
	case len(id) > MaxLeaseIDLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidLeaseID, len(id), MaxLeaseIDLen)
	}
	return nil
}

// Acquire asks for a lease with the given id on the key in state s at
// time now (µs), under policy p. It returns the new state, which the store
// must keep whether or not the lease was admitted, and the decision.
//
// With E the expiry and ⟨E, id⟩ the order of s:
//
//  1. Drop the expired leases: those with E ≤ now.
//  2. If id holds one of the rest, it is renewed: its expiry becomes
//     now + TTL, and the call is admitted without taking another slot
//     (so a caller that retries an acquire whose answer it lost holds one
//     lease, not two).
//  3. Else, if fewer than Limit leases remain, add ⟨now + TTL, id⟩:
//     admitted.
//  4. Else denied, with RetryAfter = s[n−Limit].E − now, n the number of
//     leases left after step 1 (0-based: the earliest lease when n =
//     Limit).
//
// So a key never holds more than Limit leases, and a lease frees its slot
// at its expiry: an acquire at E−1µs on a full key is denied, one at E is
// admitted. The state is a set of ⟨expiry, id⟩ pairs, a Redis sorted set
// scored by expiry: step 1 is ZREMRANGEBYSCORE −inf now, step 2 ZSCORE and
// ZADD, step 4 ZRANGE n−Limit. Every number is an integer below 2^53:
// now + TTL ≤ [MaxTime], which the call checks.
//
// The call costs time linear in the key's leases (one scan; inserting keeps
// the order) and allocates only when the state grows past its capacity.
// It returns an error, and s unchanged, for an invalid policy
// ([ErrInvalidLeasePolicy]), id ([ErrInvalidLeaseID]) or time
// ([ErrInvalidTime]: now outside [0, MaxTime − TTL]), or a state these
// functions did not produce ([ErrInvalidState]).
func (p LeasePolicy) Acquire(s Leases, now int64, id string) (Leases, LeaseResult, error) {
	if err := checkLease(p, now, id); err != nil {
		return s, LeaseResult{}, err
	}
	s, at, err := dropExpired(s, now, id)
	if err != nil {
		return s, LeaseResult{}, err
	}
	res := LeaseResult{Limit: p.Limit}
	n := int64(len(s))
	switch {
	case at >= 0:
		s = renew(s, at, now+p.TTL.Microseconds())
		res.Allowed = true
	case n < p.Limit:
		s = insert(s, Lease{ID: id, Expiry: now + p.TTL.Microseconds()})
		res.Allowed = true
		n++
	default:
		// At most MaxTime µs, which a Duration holds: no saturation.
		res.RetryAfter = time.Duration(s[n-p.Limit].Expiry-now) * time.Microsecond
	}
	res.Remaining = max(p.Limit-n, 0)
	return s, res, nil
}

// Release gives back the lease with the given id on the key in state s
// at time now (µs). It drops the leases expired at now (step 1 of
// [LeasePolicy.Acquire]), then removes id's lease if it is among the rest, and
// reports whether it was. Releasing an id that holds no live lease (never
// acquired, already released, or expired) changes nothing else and reports
// false: it is not an error. The error, with s unchanged, is for an invalid
// id ([ErrInvalidLeaseID]), a time outside [0, [MaxTime]]
// ([ErrInvalidTime]) or an invalid state ([ErrInvalidState]).
func (s Leases) Release(now int64, id string) (Leases, bool, error) {
	if err := checkIDTime(id, now, MaxTime); err != nil {
		return s, false, err
	}
	s, at, err := dropExpired(s, now, id)
	if err != nil || at < 0 {
		return s, false, err
	}
	return slices.Delete(s, at, at+1), true, nil
}

// Renew extends the lease with the given id on the key in state s at
// time now (µs) under policy p: it drops the leases expired at now (step 1
// of [LeasePolicy.Acquire]), then, if id holds one of the rest, sets its expiry
// to now + TTL and reports true. A lease that has expired is not renewed
// (its slot may be someone else's by now): the call reports false and the
// holder must acquire again. Renewing is what a long-running holder does,
// every fraction of a TTL, to keep a short TTL (fast recovery from a
// crash) without losing its slot. Errors are those of [LeasePolicy.Acquire].
func (p LeasePolicy) Renew(s Leases, now int64, id string) (Leases, bool, error) {
	if err := checkLease(p, now, id); err != nil {
		return s, false, err
	}
	s, at, err := dropExpired(s, now, id)
	if err != nil || at < 0 {
		return s, false, err
	}
	return renew(s, at, now+p.TTL.Microseconds()), true, nil
}

// checkLease validates the arguments of Acquire and Renew.
func checkLease(p LeasePolicy, now int64, id string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return checkIDTime(id, now, MaxTime-p.TTL.Microseconds())
}

// checkIDTime validates a lease id and a time now in [0, latest].
func checkIDTime(id string, now, latest int64) error {
	if err := CheckLeaseID(id); err != nil {
		return err
	}
	if now < 0 || now > latest {
		return fmt.Errorf("%w: %d µs, outside [0, %d]", ErrInvalidTime, now, latest)
	}
	return nil
}

// dropExpired checks that s is ordered with valid entries, then removes
// the leases expired at now (a prefix) and returns the index of id's lease
// among the rest, or -1. On error s is returned unchanged.
func dropExpired(s Leases, now int64, id string) (Leases, int, error) {
	expired, at := 0, -1
	var prev Lease // expiry 0: a negative one is out of order
	for i, l := range s {
		if l.ID == "" || len(l.ID) > MaxLeaseIDLen || l.Expiry > MaxTime ||
			l.Expiry < prev.Expiry || l.Expiry == prev.Expiry && l.ID <= prev.ID {
			return s, -1, fmt.Errorf("%w: lease %d of %d (%+v) out of order or out of range", ErrInvalidState, i, len(s), l)
		}
		switch {
		case l.Expiry <= now:
			expired = i + 1
		case len(l.ID) == len(id) && l.ID[0] == id[0] && l.ID == id: // the first byte is a cheap filter
			at = i
		}
		prev = l
	}
	if at >= 0 {
		at -= expired
	}
	return slices.Delete(s, 0, expired), at, nil
}

// renew moves the lease at index i to its new expiry, keeping the order.
func renew(s Leases, i int, expiry int64) Leases {
	l := s[i]
	l.Expiry = expiry
	return insert(slices.Delete(s, i, i+1), l)
}

// insert adds l, whose id s does not hold, in order.
func insert(s Leases, l Lease) Leases {
	i := len(s) // usually last: the latest expiry
	if i > 0 && compareLeases(s[i-1], l) > 0 {
		i, _ = slices.BinarySearchFunc(s, l, compareLeases)
	}
	return slices.Insert(s, i, l)
}

// compareLeases orders leases by expiry, then id.
func compareLeases(a, b Lease) int {
	if c := cmp.Compare(a.Expiry, b.Expiry); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}
