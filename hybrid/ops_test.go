package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// Refund makes a bucketView a store.Store (RefundMulti is not needed
// by these tests): a refund made by the instance that reads clk.
func (v *bucketView) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	key, p, n := req.Key, req.Policy, req.Cost
	v.b.mu.Lock()
	defer v.b.mu.Unlock()
	if v.b.states == nil {
		v.b.states = map[string]algo.State{}
	}
	s, res, err := algo.TokenBucket{}.Refund(p, v.b.states[key], v.clk.Now().UnixMicro(), n)
	if err == nil {
		v.b.states[key] = s
	}
	return res, err
}

func (v *bucketView) RefundMulti(context.Context, []store.Request) ([]algo.Result, error) {
	return nil, store.ErrUnsupported
}

// cacheRig is a DenyCache over a memstore on one exact clock.
type cacheRig struct {
	clk *storetest.Clock
	ms  *memstore.Store
	c   *hybrid.DenyCache
}

func newCacheRig(t *testing.T, cfg hybrid.DenyCacheConfig) *cacheRig {
	t.Helper()
	r := &cacheRig{clk: storetest.NewClock()}
	r.ms = newMem(t, r.clk)
	cfg.Clock, cfg.ClockMargin = r.clk, -1
	r.c = newCache(t, r.ms, cfg)
	return r
}

// take takes cost through the cache and reports whether the cache
// answered it locally.
func (r *cacheRig) take(t *testing.T, key string, p algo.Policy, cost int64) (algo.Result, bool) {
	t.Helper()
	before := r.c.Stats().Denied
	res, err := r.c.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
	if err != nil {
		t.Fatal(err)
	}
	return res, r.c.Stats().Denied > before
}

// drain empties key's bucket of capacity 1 under p and takes again: the
// primary's admission taught the cache that the bucket is empty, and it
// denies.
func (r *cacheRig) drain(t *testing.T, key string, p algo.Policy) {
	t.Helper()
	for i, want := range []struct{ allowed, local bool }{{true, false}, {false, true}} {
		if res, local := r.take(t, key, p, 1); res.Allowed != want.allowed || local != want.local {
			t.Fatalf("take %d: %+v, local %v; want allowed %v, local %v", i, res, local, want.allowed, want.local)
		}
	}
}

// TestDenyCacheGiveBackThrough: a refund, or a cancelled reservation, made
// through the cache lets the next request through at once, though the
// cache had the key denied for an hour.
func TestDenyCacheGiveBackThrough(t *testing.T) {
	hourly := algo.PerHour(1).Burst(1)
	t.Run("refund", func(t *testing.T) {
		r := newCacheRig(t, hybrid.DenyCacheConfig{})
		r.drain(t, "k", hourly)
		if res, err := r.c.Refund(ctx, store.Request{Key: "k", Policy: hourly, Cost: 1}); err != nil || res.Remaining != 1 {
			t.Fatalf("Refund = %+v, %v", res, err)
		}
		if res, local := r.take(t, "k", hourly, 1); !res.Allowed || local {
			t.Fatalf("after the refund: %+v, local %v; want admitted by the primary", res, local)
		}
	})
	t.Run("refund multi", func(t *testing.T) {
		r := newCacheRig(t, hybrid.DenyCacheConfig{})
		r.drain(t, "a", hourly)
		r.drain(t, "b", hourly)
		if _, err := r.c.RefundMulti(ctx, []store.Request{{Key: "a", Policy: hourly, Cost: 1}, {Key: "b", Policy: hourly, Cost: 1}}); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a", "b"} {
			if res, local := r.take(t, k, hourly, 1); !res.Allowed || local {
				t.Fatalf("%s after the refund: %+v, local %v", k, res, local)
			}
		}
	})
	t.Run("cancel", func(t *testing.T) {
		r := newCacheRig(t, hybrid.DenyCacheConfig{})
		p := algo.PerHour(1).Burst(2)
		if res, _ := r.take(t, "k", p, 1); !res.Allowed {
			t.Fatal(res)
		}
		rsv, err := r.c.Reserve(ctx, store.Request{Key: "k", Policy: p, Cost: 2}, time.Hour)
		if err != nil || !rsv.Allowed || rsv.Delay != time.Hour {
			t.Fatalf("Reserve = %+v, %v; want a delay of an hour", rsv, err)
		}
		// A reservation is not learnt from (another instance could cancel
		// it): the primary denies the take behind it, and the cache learns
		// the debt from that denial.
		for i, wantLocal := range []bool{false, true} {
			if res, local := r.take(t, "k", p, 1); res.Allowed || local != wantLocal {
				t.Fatalf("take %d behind the reservation: %+v, local %v; want a denial, local %v", i, res, local, wantLocal)
			}
		}
		if ok, _, err := r.c.CancelReservation(ctx, "k", p, rsv.Ticket); !ok || err != nil {
			t.Fatalf("Cancel = %v, %v", ok, err)
		}
		if res, local := r.take(t, "k", p, 1); !res.Allowed || local {
			t.Fatalf("after the cancel: %+v, local %v; want admitted by the primary", res, local)
		}
	})
}

