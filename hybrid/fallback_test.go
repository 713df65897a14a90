package hybrid_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestMain fails the run if any goroutine outlives the tests. go-redis's
// own log lines (a refused dial, which TestRefusedAndHungRedis makes on
// purpose) are dropped: the tests assert the errors themselves. The
// goroutines allowed to outlive them (go-redis's dial prober after a node
// is killed on purpose, TestLeasesClusterFailover) are internal/leaktest's.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	leaktest.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// errDown is the failure the flaky store injects.
var errDown = errors.New("test: primary down")

// flaky is a store that fails on demand: it returns errDown while down,
// and while hanging it blocks until its context ends (a primary that
// never answers). Otherwise it passes calls to s. It records the deadline
// of the last call it received.
type flaky struct {
	store.Store
	mu       sync.Mutex
	down     bool
	hang     bool
	calls    int
	deadline time.Duration // time from the call to its deadline
	hung     chan struct{} // if set, told of each call that starts hanging
}

func (f *flaky) set(down, hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down, f.hang = down, hang
}

func (f *flaky) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	f.mu.Lock()
	f.calls++
	down, hang := f.down, f.hang
	f.deadline = 0
	if d, ok := ctx.Deadline(); ok {
		f.deadline = time.Until(d)
		if f.deadline == 0 {
			f.deadline = -1
		}
	}
	f.mu.Unlock()
	switch {
	case hang:
		if f.hung != nil {
			f.hung <- struct{}{}
		}
		<-ctx.Done()
		return algo.Result{}, ctx.Err()
	case down:
		return algo.Result{}, errDown
	}
	return f.Store.Take(ctx, req)
}

func (f *flaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// rig is a Fallback over a flaky memstore with a local memstore, all on
// one manual clock, recording state changes and log lines. Its Timeout is
// unhurried unless the test sets one.
type rig struct {
	clk     *storetest.Clock
	primary *flaky
	f       *hybrid.Fallback
	log     bytes.Buffer
	mu      sync.Mutex
	changes []string
}

func newRig(t *testing.T, cfg hybrid.FallbackConfig) *rig {
	t.Helper()
	r := &rig{clk: storetest.NewClock()}
	r.primary = &flaky{Store: newMem(t, r.clk)}
	cfg.Clock = r.clk
	if cfg.Timeout == 0 {
		cfg.Timeout = unhurried
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&r.log, nil))
	cfg.OnStateChange = func(from, to observe.BreakerState) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.changes = append(r.changes, from.String()+">"+to.String())
	}
	var local store.Store
	if cfg.Mode == hybrid.LocalFallback {
		local = newMem(t, r.clk)
	}
	f, err := hybrid.NewFallback(r.primary, local, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.f = f
	return r
}

func (r *rig) take(t *testing.T, key string) (algo.Result, error) {
	t.Helper()
	return r.f.Take(ctx, store.Request{Key: key, Policy: algo.PerSecond(2).Burst(100), Cost: 1})
}

func (r *rig) history() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.changes, " ")
}

func TestFallbackConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		f, err := hybrid.NewFallback(newMem(t, clk), newMem(t, clk), hybrid.FallbackConfig{Clock: clk, Timeout: unhurried})
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

