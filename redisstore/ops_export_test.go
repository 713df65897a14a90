package redisstore

import (
	"context"

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