// lostReply applies refunds and then fails them, as a Redis call whose
// reply is lost after the script ran.
type lostReply struct{ *memstore.Store }

var errLost = errors.New("i/o timeout")

func (l lostReply) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	l.Store.Refund(ctx, req)
	return algo.Result{}, errLost
}

// TestDenyCacheRefundLostReply: a refund that failed may still have been
// made, so the cache forgets the key whatever the answer.
func TestDenyCacheRefundLostReply(t *testing.T) {
	clk := storetest.NewClock()
	ms := newMem(t, clk)
	c := newCache(t, lostReply{ms}, hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
	hourly := algo.PerHour(1).Burst(1)
	for range 3 {
		c.Take(ctx, store.Request{Key: "k", Policy: hourly, Cost: 1})
	}
	if _, err := c.Refund(ctx, store.Request{Key: "k", Policy: hourly, Cost: 1}); !errors.Is(err, errLost) {
		t.Fatalf("Refund: %v, want the lost reply", err)
	}
	if res, err := c.Take(ctx, store.Request{Key: "k", Policy: hourly, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("after the refund: %+v, %v; want admitted", res, err)
	}
}

// TestDenyCacheRefundElsewhere: a refund made on another instance is not
// seen, and the cache may deny what the primary admits, but no longer
// than the request's cost takes to refill from the primary's last answer
// the cache learnt from. With Refunded, such keys are never denied
// locally.
func TestDenyCacheRefundElsewhere(t *testing.T) {
	p := algo.PerMinute(1).Burst(1)
	t.Run("bounded", func(t *testing.T) {
		r := newCacheRig(t, hybrid.DenyCacheConfig{})
		learnt := r.clk.Now()
		r.take(t, "k", p, 1) // the primary's admission teaches the bound
		if _, err := r.ms.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		r.clk.Set(learnt.Add(time.Minute - time.Microsecond))
		if res, local := r.take(t, "k", p, 1); res.Allowed || !local {
			t.Fatalf("within a token's refill: %+v, local %v; want the cache's stale denial", res, local)
		}
		r.clk.Set(learnt.Add(time.Minute))
		if res, local := r.take(t, "k", p, 1); !res.Allowed || local {
			t.Fatalf("a token's refill after the answer: %+v, local %v; want the primary's admission", res, local)
		}
	})
	t.Run("marked", func(t *testing.T) {
		// The takes are marked Request.Refundable, as httplimit marks a
		// ChargeIf route's: the cache keeps no entry, and the refund made
		// elsewhere is seen at once.
		r := newCacheRig(t, hybrid.DenyCacheConfig{})
		for range 3 {
			r.c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1, Refundable: true})
		}
		if _, err := r.ms.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if res, err := r.c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1, Refundable: true}); err != nil || !res.Allowed {
			t.Fatalf("after a refund elsewhere: %+v, %v; want admitted", res, err)
		}
		if st := r.c.Stats(); st.Entries != 0 || st.Denied != 0 || st.Calls != 4 {
			t.Fatalf("stats %+v: want 4 calls, no entry and no local denial", st)
		}
	})
	t.Run("Refunded", func(t *testing.T) {
		r := newCacheRig(t, hybrid.DenyCacheConfig{Refunded: func(key string) bool { return key == "k" }})
		for range 3 {
			if _, local := r.take(t, "k", p, 1); local {
				t.Fatal("a key under Refunded was denied locally")
			}
		}
		if _, err := r.ms.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if res, local := r.take(t, "k", p, 1); !res.Allowed || local {
			t.Fatalf("after a refund elsewhere: %+v, local %v; want admitted", res, local)
		}
		if st := r.c.Stats(); st.Entries != 0 || st.Denied != 0 {
			t.Fatalf("stats %+v: want no entry and no local denial", st)
		}
	})
}

