// Package store is the contract between ratebucket's front door and its
// backends.
//
// A [Store] keeps bucket state for many keys and applies the token-bucket
// math of package algo to them atomically: a take, several takes at once,
// a take of at most n, a refund, a reservation and its cancellation, and
// concurrency leases. Backends implement it (memstore in process,
// redisstore across a fleet), and so do the wrappers around any of them
// (hybrid's); everything above (ratebucket.Limiter, httplimit, sim) talks
// to this interface only, and store/storetest proves every backend
// against algo.
//
// Besides the interface, the package holds what every store shares: a
// call's [Request], the sentinel errors and the one test of an input
// error ([IsInputError]), the checks every store makes before it decides
// ([CheckRequest], [CheckRequests], [CheckLease]), and [GroupKey], which
// makes keys that a multi-limit take can always take together. It imports
// package algo and nothing else of ratebucket's.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// Store applies requests to buckets. Every backend implements every
// operation: memstore in process, redisstore on Redis, and the wrappers of
// hybrid and observe around either. Implementations are safe for
// simultaneous use by multiple goroutines.
//
// Each method returns an error only when nothing was decided or changed:
// bad input ([IsInputError]: [ErrEmptyKey], [ErrKeyTooLong],
// algo.ErrInvalidPolicy, algo.ErrInvalidCost, algo.ErrCostExceedsCapacity,
// see [CheckRequest]), an operation the request's policy kind cannot do
// (algo.ErrQuotaUnsupported, the same on every store, or [ErrUnsupported]
// under a store configured with a window algorithm), a closed store
// ([ErrClosed]), a context that ended, or a backend failure (wrapping the
// backend's error). A denial is not an error: it is a Result with Allowed
// false.
//
// A key's policy may change between calls (a tenant's plan changes): the
// first call under the new policy converts the bucket exactly, by
// algo.TokenBucket.Rebase under the store's rule (keep the tokens, by
// default, or keep the fraction of a full bucket). Keys that are different
// limits (a burst limit and a quota of one client) must still be different
// keys: a prefix is the usual way to keep them apart.
//
// The math of each operation is algo.TokenBucket's (Take, Refund,
// TakeAtMost, Reserve, Cancel, Hold, Settle): read those for the exact rules; storetest
// proves every store against them.
type Store interface {
	// Take applies r.Cost tokens to the bucket at r.Key under r.Policy,
	// atomically, and returns the decision. A cost of 0 peeks.
	Take(ctx context.Context, r Request) (algo.Result, error)
	// TakeMulti takes from several buckets atomically: all admit and all
	// are charged, or none is charged. Bad input anywhere, or a key named
	// twice ([ErrDuplicateKey]), is an error and charges nothing; a store
	// that spreads keys over servers takes together only keys of one
	// group ([GroupKey], else [ErrNotTogether]).
	TakeMulti(ctx context.Context, rs []Request) (MultiResult, error)
	// TakeAtMost takes as many whole tokens as the bucket holds, up to
	// r.Cost, atomically, and returns how many it granted: for batch
	// consumers that take what they may. Granting g > 0 is exactly an
	// admitted Take of g; granting 0 for r.Cost > 0 charges nothing and is
	// exactly a denied Take of 1 (Allowed false, RetryAfter the exact wait
	// for one token). A cost of 0 peeks; r.Cost may exceed the capacity
	// (the grant never does).
	TakeAtMost(ctx context.Context, r Request) (granted int64, res algo.Result, err error)
	// Refund gives r.Cost tokens back to the bucket, atomically: its
	// deficit, refilled to now, is lowered by r.Cost tokens but never
	// below zero, so a refund cannot raise a bucket above its capacity. A
	// refund made at once after an admitted Take of n leaves the bucket
	// as it was; a refund of 0, or to a full bucket, writes nothing. The
	// Result describes the bucket after: Allowed true, RetryAfter zero.
	Refund(ctx context.Context, r Request) (algo.Result, error)
	// RefundMulti refunds every request atomically, with one Result per
	// request, in order. Bad input anywhere (as for Refund, or a key
	// named twice) is an error and refunds nothing.
	RefundMulti(ctx context.Context, rs []Request) ([]algo.Result, error)
	// Reserve takes r.Cost tokens atomically, even before they exist,
	// provided they exist within maxWait (rounded down to the µs; at
	// most r.Policy.MaxDelay() counts, a negative one is 0): see
	// algo.TokenBucket.Reserve. Admitted: the request may proceed after
	// Delay, and the bucket is in debt until then, so reservations on a
	// key are served in the order they were made. Refused: nothing is
	// charged and RetryAfter is exact for the same reservation.
	Reserve(ctx context.Context, r Request, maxWait time.Duration) (algo.Reservation, error)
	// CancelReservation gives back the tokens of a reservation made on
	// key under p, given its Ticket, before its time At: exactly, when it
	// is the last in line on its key, otherwise not at all (see
	// algo.TokenBucket.Cancel). It reports whether it gave them back,
	// with the bucket's Result after. At or after At, and for the zero
	// Ticket, it changes nothing; a ticket no Reserve under p could have
	// returned is algo.ErrInvalidReservation.
	CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error)
	// Hold takes r.Cost tokens now as the estimate of a cost known only
	// after the work (LLM tokens, bytes, rows), atomically, and keeps a
	// record of the open hold until Settle closes it or its deadline (ttl
	// from the bucket's time; whole µs, in [1µs, algo.MaxHoldTTL], else
	// algo.ErrInvalidHold) passes: see algo.TokenBucket.Hold. It is
	// admitted exactly when a Take of r.Cost would be (a hold of 0: when
	// the bucket is not in debt), with a Hold whose ID names the record.
	// Refused: nothing is charged, the Hold is zero and RetryAfter exact.
	// A hold left open past its deadline has settled at its estimate: the
	// record is forgotten and the estimate stays charged.
	Hold(ctx context.Context, r Request, ttl time.Duration) (algo.Hold, algo.Result, error)
	// Settle closes the open hold h on key, made under p, at the actual
	// cost, atomically: the difference from the estimate is given back as
	// by Refund, or the extra charged even into debt, at most one full
	// bucket of it (Settlement.Uncharged reports the rest): see
	// algo.TokenBucket.Settle. Errors, with nothing charged or given back:
	// algo.ErrHoldSettled for a hold not open on key (settled already, or
	// never made there), algo.ErrHoldExpired past its deadline,
	// algo.ErrHoldPolicy under another policy, algo.ErrInvalidHold for a
	// hold no Hold made, algo.ErrInvalidCost for an actual cost outside
	// [0, algo.MaxCapacity].
	Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error)
	// AcquireLease asks for a concurrency lease (at most p.Limit in
	// flight per key) with the given id on key, at the store's now,
	// after dropping the leases expired by then. Allowed reports whether
	// id now holds a live lease: a new one, or its existing one renewed
	// (so a retry after a lost answer holds one lease, not two). When
	// denied, RetryAfter is the time until enough leases expire: an upper
	// bound, since a holder may release sooner. Lease keys are a
	// namespace apart from buckets. Ids are the caller's ([NewLeaseID]).
	AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error)
	// ReleaseLease frees id's lease on key and reports whether it was
	// live; releasing one that is not changes nothing.
	ReleaseLease(ctx context.Context, key, id string) (released bool, err error)
	// RenewLease extends id's live lease on key to expire p.TTL from now,
	// and reports whether it was live; an expired lease is not renewed.
	RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (renewed bool, err error)
	// Close releases the store's resources; calls after it fail with
	// [ErrClosed]. A store that wraps another (hybrid's) leaves the one
	// it wraps open: its owner closes it.
	Close() error
}

