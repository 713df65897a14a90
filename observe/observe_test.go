package observe_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// recorder keeps the decisions it observes.
type recorder struct{ observetest.Recorder }

// take returns the decisions observed since the last take.
func (r *recorder) take() []observe.Decision { return r.Take() }

func newMemstore(t testing.TB, clk store.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestObserveConformance runs the conformance suite on an observed
// memstore: active changes no answer, no error and no charge.
func TestObserveConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		return observe.Wrap(newMemstore(t, clk), "memory", &recorder{})
	})
}

// TestObserveDecisions checks each operation's event: outcome, op, cost,
// the policy and route from the labels, and no key in any label.
func TestObserveDecisions(t *testing.T) {
	clk := storetest.NewClock()
	rec := &recorder{}
	s := observe.Wrap(newMemstore(t, clk), "memory", rec)
	p := algo.PerSecond(1).Burst(2)
	bg := context.Background()
	login := observe.WithLabels(bg, observe.Labels{Route: "POST /login", Policy: "login"})
	shadow := observe.WithLabels(bg, observe.Labels{Route: "POST /login", Policy: "new-login", Shadow: true})
	multi := observe.WithLabels(bg, observe.Labels{Route: "GET /feed", Policy: "first", Policies: []string{"burst", "daily"}})
	const key = "user-7f3a-secret"
	type want struct {
		op            observe.Op
		outcome       observe.Outcome
		policy, route string
		cost          int64
		err           error
	}
	steps := []struct {
		name string
		call func() error
		want []want // nil: no event
	}{
		{"admitted, no labels", func() error { _, err := s.Take(bg, store.Request{Key: key, Policy: p, Cost: 1}); return err },
			[]want{{observe.OpTake, observe.OutcomeAllowed, "", "", 1, nil}}},
		{"admitted, labelled", func() error { _, err := s.Take(login, store.Request{Key: key, Policy: p, Cost: 1}); return err },
			[]want{{observe.OpTake, observe.OutcomeAllowed, "login", "POST /login", 1, nil}}},
		{"denied", func() error { _, err := s.Take(login, store.Request{Key: key, Policy: p, Cost: 1}); return err },
			[]want{{observe.OpTake, observe.OutcomeDenied, "login", "POST /login", 1, nil}}},
		{"shadow denied", func() error { _, err := s.Take(shadow, store.Request{Key: key, Policy: p, Cost: 2}); return err },
			[]want{{observe.OpTake, observe.OutcomeShadowDenied, "new-login", "POST /login", 2, nil}}},
		{"bad input is an error", func() error { _, err := s.Take(login, store.Request{Key: key, Policy: p, Cost: 3}); return err },
			[]want{{observe.OpTake, observe.OutcomeError, "login", "POST /login", 3, algo.ErrCostExceedsCapacity}}},
		{"multi: the denying request names the policy", func() error {
			_, err := s.TakeMulti(multi, []store.Request{{Key: key + "-b", Policy: p, Cost: 1}, {Key: key, Policy: p, Cost: 1}})
			return err
		}, []want{{observe.OpTakeMulti, observe.OutcomeDenied, "daily", "GET /feed", 1, nil}}},
		{"multi: admitted, the closest to denying names it", func() error {
			_, err := s.TakeMulti(multi, []store.Request{{Key: key + "-c", Policy: p, Cost: 1}, {Key: key + "-d", Policy: p, Cost: 2}})
			return err
		}, []want{{observe.OpTakeMulti, observe.OutcomeAllowed, "daily", "GET /feed", 2, nil}}},
		{"refund: not a decision", func() error {
			_, err := s.Refund(login, store.Request{Key: key, Policy: p, Cost: 1})
			return err
		}, nil},
		{"refund: a failure is reported", func() error {
			_, err := s.Refund(login, store.Request{Key: key, Policy: p, Cost: -1})
			return err
		},
			[]want{{observe.OpRefund, observe.OutcomeError, "login", "POST /login", -1, algo.ErrInvalidCost}}},
		{"take at most", func() error {
			_, _, err := s.TakeAtMost(login, store.Request{Key: key + "-e", Policy: p, Cost: 5})
			return err
		},
			[]want{{observe.OpTakeAtMost, observe.OutcomeAllowed, "login", "POST /login", 5, nil}}},
		{"reserve", func() error {
			_, err := s.Reserve(login, store.Request{Key: key, Policy: p, Cost: 1}, time.Second)
			return err
		},
			[]want{{observe.OpReserve, observe.OutcomeAllowed, "login", "POST /login", 1, nil}}},
		{"lease", func() error {
			_, err := s.AcquireLease(login, key, algo.LeasePolicy{Limit: 1, TTL: time.Minute}, "id1")
			return err
		}, []want{{observe.OpAcquireLease, observe.OutcomeAllowed, "login", "POST /login", 1, nil}}},
		{"lease denied", func() error {
			_, err := s.AcquireLease(login, key, algo.LeasePolicy{Limit: 1, TTL: time.Minute}, "id2")
			return err
		}, []want{{observe.OpAcquireLease, observe.OutcomeDenied, "login", "POST /login", 1, nil}}},
		{"release: not a decision", func() error { _, err := s.ReleaseLease(login, key, "id1"); return err }, nil},
	}
	for i, st := range steps {
		err := st.call()
		got := rec.Take()
		if len(got) != len(st.want) {
			t.Fatalf("step %d (%s): %d events %+v, want %d", i, st.name, len(got), got, len(st.want))
		}
		for j, w := range st.want {
			d := got[j]
			if d.Op != w.op || d.Outcome != w.outcome || d.Policy != w.policy || d.Route != w.route || d.Cost != w.cost || d.Store != "memory" {
				t.Errorf("step %d (%s): %v %v policy=%q route=%q cost=%d store=%q, want %v %v %q %q %d memory",
					i, st.name, d.Op, d.Outcome, d.Policy, d.Route, d.Cost, d.Store, w.op, w.outcome, w.policy, w.route, w.cost)
			}
			if !errors.Is(d.Err, w.err) || (w.err != nil) != (err != nil) || !errors.Is(err, w.err) {
				t.Errorf("step %d (%s): event error %v, call error %v, want %v", i, st.name, d.Err, err, w.err)
			}
			d.Err = nil // may name the key: documented as never a label
			if s := fmt.Sprintf("%+v", d); strings.Contains(s, "secret") {
				t.Errorf("step %d (%s): the event carries the key: %s", i, st.name, s)
			}
		}
	}
}

