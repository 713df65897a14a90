package storetest_test

import (
	"context"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Planted bugs in refunds, partial grants and reservations, each for its
// check to catch.
func init() {
	mutants["refund above capacity"] = "Refund"
	mutants["take at most one more"] = "TakeAtMost"
	mutants["reservation not charged"] = "Reserve"
	mutants["cancel behind others gives back"] = "Reserve"
}

// op applies f to key's state under the store's lock (the simplest
// correct store) and keeps the state it returns.
func (s *mapStore) op(ctx context.Context, key string, p algo.Policy, f func(algo.State, int64) (algo.State, error)) error {
	if err := store.CheckKey(key, store.DefaultMaxKeyLen); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return store.ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	}
	st, err := f(s.m[key], s.clk.Now().UnixMicro())
	if err == nil {
		s.m[key] = st
	}
	return err
}

func (s *mapStore) Refund(ctx context.Context, req store.Request) (res algo.Result, err error) {
	key, p, n := req.Key, req.Policy, req.Cost
	err = s.op(ctx, key, p, func(st algo.State, now int64) (algo.State, error) {
		if s.mutant == "refund above capacity" && n > 0 {
			st, res, err = algo.TokenBucket{}.Take(p, st, now, 0)
			st.Level -= n * p.Unit() // below zero: more than full
			res.Remaining += n
			return st, err
		}
		st, res, err = algo.TokenBucket{}.Refund(p, st, now, n)
		return st, err
	})
	return res, err
}

func (s *mapStore) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	if err := store.CheckRequests(reqs, store.DefaultMaxKeyLen); err != nil {
		return nil, err
	}
	out := make([]algo.Result, len(reqs))
	for i, r := range reqs { // one lock per refund: not atomic, which no check can see here
		res, err := s.Refund(ctx, r)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	return out, nil
}

func (s *mapStore) TakeAtMost(ctx context.Context, req store.Request) (g int64, res algo.Result, err error) {
	key, p, n := req.Key, req.Policy, req.Cost
	err = s.op(ctx, key, p, func(st algo.State, now int64) (algo.State, error) {
		st, g, res, err = algo.TokenBucket{}.TakeAtMost(p, st, now, n)
		if s.mutant == "take at most one more" && g > 0 && g < n {
			g++
			st.Level += p.Unit()
			res.Remaining = max(0, res.Remaining-1)
		}
		return st, err
	})
	return g, res, err
}

func (s *mapStore) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (r algo.Reservation, err error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	err = s.op(ctx, key, p, func(st algo.State, now int64) (algo.State, error) {
		next, r2, err := algo.TokenBucket{}.Reserve(p, st, now, cost, int64(maxWait/time.Microsecond))
		if r = r2; s.mutant == "reservation not charged" && r.Delay > 0 {
			return st, err
		}
		return next, err
	})
	return r, err
}

func (s *mapStore) CancelReservation(ctx context.Context, key string, p algo.Policy, tk algo.Ticket) (ok bool, res algo.Result, err error) {
	err = s.op(ctx, key, p, func(st algo.State, now int64) (algo.State, error) {
		if s.mutant == "cancel behind others gives back" && tk.Units > 0 && max(now, st.Stamp) < tk.At {
			st, res, err = algo.TokenBucket{}.Refund(p, st, now, 0)
			st.Level, ok = max(0, st.Level-tk.Units), true
			return st, err
		}
		st, ok, res, err = algo.TokenBucket{}.Cancel(p, st, now, tk)
		return st, err
	})
	return ok, res, err
}

func init() {
	mutants["settles twice"] = "Settle"
	mutants["settle past the debt bound"] = "Settle"
}

func (s *mapStore) Hold(ctx context.Context, req store.Request, ttl time.Duration) (h algo.Hold, res algo.Result, err error) {
	us := ttl.Microseconds()
	if ttl%time.Microsecond != 0 {
		us = -1
	}
	err = s.op(ctx, req.Key, req.Policy, func(st algo.State, now int64) (algo.State, error) {
		st, h, res, err = algo.TokenBucket{}.Hold(req.Policy, st, now, req.Cost, us)
		if err == nil && res.Allowed {
			h.ID = store.NewLeaseID()
			s.holds[req.Key+"\x00"+h.ID] = h
		}
		return st, err
	})
	return h, res, err
}

func (s *mapStore) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (res algo.Settlement, err error) {
	err = s.op(ctx, key, p, func(st algo.State, now int64) (algo.State, error) {
		next, r, err := algo.TokenBucket{}.Settle(p, st, now, h, actual)
		rec, open := s.holds[key+"\x00"+h.ID]
		switch {
		case err != nil:
			return st, err
		case !open:
			return st, algo.ErrHoldSettled
		case rec != h:
			return st, algo.ErrInvalidHold
		}
		if s.mutant != "settles twice" {
			delete(s.holds, key+"\x00"+h.ID)
		}
		if s.mutant == "settle past the debt bound" && r.Uncharged > 0 {
			next.Level += r.Uncharged * p.Unit()
			r.Uncharged = 0
		}
		res = r
		return next, nil
	})
	return res, err
}
