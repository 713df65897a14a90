package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The operations around a take (store.Store, store.Store,
// store.Store): each is one call of the token-bucket script, its op the
// Lua twin of algo.TokenBucket's Refund, TakeAtMost, Reserve and Cancel,
// checked, pipelined and timed out as Take is, on the server clock or
// Config.Clock. See the package documentation ("Refunds, partial grants
// and reservations").

var ()

// Refund gives n tokens back to the bucket at key under p in one atomic
// script call: see store.Store. A refund of 0, or to a key Redis does
// not hold (a full bucket), changes nothing and writes nothing. The errors
// are Take's.
func (s *Store) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	key, p, n := req.Key, req.Policy, req.Cost
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: n}}
	var res [1]algo.Result
	if err := s.run(ctx, opRefund, reqs[:], res[:], nil); err != nil {
		return algo.Result{}, err
	}
	return res[0], nil
}

// RefundMulti refunds every request (Cost tokens to Key under Policy) in
// one atomic script call, with one Result per request, in order: see
// store.Store. Bad input anywhere, or a key named twice
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
// granted: see store.Store. An n above the capacity asks for the
// capacity, which is all a bucket can grant.
func (s *Store) TakeAtMost(ctx context.Context, req store.Request) (granted int64, res algo.Result, err error) {
	key, p, n := req.Key, req.Policy, req.Cost
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

// Reserve takes cost tokens from the bucket at key under p, even before
// they exist, provided they exist within maxWait, in one atomic script
// call: see store.Store and algo.TokenBucket.Reserve. The Delay is
// counted on the clock the bucket uses (Redis's, by default), and the
// Ticket's At is a time on that clock. The errors are Take's.
func (s *Store) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	return s.reserve(ctx, key, p, cost, maxWait, &inspected{})
}

func (s *Store) reserve(ctx context.Context, key string, p algo.Policy, cost int64, maxWait time.Duration, in *inspected) (algo.Reservation, error) {
	// A wait beyond one full bucket's refill acts as that refill (algo's
	// Reserve); bounding it here keeps the argument below 2^53.
	in.wait = min(max(int64(maxWait/time.Microsecond), 0), p.MaxDelay().Microseconds())
	reqs := [1]store.Request{{Key: key, Policy: p, Cost: cost}}
	var res [1]algo.Result
	if err := s.run(ctx, opReserve, reqs[:], res[:], in); err != nil {
		return algo.Reservation{}, err
	}
	r := algo.Reservation{Result: res[0]}
	if in.delay > 0 {
		r.Delay, r.Ticket = algo.Micros(in.delay), in.ticket
	}
	return r, nil
}

// CancelReservation gives back the tokens of a reservation made on key
// under p, given its Ticket, in one atomic script call, when it is still
// waiting and the last in line: see store.Store and
// algo.TokenBucket.Cancel. It writes only when it gives something back. A
// ticket no Reserve under p could have returned is refused before Redis is
// called, with algo.ErrInvalidReservation; the other errors are Take's.
func (s *Store) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	in := inspected{ticket: t}
	res, err := s.cancel(ctx, key, p, &in)
	return in.gave, res, err
}

func (s *Store) cancel(ctx context.Context, key string, p algo.Policy, in *inspected) (algo.Result, error) {
	// algo's own check of the ticket, on a full bucket at time 0: it
	// fails for a ticket outside the bounds the script accepts too.
	if err := store.CheckKey(key, s.maxKey); err != nil {
		return algo.Result{}, fmt.Errorf("redisstore: key %.64q: %w", key, err)
	}
	if _, _, _, err := (algo.TokenBucket{}).Cancel(p, algo.State{}, 0, in.ticket); err != nil {
		return algo.Result{}, fmt.Errorf("redisstore: key %.64q: %w", key, err)
	}
	reqs := [1]store.Request{{Key: key, Policy: p}}
	var res [1]algo.Result
	if err := s.run(ctx, opCancel, reqs[:], res[:], in); err != nil {
		return algo.Result{}, err
	}
	return res[0], nil
}
