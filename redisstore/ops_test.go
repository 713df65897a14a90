package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestRefundMultiSlots: on a cluster, RefundMulti over keys of one group
// (store.GroupKey) refunds them together in one script call; over keys in
// different slots it fails with store.ErrNotTogether before Redis is
// called, refunding nothing.
func TestRefundMultiSlots(t *testing.T) {
	rdb := redistest.StartCluster(t).Client()
	s := newStore(t, rdb, redisstore.Config{})
	p := algo.PerHour(1).Burst(10)
	together := []string{store.GroupKey("user:1", "burst"), store.GroupKey("user:1", "daily")}
	apart := []string{"a", "b"}
	if redisstore.Slot(s.Key(apart[0])) == redisstore.Slot(s.Key(apart[1])) {
		t.Fatal("the test wants keys in two slots")
	}
	for _, k := range append(together, apart...) {
		if res, err := s.Take(ctxT(t), k, p, 4); err != nil || !res.Allowed {
			t.Fatalf("Take(%q, 4) = %+v, %v", k, res, err)
		}
	}
	reqs := func(keys []string) []store.Request {
		return []store.Request{{Key: keys[0], Policy: p, Cost: 3}, {Key: keys[1], Policy: p, Cost: 1}}
	}
	if _, err := s.RefundMulti(ctxT(t), reqs(apart)); !errors.Is(err, store.ErrNotTogether) {
		t.Fatalf("RefundMulti across slots: %v, want store.ErrNotTogether", err)
	}
	res, err := s.RefundMulti(ctxT(t), reqs(together))
	if err != nil || res[0].Remaining != 9 || res[1].Remaining != 7 {
		t.Fatalf("RefundMulti in one group = %+v, %v; want 9 and 7 left", res, err)
	}
	for _, k := range apart {
		if res, err := s.Take(ctxT(t), k, p, 0); err != nil || res.Remaining != 6 {
			t.Fatalf("after the refused RefundMulti, %q = %+v, %v; want the 6 left it had", k, res, err)
		}
	}
}

// TestOneCallPerOp: each operation is one script call, one round trip:
// Redis runs exactly one EVALSHA for each Refund, RefundMulti, TakeAtMost,
// Reserve and CancelReservation, and no other command, on either clock.
func TestOneCallPerOp(t *testing.T) {
	rdb := redistest.Start(t).Client()
	if err := redisstore.Script().Load(ctxT(t), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	p := algo.PerSecond(2).Burst(10)
	for _, cfg := range []redisstore.Config{{}, {Clock: clockAt(time.Now())}} {
		s := newStore(t, rdb, cfg)
		ctx := context.Background()
		if _, err := s.Take(ctx, "k", p, 10); err != nil {
			t.Fatal(err)
		}
		before := calls(t, rdb, "evalsha")
		ops := []func() error{
			func() error { _, err := s.Refund(ctx, "k", p, 1); return err },
			func() error {
				_, err := s.RefundMulti(ctx, []store.Request{{Key: "{g}a", Policy: p, Cost: 1}, {Key: "{g}b", Policy: p, Cost: 1}})
				return err
			},
			func() error { _, _, err := s.TakeAtMost(ctx, "k", p, 5); return err },
			func() error {
				r, err := s.Reserve(ctx, "k", p, 3, 2*time.Second) // the bucket is empty: 1.5 s
				if err != nil || r.Ticket == (algo.Ticket{}) {
					return fmt.Errorf("Reserve = %+v, %v; want a ticket", r, err)
				}
				_, _, err = s.CancelReservation(ctx, "k", p, r.Ticket)
				return err
			},
		}
		for _, op := range ops {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		}
		if got := calls(t, rdb, "evalsha") - before; got != 5 {
			t.Errorf("%d EVALSHA for five calls, want 5", got)
		}
		if n := calls(t, rdb, "eval"); n != 0 {
			t.Errorf("%d EVAL: the script was not found", n)
		}
	}
}

// clockAt is a client clock that stands still at t.
type clockAt time.Time

func (c clockAt) Now() time.Time { return time.Time(c) }
