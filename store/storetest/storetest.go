// Package storetest is the conformance suite every [store.Store] must pass.
//
// A backend's test calls [Run] with a constructor:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
//			s, err := memstore.New(memstore.Config{Clock: clk})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Run calls the constructor once per subtest with a fresh manual [Clock]
// that the store must read for its notion of now (a Redis store uses its
// client clock). Nothing in the suite sleeps: time moves only when the suite
// moves the Clock.
//
// # What is checked
//
// The suite assumes the store applies algo.TokenBucket and checks, through
// the Store interface only:
//
//   - Reference: every Result equals what algo.TokenBucket computes on the
//     same sequence of requests, with the reference state kept in the test.
//   - Law: over every interval [t1, t2], the admitted cost is at most
//     capacity + ⌊rate·(t2−t1)⌋.
//   - RetryAfter: a denied request is admitted exactly RetryAfter later and
//     still denied one microsecond earlier.
//   - Remaining: 0 ≤ Remaining ≤ Capacity, RetryAfter is zero exactly when
//     allowed, and after ResetAfter of idleness the bucket is full.
//   - Backwards: a clock that jumps backwards mints no tokens, and results
//     still match the reference, which here allows for a store forgetting
//     a bucket once it is full (a forgotten bucket has lost its stamp).
//   - Extremes: policies and times at the edges of the documented ranges
//     (capacity 1e9, year-long periods, the year 2255) still match the
//     reference exactly, as a backend computing in doubles must.
//   - Peek: cost 0 is always allowed and changes nothing later requests see.
//   - Isolation: keys never share tokens, even with different policies.
//   - Concurrent: many goroutines on one key never admit more than the law
//     allows; with the clock frozen, exactly capacity are admitted.
//   - BadInput: an empty key, a key longer than store.DefaultMaxKeyLen,
//     an invalid policy, a negative cost or a cost above capacity is an
//     error matching the sentinel (store.ErrEmptyKey, store.ErrKeyTooLong,
//     algo.ErrInvalidPolicy, algo.ErrInvalidCost,
//     algo.ErrCostExceedsCapacity) and charges nothing; a key of exactly
//     store.DefaultMaxKeyLen bytes works. (The store must be built with
//     the default MaxKeyLen.)
//   - Context: a context that has already ended gives an error matching
//     its cause (context.Canceled, context.DeadlineExceeded) and charges
//     nothing.
//   - Multi: all-or-nothing
//     charging, the denying index with the longest retry-after, bad input
//     anywhere in the request charges nothing, and a key named twice in one
//     request is either refused with [store.ErrDuplicateKey] (charging
//     nothing) or treated as one request of the combined cost.
//   - Quota: calendar quotas (algo.Quota) give algo's Results across day,
//     week, month and year boundaries, leap days and the 2^53 µs bound,
//     deny until exactly the next period's first µs, are refunded as algo
//     refunds them, and, in a multi-limit take beside a
//     token bucket, charge both or neither.
//   - QuotaUnsupported: a calendar quota's TakeAtMost, Reserve and
//     CancelReservation fail with algo.ErrQuotaUnsupported and its text,
//     charging nothing, on every backend alike.
//   - Leases: a rapid state
//     machine of acquires, crashes (leases never released), releases,
//     renewals and clock moves over a few keys gives algo's lease
//     functions' answers on the same calls, and by a ledger of its own
//     grants never more than the limit live, a lease's slot free exactly
//     at its expiry, and a release or renewal of a lease that is not live
//     reported as a no-op; concurrent acquires at a frozen clock never
//     exceed the limit; lease keys are apart from bucket keys; bad input
//     or a done context is an error matching its sentinel and changes
//     nothing; after Close, store.ErrClosed.
//   - Refund: takes and
//     refunds of any size match algo.TokenBucket's; a take refunded at once
//     changes nothing any later request sees; RefundMulti matches the
//     reference, and bad input anywhere in it refunds nothing; bad input
//     to Refund is an error matching its sentinel and changes nothing.
//   - TakeAtMost: grants and
//     Results match algo.TokenBucket's, for any n; bad input as above.
//   - Reserve: reservations,
//     cancellations in any order (early or late) and takes match
//     algo.TokenBucket's, tickets included; what proceeds at its admitted
//     time, cancelled reservations left out, keeps the law; reservations
//     cancelled from the latest back leave the key as one that never
//     reserved; concurrent reservations at a frozen clock admit exactly
//     one bucket at once and one in debt, a token's refill apart; bad
//     input as above, and a forged ticket is algo.ErrInvalidReservation.
//   - Settle: takes, holds and settlements (early, late, twice) on one key
//     match algo.TokenBucket's Hold and Settle, a hold settled or unknown
//     is algo.ErrHoldSettled; bad settles (a negative or overflowing
//     actual cost, another policy, a forged or unknown hold) are errors
//     matching their sentinels, input errors, and charge or give back
//     nothing; past its deadline a hold is algo.ErrHoldExpired and its
//     estimate stays charged; bad input to Hold (and a ttl outside [1µs,
//     algo.MaxHoldTTL]) as above.
//     Each of these four ends by closing the store: every operation it
//     has then returns store.ErrClosed.
//   - Close: every later call returns
//     store.ErrClosed, and a second Close does not panic.
//
// # Keys and speed
//
// Every subtest, and every rapid case inside one, uses keys no other uses:
// they carry a random per-Run nonce, so a Redis server may be shared by all
// subtests and by earlier runs. Keys used together in one multi-limit take
// share a Redis Cluster hash tag ({...}).
//
// The properties are checked with pgregory.net/rapid, which runs 100 cases
// per property unless the -rapid.checks flag (or RAPID_CHECKS) says
// otherwise, and a fifth of that under -short. A property case makes at
// most about 40 calls, so the whole suite makes a few tens of thousands of
// calls: well under a second in memory, a few seconds against Redis.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Run runs the conformance suite against the stores newStore builds.
// newStore is called once per subtest; it must return a store that reads
// clk for the current time and register any cleanup with t.Cleanup. It may
// return the same backend (one Redis server) every time: the suite never
// reuses a key. Each
// check is a subtest of t, named as in the package documentation, so one
// can be selected with -run, for example -run 'TestConformance/Law'.
func Run(t *testing.T, newStore func(t *testing.T, clk *Clock) store.Store) {
	t.Helper()
	nonce := fmt.Sprintf("%016x", rand.Uint64())
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"Reference", testReference},
		{"Law", testLaw},
		{"RetryAfter", testRetryAfter},
		{"Remaining", testRemaining},
		{"Backwards", testBackwards},
		{"Extremes", testExtremes},
		{"Peek", testPeek},
		{"Isolation", testIsolation},
		{"Concurrent", testConcurrent},
		{"BadInput", testBadInput},
		{"Context", testContext},
		{"Multi", testMulti},
		{"Quota", testQuota},
		{"QuotaUnsupported", testQuotaUnsupported},
		{"Leases", testLeases},
		{"Refund", testRefund},
		{"TakeAtMost", testTakeAtMost},
		{"Reserve", testReserve},
		{"Settle", testSettle},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := NewClock()
			s := newStore(t, clk)
			if s == nil {
				t.Fatal("storetest: newStore returned nil")
			}
			e := &env{s: s, clk: clk, prefix: "storetest:" + nonce + ":" + tc.name + ":"}
			tc.fn(t, e)
		})
	}
}

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// env is what one subtest works with.
type env struct {
	s      store.Store
	clk    *Clock
	prefix string
	n      atomic.Int64
}