// TestDenyCacheRefundTwin extends TestDenyCacheTwin to refunds: random
// takes, refunds and clock steps through a cache over a client-clock
// primary. Refunds through the cache keep it exact: every answer equals a
// plain memstore's given the same calls, and every local one the
// primary's own. Refunds made by another instance straight to the primary
// make the cache stale: a local denial of a request the primary would
// admit comes within the time the request's cost takes to refill after
// the last primary call on its key, never later. With Refunded, or with
// every take marked Request.Refundable, the cache answers nothing
// locally.
func TestDenyCacheRefundTwin(t *testing.T) {
	for _, mode := range []string{"through", "elsewhere", "elsewhere, Refunded", "elsewhere, marked"} {
		t.Run(mode, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { refundTwin(t, rt, mode) })
		})
	}
}

func refundTwin(t *testing.T, rt *rapid.T, mode string) {
	clk := storetest.NewClock()
	shared := &sharedBucket{}
	primary, plain := shared.view(clk), newMem(t, clk)
	cfg := hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1, Size: 4, Shards: 1}
	if mode == "elsewhere, Refunded" {
		cfg.Refunded = func(string) bool { return true }
	}
	c := newCache(t, primary, cfg)
	marked := mode == "elsewhere, marked"
	ps := []algo.Policy{genPolicy(rt, "p0"), genPolicy(rt, "p1")}
	lastCall := map[string]time.Time{}
	for i := range rapid.IntRange(1, 100).Draw(rt, "ops") {
		k := rapid.IntRange(0, len(ps)-1).Draw(rt, "key")
		key, p := fmt.Sprint("k", k), ps[k]
		cost := rapid.Int64Range(0, p.Capacity()).Draw(rt, "cost")
		clk.Add(time.Duration(rapid.Int64Range(0, 2*p.FillTime().Microseconds()/p.Capacity()).Draw(rt, "step µs")) * time.Microsecond)
		if rapid.IntRange(0, 3).Draw(rt, "refund") == 0 {
			var err error
			if mode == "through" {
				_, err = c.Refund(ctx, store.Request{Key: key, Policy: p, Cost: cost})
				lastCall[key] = clk.Now()
				if err == nil {
					_, err = plain.Refund(ctx, store.Request{Key: key, Policy: p, Cost: cost})
				}
			} else {
				_, err = primary.Refund(ctx, store.Request{Key: key, Policy: p, Cost: cost})
			}
			if err != nil {
				rt.Fatalf("step %d: refund: %v", i, err)
			}
			continue
		}
		truth := shared.peek(key, p, clk.Now(), cost)
		st := c.Stats()
		got, err := c.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost, Refundable: marked})
		if err != nil {
			rt.Fatalf("step %d: %v", i, err)
		}
		local := c.Stats().Denied > st.Denied
		if !local {
			lastCall[key] = clk.Now()
		}
		switch {
		case mode == "through":
			if want, err := plain.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost}); err != nil || got != want || local && got != truth {
				rt.Fatalf("step %d: Take(%s, %v, %d) cached %+v (local %v), plain %+v %v, primary %+v", i, key, p, cost, got, local, want, err, truth)
			}
		case local && mode != "elsewhere":
			rt.Fatalf("step %d: a local denial (%s)", i, mode)
		case mode != "elsewhere" && got != truth:
			rt.Fatalf("step %d: Take(%s, %v, %d) = %+v, the primary says %+v", i, key, p, cost, got, truth)
		case local && truth.Allowed:
			window := time.Duration((cost*p.Unit()+p.Refill()-1)/p.Refill()) * time.Microsecond
			if since := clk.Now().Sub(lastCall[key]); since >= window {
				rt.Fatalf("step %d: Take(%s, %v, %d) denied locally %v after the last primary call, the primary admits; want within %v", i, key, p, cost, since, window)
			}
		}
	}
}

