package store

import (
	"context"
	"errors"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// The optional interfaces of the operations around a take: give tokens
// back, take what there is, reserve ahead. A store implements those it
// can, as it implements MultiTaker; storetest proves each for every store
// that has it, and a Limiter over a store without one returns
// ErrUnsupported. Their math is algo.TokenBucket's (Refund, TakeAtMost,
// Reserve, Cancel): read those for the exact rules.

// ErrUnsupported reports an operation the Store does not implement (see
// [Refunder], [AtMostTaker], [Reserver]), or not under the algorithm it
// was configured with. Nothing was charged.
var ErrUnsupported = errors.New("store: operation not supported by this store")

// Refunder is implemented by stores that can give tokens back to a
// bucket: for requests that should not count after all (a failed upload,
// a successful login when only failures are limited).
type Refunder interface {
	// Refund gives n tokens back to the bucket at key under policy p,
	// atomically: the bucket's deficit, refilled to now, is lowered by n
	// tokens but never below zero, so a refund cannot raise a bucket
	// above its capacity. A refund made at once after an admitted Take of
	// n leaves the bucket as it was. A refund of 0, or to a bucket the
	// store does not hold (a full one), changes nothing and writes
	// nothing.
	//
	// The Result describes the bucket after the refund: Allowed true,
	// RetryAfter zero, Remaining and ResetAfter as after a Take. The
	// errors are Take's: bad input (ErrEmptyKey, ErrKeyTooLong,
	// algo.ErrInvalidPolicy, algo.ErrInvalidCost for n < 0,
	// algo.ErrCostExceedsCapacity for n above capacity: see
	// [CheckRequest]), ErrClosed, the context's, or a backend failure;
	// none of them gives anything back.
	Refund(ctx context.Context, key string, p algo.Policy, n int64) (algo.Result, error)
	// RefundMulti refunds every request (Request.Cost tokens to
	// Request.Key under Request.Policy) atomically, with one Result per
	// request, in order. Bad input anywhere (as for Refund, or a key
	// named twice: ErrDuplicateKey) is an error and refunds nothing.
	RefundMulti(ctx context.Context, reqs []Request) ([]algo.Result, error)
}

// AtMostTaker is implemented by stores that can grant part of a request:
// for batch consumers that take what they may (redis_rate's AllowAtMost).
type AtMostTaker interface {
	// TakeAtMost takes as many whole tokens as the bucket at key under p
	// holds, up to n, atomically, and returns how many it granted.
	// Granting g > 0 is exactly an admitted Take of g (same Result, same
	// charge); granting 0 for n > 0 charges nothing and is exactly a
	// denied Take of 1: Allowed false and RetryAfter the exact wait for
	// one token. n = 0 peeks. n may exceed the capacity (the grant never
	// does). The errors are Take's, except that a large n is not one.
	TakeAtMost(ctx context.Context, key string, p algo.Policy, n int64) (granted int64, res algo.Result, err error)
}

// Reserver is implemented by stores that can reserve tokens ahead of time:
// a request that the bucket cannot admit now, but can within a wait the
// caller accepts, is admitted with the exact delay after which it may
// proceed, instead of being refused.
type Reserver interface {
	// Reserve takes cost tokens from the bucket at key under p,
	// atomically, even before they exist, provided they exist within
	// maxWait (rounded down to the µs; at most p.MaxDelay() counts, and a
	// negative one is 0): see algo.TokenBucket.Reserve.
	//
	// Admitted (Allowed): the request may proceed after Delay, at the
	// store's time At, and the bucket is in debt until then, so later
	// requests wait behind it: reservations on a key are served in the
	// order they were made. A Delay of zero is an admitted Take. Refused:
	// nothing is charged and RetryAfter is exact for the same
	// reservation. The errors are Take's; a refusal is not one.
	Reserve(ctx context.Context, key string, p algo.Policy, cost int64, maxWait time.Duration) (algo.Reservation, error)
	// CancelReservation gives back the tokens of a reservation made on
	// key under p, given its Ticket, before its time At: exactly, leaving
	// the bucket as if it had never been reserved, when no other
	// reservation on the key was made since (it is the last in line);
	// otherwise not at all, since the ones behind it were given their
	// times counting on its tokens (see algo.TokenBucket.Cancel). It
	// reports whether it gave them back, with the bucket's Result after.
	// At or after At, and for the zero Ticket, it changes nothing. The
	// errors are Take's, and algo.ErrInvalidReservation for a ticket no
	// Reserve under p could have returned.
	CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error)
}

// refundableKey is the context key of WithRefundable's mark.
type refundableKey struct{}

// WithRefundable returns a copy of ctx marking the calls made with it as
// charges that may be given back later, perhaps by another process: a
// take whose tokens a refund may return (httplimit's ChargeIf), a
// reservation that may be cancelled (httplimit's Delay). The stores of
// this module decide such calls as any other; a store that answers from
// what it learnt of earlier answers (hybrid.DenyCache) neither answers
// them locally nor learns from them, since tokens given back by another
// process are tokens it cannot see. Mark every call on a key whose tokens
// any process may give back: the mark is per call, and the cache is exact
// for a key when no process gives tokens back to it behind the calls it
// learns from.
func WithRefundable(ctx context.Context) context.Context {
	return context.WithValue(ctx, refundableKey{}, true)
}

// IsRefundable reports whether ctx carries the mark of [WithRefundable].
func IsRefundable(ctx context.Context) bool {
	v, _ := ctx.Value(refundableKey{}).(bool)
	return v
}
