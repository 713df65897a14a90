package ratebucket_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestMain fails the run if any goroutine outlives the tests.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// newMemstore returns a memstore on clk, closed when t ends.
func newMemstore(t testing.TB, clk store.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// timerClock is a clock.Mock that reports each Timer it makes, after the
// timer is registered: a test that has received from timers knows that
// advancing the mock will fire it. No sleeping is needed to synchronise.
type timerClock struct {
	*clock.Mock
	timers chan time.Duration
}

func (c timerClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.timers <- d
	return t
}

// hookStore counts Takes and runs before ahead of each one. It reserves
// nothing (store.ErrUnsupported, as a store under a window algorithm
// answers), so Wait over it retries Take.
type hookStore struct {
	store.Store
	calls  atomic.Int64
	keys   chan string
	before func(n int64)
}

func (h *hookStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	key := req.Key
	n := h.calls.Add(1)
	if h.keys != nil {
		h.keys <- key
	}
	if h.before != nil {
		h.before(n)
	}
	return h.Store.Take(ctx, req)
}

func (h *hookStore) Reserve(context.Context, store.Request, time.Duration) (algo.Reservation, error) {
	return algo.Reservation{}, store.ErrUnsupported
}

// rig is a limiter of burst 2 refilled 1 per second over a memstore, both
// on one mock clock.
type rig struct {
	clk   timerClock
	store *hookStore
	lim   *ratebucket.Limiter
}

func newRig(t *testing.T) *rig {
	t.Helper()
	var hs *hookStore
	r := newRigOver(t, func(ms *memstore.Store) store.Store { hs = &hookStore{Store: ms}; return hs })
	r.store = hs
	return r
}

// newRigOver is newRig with the memstore wrapped in the store wrap returns.
func newRigOver(t *testing.T, wrap func(*memstore.Store) store.Store) *rig {
	t.Helper()
	clk := timerClock{Mock: clock.NewMock(), timers: make(chan time.Duration, 16)}
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ms, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	lim, err := ratebucket.NewLimiter(wrap(ms), algo.PerSecond(1).Burst(2), ratebucket.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{clk: clk, lim: lim}
}

// drain takes every token of key.
func (r *rig) drain(t *testing.T, key string) {
	t.Helper()
	if res, err := r.lim.Take(context.Background(), key, 2); err != nil || !res.Allowed {
		t.Fatalf("drain: %+v, %v", res, err)
	}
}

// remaining peeks at key.
func (r *rig) remaining(t *testing.T, key string) int64 {
	t.Helper()
	res, err := r.lim.Take(context.Background(), key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

type waitResult struct {
	res ratebucket.Result
	err error
}

// wait starts Wait in a goroutine.
func (r *rig) wait(ctx context.Context, key string, cost int64) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		res, err := r.lim.Wait(ctx, key, cost)
		done <- waitResult{res, err}
	}()
	return done
}

// timer receives the next timer Wait makes and checks its duration.
func (r *rig) timer(t *testing.T, want time.Duration) {
	t.Helper()
	if got := <-r.clk.timers; got != want {
		t.Fatalf("Wait set a timer of %v, want %v", got, want)
	}
}

func TestWaitSleepsExactlyRetryAfter(t *testing.T) {
	r := newRig(t)
	r.drain(t, "k")
	done := r.wait(context.Background(), "k", 1)
	r.timer(t, time.Second)
	r.clk.Add(time.Second)
	got := <-done
	if got.err != nil || !got.res.Allowed {
		t.Fatalf("Wait = %+v, %v; want admitted", got.res, got.err)
	}
	if n := r.store.calls.Load(); n != 3 { // drain, denied try, admitted try
		t.Fatalf("%d Takes, want 3", n)
	}
}

func TestWaitRetriesWhenAnotherCallerWins(t *testing.T) {
	r := newRig(t)
	r.drain(t, "k")
	r.store.before = func(n int64) {
		if n == 3 { // just before Wait's retry, someone else takes the token
			if res, err := r.store.Store.Take(context.Background(), store.Request{Key: "k", Policy: r.lim.Policy(), Cost: 1}); err != nil || !res.Allowed {
				t.Errorf("competing take: %+v, %v", res, err)
			}
		}
	}
	done := r.wait(context.Background(), "k", 1)
	r.timer(t, time.Second)
	r.clk.Add(time.Second)
	r.timer(t, time.Second) // lost the race: waits for the next token
	r.clk.Add(time.Second)
	if got := <-done; got.err != nil || !got.res.Allowed {
		t.Fatalf("Wait = %+v, %v; want admitted", got.res, got.err)
	}
}

func TestWaitDeadline(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		admit   bool
	}{
		{"deadline before admission", 999 * time.Millisecond, false},
		{"deadline at admission", time.Second, false}, // ctx is done by then
		{"deadline 1µs after admission", time.Second + time.Microsecond, true},
		{"deadline after admission", 2 * time.Second, true},
	}
	for _, rg := range rigs {
		for _, tc := range tests {
			t.Run(rg.name+"/"+tc.name, func(t *testing.T) {
				r := rg.make(t)
				r.drain(t, "k")
				ctx, cancel := r.clk.WithTimeout(context.Background(), tc.timeout)
				defer cancel()
				done := r.wait(ctx, "k", 1)
				if !tc.admit {
					got := <-done
					if !errors.Is(got.err, ratebucket.ErrWouldExceedDeadline) || !errors.Is(got.err, context.DeadlineExceeded) {
						t.Fatalf("Wait = %+v, %v; want ErrWouldExceedDeadline matching context.DeadlineExceeded", got.res, got.err)
					}
					if r.store != nil && got.res.RetryAfter != time.Second { // retrying Take
						t.Fatalf("Wait's Result %+v, want the denial with RetryAfter 1s", got.res)
					}
					if len(r.clk.timers) != 0 {
						t.Fatal("Wait set a timer although it could not succeed")
					}
					r.clk.Add(time.Second)
					if n := r.remaining(t, "k"); n != 1 {
						t.Fatalf("%d tokens after 1s, want 1: the failed Wait charged", n)
					}
					return
				}
				r.timer(t, time.Second)
				r.clk.Add(time.Second)
				if got := <-done; got.err != nil || !got.res.Allowed {
					t.Fatalf("Wait = %+v, %v; want admitted", got.res, got.err)
				}
			})
		}
	}
}

func TestWaitCanceledWhileWaiting(t *testing.T) {
	for _, rg := range rigs {
		t.Run(rg.name, func(t *testing.T) {
			r := rg.make(t)
			r.drain(t, "k")
			ctx, cancel := context.WithCancel(context.Background())
			done := r.wait(ctx, "k", 1)
			r.timer(t, time.Second)
			cancel()
			if got := <-done; !errors.Is(got.err, context.Canceled) || got.res.Allowed {
				t.Fatalf("Wait = %+v, %v; want context.Canceled", got.res, got.err)
			}
			r.clk.Add(time.Second)
			if n := r.remaining(t, "k"); n != 1 {
				t.Fatalf("%d tokens after 1s, want 1: the canceled Wait charged", n)
			}
		})
	}
}

func TestWaitErrorsAtOnce(t *testing.T) {
	tests := []struct {
		name string
		key  string
		cost int64
		want error
	}{
		{"cost above capacity", "k", 3, algo.ErrCostExceedsCapacity},
		{"negative cost", "k", -1, algo.ErrInvalidCost},
		{"empty key", "", 1, store.ErrEmptyKey},
	}
	for _, rg := range rigs {
		for _, tc := range tests {
			t.Run(rg.name+"/"+tc.name, func(t *testing.T) {
				r := rg.make(t)
				if _, err := r.lim.Wait(context.Background(), tc.key, tc.cost); !errors.Is(err, tc.want) {
					t.Fatalf("Wait(%q, %d) error %v, want %v", tc.key, tc.cost, err, tc.want)
				}
			})
		}
	}
}

func TestNewLimiterRejectsBadInput(t *testing.T) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	tests := []struct {
		name   string
		store  store.Store
		policy algo.Policy
		want   error
	}{
		{"nil store", nil, algo.PerSecond(1).Burst(1), ratebucket.ErrNilStore},
		{"zero policy", ms, algo.Policy{}, algo.ErrInvalidPolicy},
		{"zero rate", ms, algo.PerSecond(0).Burst(1), algo.ErrInvalidPolicy},
		{"zero burst", ms, algo.PerSecond(1).Burst(0), algo.ErrInvalidPolicy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := ratebucket.NewLimiter(tc.store, tc.policy, ratebucket.Config{})
			if !errors.Is(err, tc.want) || lim != nil {
				t.Fatalf("NewLimiter = %v, %v; want nil, %v", lim, err, tc.want)
			}
		})
	}
}