// flakyOps is flaky with the operations around a take, which fail too
// while it is down.
type flakyOps struct{ *flaky }

// fail counts a call and returns errDown while the store is down.
func (f flakyOps) fail() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return errDown
	}
	return nil
}

func (f flakyOps) Refund(ctx context.Context, req store.Request) (algo.Result, error) {
	if err := f.fail(); err != nil {
		return algo.Result{}, err
	}
	return f.Store.Refund(ctx, req)
}

func (f flakyOps) RefundMulti(ctx context.Context, reqs []store.Request) ([]algo.Result, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.Store.RefundMulti(ctx, reqs)
}

func (f flakyOps) TakeAtMost(ctx context.Context, req store.Request) (int64, algo.Result, error) {
	if err := f.fail(); err != nil {
		return 0, algo.Result{}, err
	}
	return f.Store.TakeAtMost(ctx, req)
}

func (f flakyOps) Reserve(ctx context.Context, req store.Request, maxWait time.Duration) (algo.Reservation, error) {
	if err := f.fail(); err != nil {
		return algo.Reservation{}, err
	}
	return f.Store.Reserve(ctx, req, maxWait)
}

func (f flakyOps) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	if err := f.fail(); err != nil {
		return false, algo.Result{}, err
	}
	return f.Store.CancelReservation(ctx, key, p, t)
}

