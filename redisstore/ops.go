package redisstore

import (
	"context"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The operations around a take (store.Refunder, store.AtMostTaker): each
// is one call of the token-bucket script, its op the Lua twin of
// algo.TokenBucket's Refund and TakeAtMost, checked, pipelined and timed
// out as Take is, on the server clock or Config.Clock. See the package
// documentation ("Refunds and partial grants").

var (
	_ store.Refunder    = (*Store)(nil)
	_ store.AtMostTaker = (*Store)(nil)
)

// Refund gives n tokens back to the bucket at key under p in one atomic
// script call: see store.Refunder. A refund of 0, or to a key Redis does
// not hold (a full bucket), changes nothing and writes nothing. The errors
// are Take's.
func (s *Store) Refund(ctx context.Context, key string, p algo.Policy, n int64) (algo.Result, error) {
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: n}}
	var res [1]algo.Result
	if err := s.run(ctx, opRefund, reqs[:], res[:], nil); err != nil {
		return algo.Result{}, err
	}
	return res[0], nil
}

// RefundMulti refunds every request (Cost tokens to Key under Policy) in
// one atomic script call, with one Result per request, in order: see
// store.Refunder. Bad input anywhere, or a key named twice
// (store.ErrDuplicateKey), refunds nothing; on Redis Cluster the keys must
// share a slot (store.GroupKey, as for TakeMulti), or the call fails with
// an error matching store.ErrNotTogether before Redis is called. An empty
// reqs is allowed, with no Results.
func (s *Store) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	results := make([]algo.Result, len(reqs))
	if len(reqs) == 0 {
		if s.closed.Load() {
			return nil, store.ErrClosed
		}
		return results, ctx.Err()
	}
	if err := s.run(ctx, opRefund, reqs, results, nil); err != nil {
		return nil, err
	}
	return results, nil
}

// TakeAtMost takes as many whole tokens as the bucket at key under p
// holds, up to n, in one atomic script call, and returns how many it
// granted: see store.AtMostTaker. An n above the capacity asks for the
// capacity, which is all a bucket can grant.
func (s *Store) TakeAtMost(ctx context.Context, key string, p algo.Policy, n int64) (granted int64, res algo.Result, err error) {
	var in inspected
	res, err = s.takeAtMost(ctx, key, p, n, &in)
	return in.granted, res, err
}

func (s *Store) takeAtMost(ctx context.Context, key string, p algo.Policy, n int64, in *inspected) (algo.Result, error) {
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: min(n, p.Capacity())}}
	var res [1]algo.Result
	if err := s.run(ctx, opAtMost, reqs[:], res[:], in); err != nil {
		return algo.Result{}, err
	}
	return res[0], nil
}