// TestObserveNil checks that no Observer means no wrapper at all.
func TestObserveNil(t *testing.T) {
	ms := newMemstore(t, storetest.NewClock())
	if s := observe.Wrap(ms, "memory", nil); s != store.Store(ms) {
		t.Fatalf("Wrap(s, name, nil) = %T, want s itself", s)
	}
	if s := observe.Wrap(nil, "memory", &recorder{}); s != nil {
		t.Fatalf("Wrap(nil, ...) = %T, want nil", s)
	}
}

// TestObserveAllocs checks that active allocates nothing per call: with
// no Observer (the store itself), and with one that counts.
func TestObserveAllocs(t *testing.T) {
	ms := newMemstore(t, storetest.NewClock())
	var n int
	counting := observe.Funcs{Decision: func(context.Context, observe.Decision) { n++ }}
	p := algo.PerSecond(1).Burst(1_000_000_000)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /", Policy: "api"})
	for _, tc := range []struct {
		name string
		s    store.Store
	}{{"no observer", observe.Wrap(ms, "memory", nil)}, {"counting observer", observe.Wrap(ms, "memory", counting)}} {
		if a := testing.AllocsPerRun(1000, func() { tc.s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}) }); a != 0 {
			t.Errorf("%s: Take allocates %v times per call, want 0", tc.name, a)
		}
	}
	if n == 0 {
		t.Fatal("the counting observer saw nothing")
	}
}

// TestLabels checks that WithLabels' labels reach LabelsFrom through other
// context values, and that a context without them has none.
func TestLabels(t *testing.T) {
	type k struct{}
	l := observe.Labels{Route: "GET /", Policy: "api", Policies: []string{"a", "b"}, Shadow: true}
	ctx := context.WithValue(observe.WithLabels(context.WithValue(context.Background(), k{}, 1), l), k{}, 2)
	got, ok := observe.LabelsFrom(ctx)
	if !ok || got.Route != l.Route || got.Policy != l.Policy || len(got.Policies) != 2 || !got.Shadow {
		t.Fatalf("LabelsFrom = %+v, %v, want %+v", got, ok, l)
	}
	if ctx.Value(k{}) != 2 {
		t.Fatal("WithLabels hid another value")
	}
	if _, ok := observe.LabelsFrom(context.Background()); ok {
		t.Fatal("LabelsFrom(Background) reports labels")
	}
	if !observe.Active() {
		t.Fatal("Active is false after Wrap with an observer")
	}
}

// BenchmarkObserve measures what active adds to a memstore Take on one
// hot key: nothing without an Observer (Wrap returns the store), an
// interface call and a sampled clock reading with one that only counts,
// and the context lookup with labels.
func BenchmarkObserve(b *testing.B) {
	ms := newMemstore(b, nil)
	p := algo.PerSecond(1).Burst(1_000_000_000)
	var n int
	counting := observe.Funcs{Decision: func(context.Context, observe.Decision) { n++ }}
	labelled := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /", Policy: "api"})
	for _, bc := range []struct {
		name string
		s    store.Store
		ctx  context.Context
	}{
		{"memstore", ms, context.Background()},
		{"no observer", observe.Wrap(ms, "memory", nil), context.Background()},
		{"counting", observe.Wrap(ms, "memory", counting), context.Background()},
		{"counting labelled", observe.Wrap(ms, "memory", counting), labelled},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.s.Take(bc.ctx, store.Request{Key: "hot", Policy: p, Cost: 1})
			}
		})
	}
}