// newOpsFallback returns a quiet Fallback in mode over primary, with a
// local memstore, all on clk.
func newOpsFallback(t *testing.T, clk *storetest.Clock, primary store.Store, mode hybrid.Mode) *hybrid.Fallback {
	t.Helper()
	f, err := hybrid.NewFallback(primary, newMem(t, clk), hybrid.FallbackConfig{Mode: mode, Clock: clk, Timeout: unhurried, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFallbackOps: while the primary is down, a grant and a reservation
// are answered by the Mode as a Take is (the local share, all granted, or
// ErrOpen); a refund goes to the local store under LocalFallback and is
// ErrOpen otherwise; a reservation the primary made cannot be cancelled
// while it is down and gives nothing back; bad input is the caller's
// error in every mode. The failures count against the primary.
func TestFallbackOps(t *testing.T) {
	p := algo.PerHour(4).Burst(4)
	for _, mode := range []hybrid.Mode{hybrid.LocalFallback, hybrid.FailOpen, hybrid.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := storetest.NewClock()
			primary := flakyOps{&flaky{Store: newMem(t, clk)}}
			f := newOpsFallback(t, clk, primary, mode)
			if _, err := f.Take(ctx, store.Request{Key: "queued", Policy: p, Cost: 4}); err != nil {
				t.Fatal(err)
			}
			queued, err := f.Reserve(ctx, store.Request{Key: "queued", Policy: p, Cost: 1}, time.Hour)
			if err != nil || !queued.Allowed || queued.Delay != 15*time.Minute {
				t.Fatalf("Reserve on the primary = %+v, %v", queued, err)
			}
			primary.set(true, false)
			open := mode != hybrid.LocalFallback && mode != hybrid.FailOpen
			check := func(op string, err error, giveBack bool) {
				t.Helper()
				wantOpen := open || giveBack && mode == hybrid.FailOpen
				if wantOpen != errors.Is(err, hybrid.ErrOpen) || !wantOpen && err != nil {
					t.Fatalf("%s: %v; want ErrOpen %v", op, err, wantOpen)
				}
			}
			g, res, err := f.TakeAtMost(ctx, store.Request{Key: "k", Policy: p, Cost: 10})
			check("TakeAtMost", err, false)
			if !open && (g != 4 || res.Remaining != 0) {
				t.Fatalf("TakeAtMost(10) = %d, %+v; want the capacity, 4", g, res)
			}
			rsv, err := f.Reserve(ctx, store.Request{Key: "other", Policy: p, Cost: 1}, time.Minute)
			check("Reserve", err, false)
			if !open && (!rsv.Allowed || rsv.Delay != 0) {
				t.Fatalf("Reserve = %+v; want admitted at once", rsv)
			}
			res, err = f.Refund(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
			check("Refund", err, true)
			if mode == hybrid.LocalFallback && res.Remaining != 1 {
				t.Fatalf("Refund on the local share = %+v; want 1 back", res)
			}
			_, err = f.RefundMulti(ctx, []store.Request{{Key: "k", Policy: p, Cost: 1}})
			check("RefundMulti", err, true)
			ok, _, err := f.CancelReservation(ctx, "queued", p, queued.Ticket)
			check("CancelReservation", err, true)
			if ok {
				t.Fatal("a reservation of the primary's was given back while it is down")
			}
			if f.State() != observe.BreakerOpen {
				t.Fatalf("state %v after five failing calls, want open", f.State())
			}
			if _, _, err := f.TakeAtMost(ctx, store.Request{Key: "k", Policy: p, Cost: -1}); !errors.Is(err, algo.ErrInvalidCost) {
				t.Fatalf("TakeAtMost(-1) = %v, want ErrInvalidCost", err)
			}
		})
	}
}

// TestFallbackOverDenyCacheAtMost: while the primary is down, a grant on
// a key the cache proves empty is refused from the cache in every mode,
// with Redis's own answer, instead of a fresh local share.
func TestFallbackOverDenyCacheAtMost(t *testing.T) {
	p := algo.PerHour(1).Burst(1)
	for _, mode := range []hybrid.Mode{hybrid.LocalFallback, hybrid.FailClosed, hybrid.FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := storetest.NewClock()
			primary := flakyOps{&flaky{Store: newMem(t, clk)}}
			cache := newCache(t, primary, hybrid.DenyCacheConfig{Clock: clk})
			f := newOpsFallback(t, clk, cache, mode)
			if g, _, err := f.TakeAtMost(ctx, store.Request{Key: "abuser", Policy: p, Cost: 5}); g != 1 || err != nil {
				t.Fatalf("TakeAtMost = %d, %v; want the one token", g, err)
			}
			primary.set(true, false)
			for i := range 2 * hybrid.DefaultFailureThreshold {
				g, res, err := f.TakeAtMost(ctx, store.Request{Key: "abuser", Policy: p, Cost: 5})
				if g != 0 || err != nil || res.Allowed || res.RetryAfter < 59*time.Minute {
					t.Fatalf("call %d while down: %d, %+v, %v; want nothing granted, from the cache", i, g, res, err)
				}
			}
			if n := primary.count(); n != 1 {
				t.Fatalf("%d primary calls, want 1: the cache answered the rest", n)
			}
		})
	}
}
