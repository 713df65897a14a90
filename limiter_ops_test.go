package ratebucket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// reserveStore counts the calls Wait makes to a memstore that reserves.
type reserveStore struct {
	*memstore.Store
	reserves, cancels int
}

func (s *reserveStore) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	s.reserves++
	return s.Store.Reserve(ctx, req, maxWait)
}

func (s *reserveStore) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	s.cancels++
	return s.Store.CancelReservation(ctx, key, p, t)
}

// rigs are Wait's two ways: retrying Take over a store that only takes,
// and reserving. Tests of Wait that hold for both run over each.
var rigs = []struct {
	name string
	make func(*testing.T) *rig
}{
	{"take", newRig},
	{"reserve", func(t *testing.T) *rig { return &newResRig(t).rig }},
}

// resRig is rig (limiter_test.go) over a store that reserves: a limiter
// of burst 2 refilled 1 per second, on one mock clock.
type resRig struct {
	rig
	rs *reserveStore
}

func newResRig(t *testing.T) *resRig {
	t.Helper()
	var rs *reserveStore
	r := newRigOver(t, func(ms *memstore.Store) store.Store { rs = &reserveStore{Store: ms}; return rs })
	return &resRig{rig: *r, rs: rs}
}

func TestWaitReservesAndSleepsTheDelay(t *testing.T) {
	r := newResRig(t)
	r.drain(t, "k")
	done := r.wait(context.Background(), "k", 1)
	r.timer(t, time.Second)
	if n := r.remaining(t, "k"); n != 0 {
		t.Fatalf("%d tokens while Wait sleeps, want 0: its reservation holds the next one", n)
	}
	r.clk.Add(time.Second)
	if got := <-done; got.err != nil || !got.res.Allowed {
		t.Fatalf("Wait = %+v, %v; want admitted", got.res, got.err)
	}
	if r.rs.reserves != 1 || r.rs.cancels != 0 {
		t.Fatalf("%d reserves, %d cancels; want one reservation", r.rs.reserves, r.rs.cancels)
	}
}

// TestWaitIsFIFO: a Wait for the whole bucket holds its place; a Take and
// a smaller Wait that come later are served after it, never before.
func TestWaitIsFIFO(t *testing.T) {
	r := newResRig(t)
	r.drain(t, "k")
	big := r.wait(context.Background(), "k", 2)
	r.timer(t, 2*time.Second)
	if res, err := r.lim.Take(context.Background(), "k", 1); err != nil || res.Allowed || res.RetryAfter != 3*time.Second {
		t.Fatalf("a Take behind the big Wait = %+v, %v; want denied until 3s", res, err)
	}
	small := r.wait(context.Background(), "k", 1)
	r.timer(t, time.Second) // the queue holds one bucket: room for 1 more in 1s
	r.clk.Add(time.Second)
	r.timer(t, 2*time.Second) // then it is in line, behind the big one
	r.clk.Add(time.Second)
	if got := <-big; got.err != nil || !got.res.Allowed {
		t.Fatalf("big Wait = %+v, %v; want admitted at 2s", got.res, got.err)
	}
	r.clk.Add(time.Second)
	if got := <-small; got.err != nil || !got.res.Allowed {
		t.Fatalf("small Wait = %+v, %v; want admitted at 3s", got.res, got.err)
	}
}

// TestWaitCanceledGivesBack: a Wait whose context ends while it sleeps
// cancels its reservation, and the tokens come back.
func TestWaitCanceledGivesBack(t *testing.T) {
	r := newResRig(t)
	r.drain(t, "k")
	ctx, cancel := context.WithCancel(context.Background())
	done := r.wait(ctx, "k", 2)
	r.timer(t, 2*time.Second)
	r.clk.Add(500 * time.Millisecond)
	cancel()
	got := <-done
	if !errors.Is(got.err, context.Canceled) || got.res.Allowed || r.rs.cancels != 1 {
		t.Fatalf("Wait = %+v, %v, %d cancels; want context.Canceled and one cancel", got.res, got.err, r.rs.cancels)
	}
	r.clk.Add(1500 * time.Millisecond)
	if n := r.remaining(t, "k"); n != 2 {
		t.Fatalf("%d tokens 2s after draining, want 2: the cancelled reservation kept its tokens", n)
	}
}

// TestWaitQueueFull: when the bucket's queue holds one bucket of debt
// already, Wait sleeps until its request fits, then reserves.
func TestWaitQueueFull(t *testing.T) {
	r := newResRig(t)
	r.drain(t, "k")
	first, err := r.lim.Reserve(context.Background(), "k", 2, time.Hour)
	if err != nil || !first.Allowed || first.Delay != 2*time.Second {
		t.Fatalf("Reserve(2) = %+v, %v; want a delay of 2s", first, err)
	}
	done := r.wait(context.Background(), "k", 2)
	r.timer(t, 2*time.Second) // until 2 fit in the queue
	r.clk.Add(2 * time.Second)
	r.timer(t, 2*time.Second) // reserved: 2 more seconds
	r.clk.Add(2 * time.Second)
	if got := <-done; got.err != nil || !got.res.Allowed {
		t.Fatalf("Wait = %+v, %v; want admitted at 4s", got.res, got.err)
	}
	if r.rs.reserves != 3 {
		t.Fatalf("%d reserves, want 3", r.rs.reserves)
	}
}

