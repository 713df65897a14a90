package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// counter is an observe.DecisionCounter that keeps the counts it is given
// and the events it receives.
type counter struct {
	observetest.Recorder
	mu     sync.Mutex
	counts []*observe.DecisionCounts
}

func (c *counter) CountDecisions(dc *observe.DecisionCounts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = append(c.counts, dc)
}

// tallies sums c's counts by label set.
func (c *counter) tallies() map[[3]string][5]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[[3]string][5]uint64{}
	for _, t := range observe.SumTallies(c.counts...) {
		out[[3]string{t.Store, t.Policy, t.Route}] = t.N
	}
	return out
}

// TestCountTakesConformance runs the conformance suite on a Store observed
// by a DecisionCounter, whose Takes the Store counts itself: counting
// changes no answer, no error and no charge, for any operation.
func TestCountTakesConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		s, err := memstore.New(memstore.Config{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return observe.Wrap(s, "memory", &counter{})
	})
}

// TestCountTakesExact checks the counts of Takes a Store counts itself:
// exact by label set and outcome with more label sets than the tap has
// slots, from concurrent goroutines while the counts are read (run it
// with -race), a shadow limit's denials apart, every failure counted once
// and reported; the other operations still reported by the wrapper; and a
// Store observed twice counted by both observers.
func TestCountTakesExact(t *testing.T) {
	ms, err := memstore.New(memstore.Config{Clock: storetest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	inner, outer := &counter{}, &counter{}
	once := observe.Wrap(ms, "memory", inner)
	s := observe.Wrap(once, "outer", outer)
	for _, o := range []store.Store{once, s} {
		if _, ok := o.(interface {
			store.Store
			store.Store
			store.Store
			store.Store
			store.Store
			io.Closer
		}); !ok {
			t.Fatalf("%T does not show every interface a memstore.Store has", o)
		}
	}
	const sets = observe.TapSlots + 36 // some label sets find no slot
	ctxs := make([]context.Context, sets)
	for i := range ctxs {
		ctxs[i] = observe.WithLabels(context.Background(), observe.Labels{
			Route: fmt.Sprint("GET /r", i%7), Policy: fmt.Sprint("p", i), Shadow: i%5 == 0,
		})
	}
	p := algo.PerHour(1).Burst(3)
	const goroutines, rounds = 4, 6 // per key and label set: 3 admitted, 3 denied
	stop := make(chan struct{})
	var reads atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { // an exporter reading the counts meanwhile
		for {
			select {
			case <-stop:
				return
			default:
				outer.tallies()
				inner.tallies()
				reads.Add(1)
			}
		}
	})
	var work sync.WaitGroup
	for g := range goroutines {
		work.Go(func() {
			for r := range rounds {
				for i, ctx := range ctxs {
					if _, err := s.Take(ctx, store.Request{Key: fmt.Sprint("k", g, "-", i), Policy: p, Cost: 1}); err != nil {
						t.Error(err)
					}
					if r == 0 && i%9 == 0 {
						s.Take(ctx, store.Request{Key: "", Policy: p, Cost: 1}) // fails: counted and reported once
					}
				}
			}
		})
	}
	work.Wait()
	close(stop)
	wg.Wait()
	if _, err := s.Refund(ctxs[1], store.Request{Key: "", Policy: p, Cost: 1}); err == nil {
		t.Fatal("a refund on an empty key did not fail")
	}
	for name, c := range map[string]*counter{"memory": inner, "outer": outer} {
		got := c.tallies()
		if len(got) != sets {
			t.Errorf("%s: %d label sets counted, want %d", name, len(got), sets)
		}
		for i := range ctxs {
			var want [5]uint64
			want[observe.OutcomeAllowed] = goroutines * 3
			if i%5 == 0 {
				want[observe.OutcomeShadowDenied] = goroutines * 3
			} else {
				want[observe.OutcomeDenied] = goroutines * 3
			}
			if i%9 == 0 {
				want[observe.OutcomeError] = goroutines
			}
			if i == 1 { // the failed refund: a failure of any call counts
				want[observe.OutcomeError]++
			}
			k := [3]string{name, fmt.Sprint("p", i), fmt.Sprint("GET /r", i%7)}
			if got[k] != want {
				t.Errorf("%v: counts %v, want %v", k, got[k], want)
			}
		}
		var takeErrs, refundErrs, timed int
		for _, d := range c.Take() {
			switch {
			case d.Op == observe.OpRefund && errors.Is(d.Err, store.ErrEmptyKey):
				refundErrs++
			case d.Op == observe.OpTake && d.Outcome == observe.OutcomeError && errors.Is(d.Err, store.ErrEmptyKey):
				takeErrs++
			case d.Op == observe.OpTake && d.Timed && d.Outcome != observe.OutcomeError:
				timed++
			default:
				t.Errorf("%s: unexpected event %+v", name, d)
			}
		}
		errs := goroutines * ((sets + 8) / 9)
		if takeErrs != errs || refundErrs != 1 {
			t.Errorf("%s: %d take and %d refund errors reported, want %d and 1", name, takeErrs, refundErrs, errs)
		}
		if calls := goroutines * rounds * sets; timed < 1 || timed > calls/16 {
			t.Errorf("%s: %d of %d calls timed, want about 1 in 64", name, timed, calls)
		}
	}
	if reads.Load() == 0 {
		t.Error("the counts were never read while counting")
	}
}
