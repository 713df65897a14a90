package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
)

// Errors returned by [NewLimiter] and [Limiter.Wait].
var (
	// ErrNilStore reports a Limiter without a Store: NewLimiter(nil, ...)
	// or a method called on the zero Limiter.
	ErrNilStore = errors.New("store: nil Store")
	// ErrWouldExceedDeadline reports a Wait that returned at once, without
	// charging, because the request could not be admitted before the
	// context's deadline. It matches context.DeadlineExceeded too, so
	// callers that only check the context's error still see a timeout.
	ErrWouldExceedDeadline = fmt.Errorf("store: wait would exceed the context deadline: %w", context.DeadlineExceeded)
)

// LimiterConfig configures a [Limiter]. The zero value is ready to use: no
// prefix, the real clock.
type LimiterConfig struct {
	// Prefix is prepended to every key, so that limiters with different
	// policies can share one Store without sharing buckets:
	// Prefix "login:" and key "alice" use the bucket "login:alice". The
	// default is no prefix.
	Prefix string
	// Clock gives Wait its timers, and the time it compares with a
	// context's deadline. The default is the real clock, clock.New(). With
	// clock.NewMock(), make Wait's contexts with the mock's WithTimeout or
	// WithDeadline so that deadlines are in the mock's time too. The Store
	// reads its own clock to decide; give both the same one.
	Clock clock.Clock
}

// Limiter is what users hold: one [algo.Policy] and a key prefix bound to a
// [Store]. Each key names its own bucket of the policy's capacity, refilled
// at its rate:
//
//	lim, err := store.NewLimiter(s, algo.PerSecond(2).Burst(100), store.LimiterConfig{Prefix: "api:"})
//	...
//	res, err := lim.Allow(ctx, userID)
//	if err == nil && !res.Allowed {
//		// reject, and tell the client to come back after res.RetryAfter
//	}
//
// Allow and Take never block: they suit servers, which should answer a
// denied request at once (HTTP 429 with a Retry-After header built from
// res.RetryAfter, rounded up to whole seconds). Wait blocks until admitted:
// it suits clients and background jobs that pace themselves against a
// quota. All three charge only when they admit.
//
// A Limiter holds no state of its own, so it is safe for concurrent use by
// multiple goroutines, and any number of Limiters may share a Store. The
// zero value is not usable: its methods return [ErrNilStore]. Make one with
// [NewLimiter].
type Limiter struct {
	s      Store
	p      algo.Policy
	prefix string
	clk    clock.Clock
}

// NewLimiter returns a Limiter applying p to keys in s. It returns an error
// wrapping algo.ErrInvalidPolicy when p is invalid, and [ErrNilStore] when s
// is nil.
func NewLimiter(s Store, p algo.Policy, cfg LimiterConfig) (*Limiter, error) {
	if s == nil {
		return nil, ErrNilStore
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("store: NewLimiter: %w", err)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.New()
	}
	return &Limiter{s: s, p: p, prefix: cfg.Prefix, clk: clk}, nil
}

// Policy returns the limiter's policy.
func (l *Limiter) Policy() algo.Policy { return l.p }

// Store returns the store the limiter takes from.
func (l *Limiter) Store() Store { return l.s }

// Allow takes one token from key's bucket: Take(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (algo.Result, error) {
	return l.Take(ctx, key, 1)
}

// Take takes cost tokens from key's bucket, or reports how long until it
// could; cost 0 peeks. It does not wait: a denial is a Result with Allowed
// false and an exact RetryAfter. An empty key is refused with
// [ErrEmptyKey], prefix or not, since it would put every caller without an
// identity in one bucket. Other errors are the Store's (see [Store.Take]).
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (algo.Result, error) {
	if l == nil || l.s == nil {
		return algo.Result{}, ErrNilStore
	}
	if key == "" {
		return algo.Result{}, ErrEmptyKey
	}
	return l.s.Take(ctx, l.prefix+key, l.p, cost)
}

// Wait takes cost tokens from key's bucket, blocking until they are
// available or ctx ends, like golang.org/x/time/rate's Limiter.Wait.
//
// After each denial Wait sleeps on the limiter's clock for the denial's
// RetryAfter and tries again: the wait is exact when no one else takes from
// the bucket, and Wait simply waits again when another caller got there
// first (so a large cost can be starved by a stream of small ones). A
// denied attempt charges nothing, so a Wait that gives up has cost nothing.
//
// Wait returns the admitting Result with a nil error; or, with the last
// denied Result:
//   - an error wrapping [ErrWouldExceedDeadline] (which also matches
//     context.DeadlineExceeded), at once, when ctx's deadline comes no
//     later than the earliest instant the request could be admitted (at
//     that instant the context is already done);
//   - ctx.Err() when ctx ends while waiting.
//
// Errors from the Store, including a cost above capacity (which no wait
// can admit), are returned at once.
func (l *Limiter) Wait(ctx context.Context, key string, cost int64) (algo.Result, error) {
	for {
		res, err := l.Take(ctx, key, cost)
		if err != nil || res.Allowed {
			return res, err
		}
		wait := max(res.RetryAfter, time.Microsecond) // a store never denies with 0; never spin
		if dl, ok := ctx.Deadline(); ok {
			if left := dl.Sub(l.clk.Now()); wait >= left { // the context ends first
				return res, fmt.Errorf("%w: admitted in %v at the earliest, deadline in %v", ErrWouldExceedDeadline, wait, left)
			}
		}
		t := l.clk.Timer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		}
	}
}
