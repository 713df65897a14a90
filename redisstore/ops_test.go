package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		if res, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 4}); err != nil || !res.Allowed {
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
		if res, err := s.Take(ctxT(t), store.Request{Key: k, Policy: p, Cost: 0}); err != nil || res.Remaining != 6 {
			t.Fatalf("after the refused RefundMulti, %q = %+v, %v; want the 6 left it had", k, res, err)
		}
	}
}

// TestOneCallPerOp: each operation is one script call, one round trip:
// Redis runs exactly one EVALSHA for each Refund, RefundMulti, TakeAtMost,
// Reserve, CancelReservation, AcquireLease, RenewLease and ReleaseLease,
// and no other command, on either clock.
func TestOneCallPerOp(t *testing.T) {
	rdb := redistest.Start(t).Client()
	for _, sc := range []*redis.Script{redisstore.Script(), redisstore.LeaseScript()} {
		if err := sc.Load(ctxT(t), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lp := algo.LeasePolicy{Limit: 2, TTL: time.Minute}
	p := algo.PerSecond(2).Burst(10)
	for _, cfg := range []redisstore.Config{{}, {Clock: clockAt(time.Now())}} {
		s := newStore(t, rdb, cfg)
		ctx := context.Background()
		if _, err := s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 10}); err != nil {
			t.Fatal(err)
		}
		before := calls(t, rdb, "evalsha")
		ops := []func() error{
			func() error { _, err := s.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); return err },
			func() error {
				_, err := s.RefundMulti(ctx, []store.Request{{Key: "{g}a", Policy: p, Cost: 1}, {Key: "{g}b", Policy: p, Cost: 1}})
				return err
			},
			func() error { _, _, err := s.TakeAtMost(ctx, store.Request{Key: "k", Policy: p, Cost: 5}); return err },
			func() error {
				r, err := s.Reserve(ctx, store.Request{Key: "k", Policy: p, Cost: 3}, 2*time.Second) // the bucket is empty: 1.5 s
				if err != nil || r.Ticket == (algo.Ticket{}) {
					return fmt.Errorf("Reserve = %+v, %v; want a ticket", r, err)
				}
				_, _, err = s.CancelReservation(ctx, "k", p, r.Ticket)
				return err
			},
			func() error { _, err := s.AcquireLease(ctx, "k", lp, "id"); return err },
			func() error { _, err := s.RenewLease(ctx, "k", lp, "id"); return err },
			func() error { _, err := s.ReleaseLease(ctx, "k", "id"); return err },
		}
		for _, op := range ops {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		}
		if got := calls(t, rdb, "evalsha") - before; got != 8 {
			t.Errorf("%d EVALSHA for eight calls, want 8", got)
		}
		if n := calls(t, rdb, "eval"); n != 0 {
			t.Errorf("%d EVAL: the script was not found", n)
		}
	}
}

// clockAt is a client clock that stands still at t.
type clockAt time.Time

func (c clockAt) Now() time.Time { return time.Time(c) }

// TestOpsPipelined: the operations around a take, and lease calls, go
// through the auto-pipeliner as Take does: while the first call's batch is
// held at the server, one call of each kind queues, and all go in the next
// batch, one round trip for the eight.
func TestOpsPipelined(t *testing.T) {
	rdb := heldClient(t, redistest.Start(t))
	obs := &batches{}
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, Observer: obs, Name: "limits",
		Pipeline: redisstore.PipelineConfig{Writers: 1, MaxBatch: 64}})
	p, lp := algo.PerHour(1).Burst(10), algo.LeasePolicy{Limit: 2, TTL: time.Minute}
	ctx := context.Background()
	if _, err := s.Take(ctx, store.Request{Key: "queued", Policy: p, Cost: 10}); err != nil {
		t.Fatal(err)
	}
	rsv, err := s.Reserve(ctx, store.Request{Key: "queued", Policy: p, Cost: 1}, time.Hour)
	if err != nil || rsv.Ticket == (algo.Ticket{}) {
		t.Fatalf("Reserve = %+v, %v; want a ticket", rsv, err)
	}
	if _, err := s.AcquireLease(ctx, "l", lp, "held"); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	obs.sizes = nil
	obs.mu.Unlock()
	unpause := pause(t, rdb)
	var wg sync.WaitGroup
	wg.Go(func() { s.Take(ctx, store.Request{Key: "first", Policy: p, Cost: 1}) })
	waitState(t, s, 0, 1)
	calls := []func() error{
		func() error { _, err := s.Refund(ctx, store.Request{Key: "a", Policy: p, Cost: 1}); return err },
		func() error {
			_, err := s.RefundMulti(ctx, []store.Request{{Key: "{g}a", Policy: p, Cost: 1}, {Key: "{g}b", Policy: p, Cost: 1}})
			return err
		},
		func() error { _, _, err := s.TakeAtMost(ctx, store.Request{Key: "b", Policy: p, Cost: 5}); return err },
		func() error {
			_, err := s.Reserve(ctx, store.Request{Key: "c", Policy: p, Cost: 1}, time.Minute)
			return err
		},
		func() error { _, _, err := s.CancelReservation(ctx, "queued", p, rsv.Ticket); return err },
		func() error { _, err := s.AcquireLease(ctx, "l", lp, "new"); return err },
		func() error { _, err := s.RenewLease(ctx, "l", lp, "held"); return err },
		func() error { _, err := s.ReleaseLease(ctx, "l", "held"); return err },
	}
	for _, call := range calls {
		wg.Go(func() {
			if err := call(); err != nil {
				t.Error(err)
			}
		})
	}
	waitState(t, s, len(calls), 1)
	unpause()
	wg.Wait()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []int{1, len(calls)}; !slices.Equal(obs.sizes, want) {
		t.Fatalf("batch sizes %v, want %v: every call in one batch behind the first", obs.sizes, want)
	}
}