func TestLimiterOps(t *testing.T) {
	r := newResRig(t)
	ctx := context.Background()
	lim := r.lim
	if res, err := lim.Take(ctx, "k", 2); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	if res, err := lim.Refund(ctx, "k", 1); err != nil || res.Remaining != 1 {
		t.Fatalf("Refund(1) = %+v, %v; want 1 held", res, err)
	}
	if g, res, err := lim.TakeAtMost(ctx, "k", 5); err != nil || g != 1 || res.Remaining != 0 {
		t.Fatalf("TakeAtMost(5) = %d, %+v, %v; want 1 granted", g, res, err)
	}
	res, err := lim.Reserve(ctx, "k", 1, 500*time.Millisecond)
	if err != nil || res.Allowed || res.RetryAfter != 500*time.Millisecond {
		t.Fatalf("Reserve(1, 500ms) = %+v, %v; want refused, retry after 500ms", res, err)
	}
	if ok, _, err := res.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel of a refused reservation = %v, %v", ok, err)
	}
	res, err = lim.Reserve(ctx, "k", 1, time.Second)
	if err != nil || !res.Allowed || res.Delay != time.Second {
		t.Fatalf("Reserve(1, 1s) = %+v, %v; want a delay of 1s", res, err)
	}
	if ok, after, err := res.Cancel(ctx); !ok || err != nil || after.ResetAfter != 2*time.Second {
		t.Fatalf("Cancel = %v, %+v, %v; want given back, full after 2s", ok, after, err)
	}
}

// TestLimiterOpsUnsupported: a store's ErrUnsupported (one under a window
// algorithm reserves nothing) comes back from Reserve as it is; the zero
// Limiter and an empty key are refused before any store call.
func TestLimiterOpsUnsupported(t *testing.T) {
	base := newRig(t) // its hookStore reserves nothing
	ctx := context.Background()
	if _, err := base.lim.Reserve(ctx, "k", 1, time.Second); !errors.Is(err, store.ErrUnsupported) {
		t.Errorf("Reserve over a store that reserves nothing: %v, want ErrUnsupported", err)
	}
	var zero ratebucket.Limiter
	for name, lim := range map[string]*ratebucket.Limiter{"zero Limiter": &zero} {
		want := ratebucket.ErrNilStore
		calls := map[string]func() error{
			"Refund":     func() error { _, err := lim.Refund(ctx, "k", 1); return err },
			"TakeAtMost": func() error { _, _, err := lim.TakeAtMost(ctx, "k", 1); return err },
			"Reserve":    func() error { _, err := lim.Reserve(ctx, "k", 1, time.Second); return err },
		}
		for op, call := range calls {
			if err := call(); !errors.Is(err, want) {
				t.Errorf("%s on a %s: %v, want %v", op, name, err, want)
			}
		}
	}
	r := newResRig(t)
	if _, err := r.lim.Reserve(ctx, "", 1, time.Second); !errors.Is(err, store.ErrEmptyKey) {
		t.Errorf("Reserve with an empty key: %v, want ErrEmptyKey", err)
	}
}

// TestReservationWait: Wait sleeps until the reservation's time, counted
// from the store's answer, so a caller that comes to Wait late sleeps only
// what is left; a refused reservation returns its denial at once.
func TestReservationWait(t *testing.T) {
	r := newResRig(t)
	ctx := context.Background()
	r.drain(t, "k")
	res, err := r.lim.Reserve(ctx, "k", 1, time.Second)
	if err != nil || !res.Allowed || res.Delay != time.Second {
		t.Fatalf("Reserve = %+v, %v; want a delay of 1s", res, err)
	}
	refused, err := r.lim.Reserve(ctx, "k", 1, time.Second)
	if err != nil || refused.Allowed {
		t.Fatalf("second Reserve = %+v, %v; want refused", refused, err)
	}
	if got, err := refused.Wait(ctx); err != nil || got != (ratebucket.Result{Result: refused.Result, Limit: 2}) {
		t.Fatalf("Wait of a refused reservation = %+v, %v; want its Result at once", got, err)
	}
	r.clk.Add(300 * time.Millisecond)
	done := make(chan waitResult, 1)
	go func() {
		got, err := res.Wait(ctx)
		done <- waitResult{got, err}
	}()
	r.timer(t, 700*time.Millisecond)
	r.clk.Add(700 * time.Millisecond)
	if got := <-done; got.err != nil || !got.res.Allowed || got.res.Result != res.Result || got.res.Limit != 2 {
		t.Fatalf("Wait = %+v, %v; want the reservation's Result", got.res, got.err)
	}
}
