package redisstore

import (
	"context"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The operations with the time, in µs, the script decided at (Redis's
// TIME with the server clock), so tests can replay each call through algo,
// as TakeNow does for Take.

// RefundNow is Refund, and the script's time.
func RefundNow(ctx context.Context, s *Store, key string, p algo.Policy, n int64) (algo.Result, int64, error) {
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: n}}
	var res [1]algo.Result
	var in inspected
	err := s.run(ctx, opRefund, reqs[:], res[:], &in)
	return res[0], in.now, err
}

// TakeAtMostNow is TakeAtMost, and the script's time.
func TakeAtMostNow(ctx context.Context, s *Store, key string, p algo.Policy, n int64) (int64, algo.Result, int64, error) {
	var in inspected
	res, err := s.takeAtMost(ctx, key, p, n, &in)
	return in.granted, res, in.now, err
}

// ReserveNow is Reserve, and the script's time.
func ReserveNow(ctx context.Context, s *Store, key string, p algo.Policy, cost int64, maxWait time.Duration) (algo.Reservation, int64, error) {
	var in inspected
	res, err := s.reserve(ctx, key, p, cost, maxWait, &in)
	return res, in.now, err
}

// CancelNow is CancelReservation, and the script's time.
func CancelNow(ctx context.Context, s *Store, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, int64, error) {
	in := inspected{ticket: t}
	res, err := s.cancel(ctx, key, p, &in)
	return in.gave, res, in.now, err
}