// TestFallbackBreaker walks the breaker through its states with a manual
// clock: five consecutive failures open it, calls then go to the local
// store without touching the primary, the cool-down half-opens it, and a
// probe closes it (or opens it again when the primary still fails).
func TestFallbackBreaker(t *testing.T) {
	tests := []struct {
		name        string
		probeFails  bool
		wantState   observe.BreakerState
		wantHistory string
	}{
		{"probe succeeds", false, observe.BreakerClosed, "closed>open open>half-open half-open>closed"},
		{"probe fails", true, observe.BreakerOpen, "closed>open open>half-open half-open>open"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, hybrid.FallbackConfig{CoolDown: time.Second})
			r.primary.set(true, false)
			for i := range hybrid.DefaultFailureThreshold {
				res, err := r.take(t, "k")
				if err != nil || !res.Allowed {
					t.Fatalf("failure %d: %+v %v: want a local answer", i, res, err)
				}
				if want := observe.BreakerClosed; i < hybrid.DefaultFailureThreshold-1 && r.f.State() != want {
					t.Fatalf("after %d failures: %v", i+1, r.f.State())
				}
			}
			if r.f.State() != observe.BreakerOpen {
				t.Fatalf("after %d failures: %v, want open", hybrid.DefaultFailureThreshold, r.f.State())
			}
			calls := r.primary.count()
			for range 10 {
				if res, err := r.take(t, "k"); err != nil || !res.Allowed {
					t.Fatalf("open: %+v %v", res, err)
				}
			}
			if r.primary.count() != calls {
				t.Fatalf("open breaker called the primary %d times", r.primary.count()-calls)
			}
			r.clk.Add(time.Second - time.Microsecond)
			r.take(t, "k")
			if r.f.State() != observe.BreakerOpen || r.primary.count() != calls {
				t.Fatalf("before the cool-down: %v, %d calls", r.f.State(), r.primary.count()-calls)
			}
			r.clk.Add(time.Microsecond)
			r.primary.set(tc.probeFails, false)
			r.take(t, "k")
			if r.f.State() != tc.wantState || r.primary.count() != calls+1 {
				t.Fatalf("after the probe: %v, %d calls", r.f.State(), r.primary.count()-calls)
			}
			if h := r.history(); h != tc.wantHistory {
				t.Fatalf("state changes %q, want %q", h, tc.wantHistory)
			}
			if !strings.Contains(r.log.String(), "level=WARN") || !strings.Contains(r.log.String(), "to=open") ||
				!strings.Contains(r.log.String(), "test: primary down") {
				t.Fatalf("log lacks the opening:\n%s", r.log.String())
			}
		})
	}
}

// TestFallbackRatio: failures that are never five in a row still open the
// breaker once half of at least MinCalls calls in the window failed, and a
// new window starts the count again.
func TestFallbackRatio(t *testing.T) {
	r := newRig(t, hybrid.FallbackConfig{MinCalls: 10, Window: time.Minute})
	for i := range 9 {
		r.primary.set(i%2 == 0, false)
		r.take(t, "k")
	}
	r.clk.Add(time.Minute) // a new window: the 5 failures of 9 are forgotten
	for i := range 10 {
		if r.f.State() != observe.BreakerClosed {
			t.Fatalf("opened after %d calls of the new window", i)
		}
		r.primary.set(i%2 == 1, false)
		r.take(t, "k")
	}
	if r.f.State() != observe.BreakerOpen {
		t.Fatalf("5 failures of 10: %v, want open", r.f.State())
	}
}

// TestFallbackNeutral: bad input, a caller's own cancelled context and
// errors of a closed primary never count against the primary, and bad
// input is returned unchanged even while the breaker is open.
func TestFallbackNeutral(t *testing.T) {
	r := newRig(t, hybrid.FallbackConfig{})
	p := algo.PerSecond(2).Burst(100)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		key  string
		p    algo.Policy
		cost int64
		want error
	}{
		{"empty key", ctx, "", p, 1, store.ErrEmptyKey},
		{"cost above capacity", ctx, "k", p, 101, algo.ErrCostExceedsCapacity},
		{"negative cost", ctx, "k", p, -1, algo.ErrInvalidCost},
		{"zero policy", ctx, "k", algo.Policy{}, 1, algo.ErrInvalidPolicy},
		{"cancelled", cancelled, "k", p, 1, context.Canceled},
	}
	for _, open := range []bool{false, true} {
		for _, tc := range tests {
			for range 2 * hybrid.DefaultFailureThreshold {
				if _, err := r.f.Take(tc.ctx, store.Request{Key: tc.key, Policy: tc.p, Cost: tc.cost}); !errors.Is(err, tc.want) {
					t.Fatalf("%s (open %v): err %v, want %v", tc.name, open, err, tc.want)
				}
			}
			if want := map[bool]observe.BreakerState{false: observe.BreakerClosed, true: observe.BreakerOpen}[open]; r.f.State() != want {
				t.Fatalf("%s: state %v, want %v", tc.name, r.f.State(), want)
			}
		}
		r.primary.set(true, false)
		for range hybrid.DefaultFailureThreshold {
			r.take(t, "k")
		}
	}
}