// Request is one call's bucket: its key, its policy, and the tokens asked
// (a take's cost, a refund's or a partial grant's n).
//
// It is five words (an algo.Policy is one): with a method's receiver and
// its context it travels in the nine integer registers of Go's calling
// convention. Keep it there: at seven words (a three-word Policy) it went
// on the stack, built with 8-byte stores and copied with 16-byte loads
// that stall on store forwarding, and a hot-key Take on memstore measured
// 8% (admitted) and 18% (denied) slower (bench/HISTORY.md, "One
// contract, before and after").
type Request struct {
	Key    string
	Policy algo.Policy
	Cost   int64
	// Refundable marks a charge that may be given back later, perhaps by
	// another process: a take whose tokens a refund may return
	// (httplimit's ChargeIf), a reservation that may be cancelled
	// (httplimit's Delay). Stores decide such a request as any other; a
	// store that answers from what it learnt of earlier answers
	// (hybrid.DenyCache) neither answers it locally nor learns from it,
	// since tokens given back by another process are tokens it cannot
	// see. Mark every request on a key whose tokens any process may give
	// back.
	Refundable bool
}

// MultiResult is the answer to a multi-limit take.
type MultiResult struct {
	// Allowed reports whether every bucket admitted the request; only
	// then is any bucket charged.
	Allowed bool
	// Results holds one Result per Request, in order. When Allowed, each
	// reflects the charge; when denied, nothing was charged and each is
	// what that bucket alone would have answered.
	Results []algo.Result
	// Denied is the index of the request that denied with the longest
	// retry-after, or -1 when Allowed.
	Denied int
	// RetryAfter is the longest retry-after among the denying buckets:
	// the earliest the whole request could be admitted. Zero when Allowed.
	RetryAfter time.Duration
}

// Clock is the narrowest clock a store needs. A
// github.com/benbjohnson/clock Clock satisfies it, so users pass clock.New()
// or clock.NewMock().
type Clock interface {
	Now() time.Time
}

// Errors shared by all stores. Match them with errors.Is; backends wrap them
// with detail.
var (
	// ErrEmptyKey reports an empty key: an empty key would put every
	// caller in one shared bucket, so it is refused.
	ErrEmptyKey = errors.New("store: empty key")
	// ErrClosed reports a call on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrCorruptState reports a stored value that is not a bucket
	// (wrong type, or garbage written by someone else). A store may
	// repair such a key (redisstore does by default, as an empty bucket)
	// and report the repair with an error matching this one; a store that
	// keeps it returns this error until the key is reset (deleted).
	ErrCorruptState = errors.New("store: corrupt bucket state")
	// ErrNotTogether reports a multi-limit take whose buckets the store
	// cannot take in one atomic step: a store that spreads keys over
	// several servers keeps only the keys of one group together. Make the
	// keys with [GroupKey] and one group, or take the buckets one at a
	// time.
	ErrNotTogether = errors.New("store: keys cannot be taken together")
)

// ErrDuplicateKey reports a multi-limit take or refund that names the same
// key twice: every store refuses it, charging nothing.
var ErrDuplicateKey = errors.New("store: duplicate key in a multi-limit take")