func TestLimiterPrefixesKeys(t *testing.T) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	hs := &hookStore{Store: ms, keys: make(chan string, 1)}
	p := algo.PerSecond(1).Burst(3)
	lim, err := ratebucket.NewLimiter(hs, p, ratebucket.Config{Prefix: "login:"})
	if err != nil {
		t.Fatal(err)
	}
	if lim.Policy() != p || lim.Store() != store.Store(hs) {
		t.Fatalf("Policy() = %v, Store() = %v", lim.Policy(), lim.Store())
	}
	res, err := lim.Allow(context.Background(), "alice")
	if err != nil || !res.Allowed || res.Remaining != 2 {
		t.Fatalf("Allow = %+v, %v; want admitted with 2 remaining", res, err)
	}
	if key := <-hs.keys; key != "login:alice" {
		t.Fatalf("store saw key %q, want %q", key, "login:alice")
	}
	// The bucket is the prefixed key's: a Take on the store sees the charge.
	if res, _ := ms.Take(context.Background(), store.Request{Key: "login:alice", Policy: p, Cost: 0}); res.Remaining != 2 {
		t.Fatalf("bucket login:alice has %d remaining, want 2", res.Remaining)
	}
	if _, err := lim.Allow(context.Background(), ""); !errors.Is(err, store.ErrEmptyKey) {
		t.Fatalf("Allow with an empty key and a prefix: %v, want ErrEmptyKey", err)
	}
}

func TestZeroLimiter(t *testing.T) {
	var lim ratebucket.Limiter
	for name, call := range map[string]func() error{
		"Allow": func() error { _, err := lim.Allow(context.Background(), "k"); return err },
		"Take":  func() error { _, err := lim.Take(context.Background(), "k", 1); return err },
		"Wait":  func() error { _, err := lim.Wait(context.Background(), "k", 1); return err },
	} {
		if err := call(); !errors.Is(err, ratebucket.ErrNilStore) {
			t.Errorf("%s on the zero Limiter: %v, want ErrNilStore", name, err)
		}
	}
}