// TestFallbackModes: what each mode answers while the primary is down.
func TestFallbackModes(t *testing.T) {
	tests := []struct {
		mode      hybrid.Mode
		wantErr   bool
		wantAllow bool
	}{
		{hybrid.LocalFallback, false, true},
		{hybrid.FailOpen, false, true},
		{hybrid.FailClosed, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			r := newRig(t, hybrid.FallbackConfig{Mode: tc.mode})
			r.primary.set(true, false)
			for i := range 2 * hybrid.DefaultFailureThreshold { // failing calls, then an open breaker
				res, err := r.take(t, "k")
				if (err != nil) != tc.wantErr || res.Allowed != tc.wantAllow {
					t.Fatalf("call %d: %+v %v", i, res, err)
				}
				if tc.wantErr && (!errors.Is(err, hybrid.ErrOpen) || !errors.Is(err, errDown)) {
					t.Fatalf("call %d: %v does not wrap ErrOpen and the cause", i, err)
				}
			}
		})
	}
	if _, err := hybrid.NewFallback(&flaky{}, nil, hybrid.FallbackConfig{}); !errors.Is(err, hybrid.ErrInvalidConfig) {
		t.Fatalf("LocalFallback without a local store: %v", err)
	}
}

// TestFallbackTimeout: a hanging primary is given a deadline of Timeout
// and its timeouts count as failures, so the breaker opens.
func TestFallbackTimeout(t *testing.T) {
	r := newRig(t, hybrid.FallbackConfig{Timeout: 5 * time.Millisecond})
	r.primary.set(false, true)
	for range hybrid.DefaultFailureThreshold {
		if res, err := r.take(t, "k"); err != nil || !res.Allowed {
			t.Fatalf("%+v %v", res, err)
		}
		r.primary.mu.Lock()
		d := r.primary.deadline
		r.primary.mu.Unlock()
		if d == 0 || d > 5*time.Millisecond {
			t.Fatalf("primary got a deadline %v away, want one at most the 5ms Timeout away", d)
		}
	}
	if r.f.State() != observe.BreakerOpen {
		t.Fatalf("state %v after timeouts", r.f.State())
	}
}

// TestFallbackCallerDeadline: callers whose deadlines are shorter than
// Timeout still open a hanging primary's breaker, and get their context's
// error; a caller who cancels proves nothing.
func TestFallbackCallerDeadline(t *testing.T) {
	r := newRig(t, hybrid.FallbackConfig{Timeout: time.Minute})
	r.primary.set(false, true)
	p := algo.PerSecond(2).Burst(100)
	for range hybrid.DefaultFailureThreshold {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		_, err := r.f.Take(cctx, store.Request{Key: "k", Policy: p, Cost: 1})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want the caller's deadline", err)
		}
	}
	if r.f.State() != observe.BreakerOpen {
		t.Fatalf("state %v, want open", r.f.State())
	}
}

// TestFallbackProbesBounded: while one probe hangs in the half-open
// breaker, other calls are answered locally at once rather than queueing.
func TestFallbackProbesBounded(t *testing.T) {
	r := newRig(t, hybrid.FallbackConfig{Timeout: time.Minute, CoolDown: time.Second})
	r.primary.set(true, false)
	for range hybrid.DefaultFailureThreshold {
		r.take(t, "k")
	}
	r.clk.Add(time.Second)
	r.primary.set(false, true)
	r.primary.hung = make(chan struct{}, 1)
	probeCtx, release := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := r.f.Take(probeCtx, store.Request{Key: "k", Policy: algo.PerSecond(2).Burst(100), Cost: 1})
		done <- err
	}()
	<-r.primary.hung // the probe is in the primary
	for range 100 {
		if res, err := r.take(t, "other"); err != nil || !res.Allowed {
			t.Fatalf("%+v %v", res, err)
		}
	}
	if n := r.primary.count(); n != hybrid.DefaultFailureThreshold+1 {
		t.Fatalf("%d primary calls while one probe was in flight, want 1", n-hybrid.DefaultFailureThreshold)
	}
	release()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("probe: %v", err)
	}
}