// key returns a key no other call has returned in this Run.
func (e *env) key() string { return fmt.Sprintf("%s%d", e.prefix, e.n.Add(1)) }

// sized returns a fresh key of exactly n bytes (n at least the length of
// a key from e.key), padded with 'x'.
func (e *env) sized(n int) string {
	k := e.key() + ":"
	return k + strings.Repeat("x", max(0, n-len(k)))
}

// tagged returns n keys that share a Redis Cluster hash tag, so that a
// multi-limit take over them is legal on a cluster.
func (e *env) tagged(n int) []string {
	tag := fmt.Sprintf("{%s%d}", e.prefix, e.n.Add(1))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", tag, i)
	}
	return keys
}

// take calls Store.Take and fails the test on an error.
func (e *env) take(t tb, key string, p algo.Policy, cost int64) algo.Result {
	t.Helper()
	res, err := e.s.Take(context.Background(), store.Request{Key: key, Policy: p, Cost: cost})
	if err != nil {
		t.Fatalf("Take(%q, %v, %d) at %v: %v", key, p, cost, e.clk.Now().Format(time.RFC3339Nano), err)
	}
	return res
}

// full fails the test unless the bucket at key is full (a peek shows
// capacity remaining and no reset pending): it has not been charged.
func (e *env) full(t tb, key string, p algo.Policy) {
	t.Helper()
	want := algo.Result{Allowed: true, Remaining: p.Capacity()}
	if got := e.take(t, key, p, 0); got != want {
		t.Fatalf("peek %q = %+v, want a full bucket %+v: the failed call charged it", key, got, want)
	}
}

// ref is the reference bucket: algo.TokenBucket with the state kept here.
type ref struct {
	p algo.Policy
	s algo.State
}

// take applies a request at now to the reference bucket.
func (r *ref) take(t tb, now time.Time, cost int64) algo.Result {
	t.Helper()
	s, res, err := algo.TokenBucket{}.Take(r.p, r.s, now.UnixMicro(), cost)
	if err != nil {
		t.Fatalf("reference Take(%v, %+v, %d): %v", r.p, r.s, cost, err)
	}
	r.s = s
	return res
}

// check takes from both the store and the reference at the clock's now and
// fails the test if they differ.
func (e *env) check(t tb, key string, r *ref, cost int64) algo.Result {
	t.Helper()
	now := e.clk.Now()
	want := r.take(t, now, cost)
	got := e.take(t, key, r.p, cost)
	if got != want {
		t.Fatalf("at %v (+%v): Take(%q, %v, %d) = %+v, algo.TokenBucket says %+v",
			now.Format(time.RFC3339Nano), now.Sub(Start), key, r.p, cost, got, want)
	}
	return got
}

// Start is the instant every new [Clock] shows: 2026-01-01T00:00:00Z.
var Start = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a manual clock for tests. It shows [Start] until it is moved with
// [Clock.Set] or [Clock.Add], and it never sleeps, so a test can step through
// hours of virtual time in microseconds of real time. It satisfies
// store.Clock.
//
// The zero value is not ready: use [NewClock]. A Clock is safe for
// concurrent use by multiple goroutines and must not be copied after first
// use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock showing [Start].
func NewClock() *Clock { return &Clock{now: Start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Add moves the clock by d (backwards when d is negative) and returns the
// new time.
func (c *Clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
