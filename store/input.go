package store

import (
	"errors"

	"github.com/ratebucket/ratebucket/algo"
)

// IsInputError reports whether err is the caller's fault rather than the
// store's: the same call would fail again, whichever store answered it. It
// is the one test every entry point and wrapper uses (httplimit answers
// such a request 500 and never serves it by its FailMode; grpclimit and the
// rls server answer Internal, never by a fail mode, and rls does not count
// it as a store outage; hybrid's wrappers return it as it is and never
// count it against the primary's health).
//
// Input errors are: an empty or too long key ([ErrEmptyKey],
// [ErrKeyTooLong]); a bad policy, cost, time or state (algo.ErrInvalidPolicy,
// algo.ErrInvalidCost, algo.ErrCostExceedsCapacity, algo.ErrInvalidTime,
// algo.ErrInvalidState); keys the store cannot take together or a key
// named twice ([ErrNotTogether], [ErrDuplicateKey]); a key that holds
// something that is not a bucket ([ErrCorruptState], until the key is
// reset); an operation the policy kind or the store's
// algorithm cannot do ([ErrUnsupported], algo.ErrQuotaUnsupported); a
// reservation ticket no store made (algo.ErrInvalidReservation); a hold
// that cannot be settled (algo.ErrInvalidHold, algo.ErrHoldPolicy,
// algo.ErrHoldExpired, algo.ErrHoldSettled); and a bad
// lease policy or id (algo.ErrInvalidLeasePolicy, algo.ErrInvalidLeaseID).
// A closed store ([ErrClosed]) is not one: it cannot decide, as a store
// that is down cannot.
func IsInputError(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range inputErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

var inputErrors = [...]error{
	ErrEmptyKey, ErrKeyTooLong, ErrCorruptState, ErrNotTogether, ErrDuplicateKey, ErrUnsupported,
	algo.ErrInvalidPolicy, algo.ErrInvalidCost, algo.ErrCostExceedsCapacity, algo.ErrInvalidTime,
	algo.ErrInvalidState, algo.ErrQuotaUnsupported, algo.ErrInvalidReservation, algo.ErrInvalidLeasePolicy,
	algo.ErrInvalidLeaseID, algo.ErrInvalidHold, algo.ErrHoldPolicy, algo.ErrHoldExpired, algo.ErrHoldSettled,
}