// TestObserveCounts checks the counts Wrap keeps for a DecisionCounter:
// exact under concurrent calls, by label set and outcome (a shadow limit's
// denials apart), with every outcome present from a label set's first
// decision; and that the Observer then receives only the timed calls and
// the errors, marked Counted.
func TestObserveCounts(t *testing.T) {
	c := &observetest.Counter{}
	s := observe.Wrap(newMemstore(t, storetest.NewClock()), "memory", c)
	if c.Stores() != 1 {
		t.Fatalf("CountDecisions called %d times, want once", c.Stores())
	}
	p := algo.PerHour(1).Burst(100)
	bg := context.Background()
	login := observe.WithLabels(bg, observe.Labels{Route: "POST /login", Policy: "login"})
	shadow := observe.WithLabels(bg, observe.Labels{Route: "POST /login", Policy: "login-v2", Shadow: true})
	// Route and policy built anew for each call: found by value, not by
	// address.
	built := func(i int) context.Context {
		return observe.WithLabels(bg, observe.Labels{Route: strings.Repeat("GET /feed", 1+i%2)[:9], Policy: string([]byte("feed"))})
	}
	const goroutines, each = 8, 150 // per key: 100 admitted, 50 denied
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			key := fmt.Sprint("user-", g)
			for i := range each {
				s.Take(login, store.Request{Key: key, Policy: p, Cost: 1})
				s.Take(shadow, store.Request{Key: key + "-v2", Policy: p, Cost: 1})
				s.Take(built(i), store.Request{Key: key + "-feed", Policy: p, Cost: 1})
				s.Take(bg, store.Request{Key: key + "-bare", Policy: p, Cost: 1})
			}
		})
	}
	wg.Wait()
	if _, err := s.Take(login, store.Request{Key: "user-0", Policy: p, Cost: 101}); err == nil {
		t.Fatal("a cost above the burst did not fail")
	}
	const allowed, denied = goroutines * 100, goroutines * (each - 100)
	want := map[[3]string][5]uint64{
		{"memory", "login", "POST /login"}:    {observe.OutcomeAllowed: allowed, observe.OutcomeDenied: denied, observe.OutcomeError: 1},
		{"memory", "login-v2", "POST /login"}: {observe.OutcomeAllowed: allowed, observe.OutcomeShadowDenied: denied},
		{"memory", "feed", "GET /feed"}:       {observe.OutcomeAllowed: allowed, observe.OutcomeDenied: denied},
		{"memory", "", ""}:                    {observe.OutcomeAllowed: allowed, observe.OutcomeDenied: denied},
	}
	got := c.Tallies()
	if len(got) != len(want) {
		t.Errorf("%d label sets counted, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%v: counts %v, want %v", k, got[k], w)
		}
	}
	var timed, errs int
	for _, d := range c.Take() {
		if !d.Counted {
			t.Errorf("event %+v not marked Counted", d)
		}
		switch {
		case d.Outcome == observe.OutcomeError:
			errs++
			if d.Policy != "login" || !errors.Is(d.Err, algo.ErrCostExceedsCapacity) {
				t.Errorf("error event %+v", d)
			}
		case d.Timed:
			timed++
		default:
			t.Errorf("event %+v neither timed nor an error", d)
		}
	}
	// About one call in 64 is timed: the first, then the next after every
	// 64th decision of a label set and outcome.
	calls := 4 * goroutines * each
	if errs != 1 || timed < calls/64/2 || timed > calls/64*2 {
		t.Errorf("%d errors and %d timed calls of %d, want 1 and about %d", errs, timed, calls, calls/64)
	}
}

// TestDecisionCountsAdd checks the counts an adapter keeps for decisions
// it receives uncounted.
func TestDecisionCountsAdd(t *testing.T) {
	var dc observe.DecisionCounts
	for _, out := range []observe.Outcome{observe.OutcomeAllowed, observe.OutcomeAllowed, observe.OutcomeShadowDenied, 0, 9} {
		dc.Add(observe.Decision{Outcome: out, Store: "redis", Policy: "p", Route: "r"})
	}
	var got []observe.Tally
	dc.Each(func(t observe.Tally) { got = append(got, t) })
	want := observe.Tally{Store: "redis", Policy: "p", Route: "r", N: [5]uint64{observe.OutcomeAllowed: 2, observe.OutcomeShadowDenied: 1}}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Each saw %+v, want %+v", got, want)
	}
}