// TestFallbackShareBound: with the primary down and four instances, one
// instance admits at most a quarter of the policy over a simulated minute.
func TestFallbackShareBound(t *testing.T) {
	r := newRig(t, hybrid.FallbackConfig{Instances: 4})
	r.primary.set(true, false)
	admitted := 0
	for range 6000 { // 100 a second for 60s
		if res, _ := r.take(t, "k"); res.Allowed {
			admitted++
		}
		r.clk.Add(10 * time.Millisecond)
	}
	if want := 25 + 30; admitted > want || admitted < want-1 {
		t.Fatalf("admitted %d in 60s, want the share's 25 + 0.5/s·60s = %d", admitted, want)
	}
}

// TestFallbackOverDenyCache: local denials of a DenyCache under the
// Fallback prove nothing about the primary's health, so an abusive key
// denied locally does not keep a failing primary's breaker closed; and
// while the breaker is open the abuser, certainly denied by Redis's last
// word, stays denied instead of getting a fresh local share (in every
// mode), and under LocalFallback gets no more than Redis's own refill.
func TestFallbackOverDenyCache(t *testing.T) {
	for _, mode := range []hybrid.Mode{hybrid.LocalFallback, hybrid.FailClosed, hybrid.FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := storetest.NewClock()
			primary := &flaky{Store: newMem(t, clk)}
			cache := newCache(t, primary, hybrid.DenyCacheConfig{Clock: clk})
			f, err := hybrid.NewFallback(cache, newMem(t, clk), hybrid.FallbackConfig{Mode: mode, Clock: clk, Timeout: unhurried, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			p := algo.PerHour(1).Burst(1)
			f.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1}) // drains it: the cache denies it from now on
			primary.set(true, false)
			for i := range hybrid.DefaultFailureThreshold {
				f.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1})
				f.Take(ctx, store.Request{Key: fmt.Sprint("user", i), Policy: p, Cost: 1})
			}
			if f.State() != observe.BreakerOpen || cache.Stats().Denied != hybrid.DefaultFailureThreshold {
				t.Fatalf("state %v, cache %+v: want open after 5 failures among local denials", f.State(), cache.Stats())
			}
			for i := range 10 {
				res, err := f.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1})
				if err != nil || res.Allowed || res.RetryAfter < 59*time.Minute {
					t.Fatalf("abuser while open, %d: %+v %v: want Redis's denial, from the cache", i, res, err)
				}
			}
			if got := cache.Stats().Denied; got != hybrid.DefaultFailureThreshold+10 {
				t.Fatalf("%d local denials", got)
			}
			if mode != hybrid.LocalFallback {
				return
			}
			// An hour on, Redis would have refilled one token: the local
			// share admits one request, the cache counts it, and denies
			// the next.
			clk.Add(time.Hour)
			for i, want := range []bool{true, false, false} {
				if res, err := f.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1}); err != nil || res.Allowed != want {
					t.Fatalf("an hour on, request %d: %+v %v, want allowed %v", i, res, err, want)
				}
			}
			// Redis back: the probe closes the breaker and the cache
			// forgets what it counted locally (Redis never saw it), so
			// Redis, which refilled a token in that hour, admits the
			// abuser once more.
			primary.set(false, false)
			clk.Add(hybrid.DefaultCoolDown)
			f.Take(ctx, store.Request{Key: "someone", Policy: p, Cost: 1})
			calls := primary.count()
			if res, err := f.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1}); f.State() != observe.BreakerClosed || err != nil || !res.Allowed || primary.count() != calls+1 {
				t.Fatalf("after recovery: %v, %+v %v, %d calls: want Redis's admission", f.State(), res, err, primary.count()-calls)
			}
		})
	}
}

// BenchmarkFallbackClosed measures what the closed breaker adds to a call
// (the deadline's context and the breaker's bookkeeping) over memstore.
func BenchmarkFallbackClosed(b *testing.B) {
	for _, name := range []string{"memstore", "fallback"} {
		b.Run(name, func(b *testing.B) {
			var s store.Store = newMem(b, nil)
			if name == "fallback" {
				f, err := hybrid.NewFallback(s, newMem(b, nil), hybrid.FallbackConfig{})
				if err != nil {
					b.Fatal(err)
				}
				s = f
			}
			p := algo.PerSecond(1_000_000).Burst(1_000_000)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
				}
			})
		})
	}
}
