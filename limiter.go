package ratebucket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Errors returned by [NewLimiter] and [Limiter.Wait].
var (
	// ErrNilStore reports a Limiter without a Store: NewLimiter(nil, ...)
	// or a method called on the zero Limiter.
	ErrNilStore = errors.New("ratebucket: nil Store")
	// ErrWouldExceedDeadline reports a Wait that returned at once, without
	// charging, because the request could not be admitted before the
	// context's deadline. It matches context.DeadlineExceeded too, so
	// callers that only check the context's error still see a timeout.
	ErrWouldExceedDeadline = fmt.Errorf("ratebucket: wait would exceed the context deadline: %w", context.DeadlineExceeded)
)

// Config configures a [Limiter]. The zero value is ready to use: no
// prefix, the real clock.
type Config struct {
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
	// Resolver, when set, chooses each key's policy at runtime (a
	// tenant's plan): every call asks it for the key (without the
	// prefix) and applies the policy it answers; the policy given to
	// NewLimiter may then be the zero Policy, and is not used. A
	// resolver's error fails the call with an error wrapping
	// [ErrResolve], never a default policy. Put a [ResolverCache] in
	// front of a slow one. Default: none, the limiter's own policy.
	Resolver Resolver
	// Shadow makes a shadow limiter, to roll out a limit safely: its
	// Take and Allow charge the bucket exactly as an enforced limiter
	// would (only when it admits), and report each decision, refusals as
	// observe.OutcomeShadowDenied to the observers (see [observe.Labels].Shadow),
	// but always return Allowed true to the caller; a refusal keeps its
	// exact RetryAfter, so a positive RetryAfter on an allowed Result
	// says the limit would have refused. Wait takes once and returns at
	// once; Reserve and TakeAtMost return [store.ErrUnsupported], since they
	// would hold or cut a request. Use a shadow limiter apart from the
	// enforced ones (its own prefix and call): its decision never blocks
	// theirs, and theirs never skips its count. This is what a shadow
	// take is everywhere: httplimit's Limit.Shadow takes through a shadow
	// Limiter. Default: false.
	Shadow bool
	// Refundable marks every take and reservation of the limiter as one
	// whose tokens may be given back later, perhaps by another instance
	// (see [store.Request].Refundable): a store that answers from what it learnt
	// (hybrid.DenyCache) then never answers them from a bound that a
	// refund it cannot see would make stale. Set it on a limiter whose
	// charges any process refunds or cancels. Default: false.
	Refundable bool
}

// Limiter is what users hold: one [algo.Policy] and a key prefix bound to a
// [store.Store]. Each key names its own bucket of the policy's capacity, refilled
// at its rate:
//
//	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(2).Burst(100), ratebucket.Config{Prefix: "api:"})
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
// rate or a calendar quota. All three charge only when they admit.
//
// A Limiter also gives tokens back (Refund), grants part of a batch
// (TakeAtMost) and reserves tokens ahead, to proceed after an exact,
// bounded delay instead of being refused (Reserve, which Wait uses), and
// holds an estimate for work whose cost is known only after it, settled
// at the actual cost (Hold, [Hold.Settle]).
// A calendar quota (algo.Quota) is taken, waited for and refunded, never
// partly granted or reserved: TakeAtMost and Reserve under one return an
// error wrapping algo.ErrQuotaUnsupported, on every Store, without a
// store call.
//
// With Config.Resolver, each key's policy is chosen at runtime (a
// tenant's plan), and a failure to resolve it is an error wrapping
// [ErrResolve], never a default; with Config.Shadow, the limiter
// counts and reports what it would refuse but lets every call through.
//
// A Limiter holds no state of its own, so it is safe for concurrent use by
// multiple goroutines, and any number of Limiters may share a Store. The
// zero value is not usable: its methods return [ErrNilStore]. Make one with
// [NewLimiter].
type Limiter struct {
	s          store.Store
	p          algo.Policy
	prefix     string
	clk        clock.Clock
	resolver   Resolver
	shadow     bool
	refundable bool
}

// NewLimiter returns a Limiter applying p to keys in s (or, with
// cfg.Resolver, the policy it resolves for each key, when p may be the
// zero Policy). It returns an error wrapping algo.ErrInvalidPolicy when p
// is invalid, and [ErrNilStore] when s is nil.
func NewLimiter(s store.Store, p algo.Policy, cfg Config) (*Limiter, error) {
	if s == nil {
		return nil, ErrNilStore
	}
	if cfg.Resolver == nil || p != (algo.Policy{}) {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("ratebucket: NewLimiter: %w", err)
		}
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.New()
	}
	return &Limiter{s: s, p: p, prefix: cfg.Prefix, clk: clk, resolver: cfg.Resolver, shadow: cfg.Shadow, refundable: cfg.Refundable}, nil
}

// Policy returns the policy given to NewLimiter: with a Resolver, the
// policies applied are the resolver's, per key.
func (l *Limiter) Policy() algo.Policy { return l.p }

// Shadow reports whether the limiter is a shadow limiter (see
// Config.Shadow).
func (l *Limiter) Shadow() bool { return l.shadow }

// policy returns the policy of key's call and its context: with a
// Resolver, the resolved policy and cost, and ctx labelled with the
// resolved name and the shadow mark when some store is observed.
//
// A failure to resolve is reported through the store's observer (see
// observe.ReportFailure) as a failed call of op asking for n: no store call is
// made, and dashboards that count failed decisions see it.
func (l *Limiter) policy(ctx context.Context, key string, op observe.Op, n int64) (context.Context, algo.Policy, int64, error) {
	p, cost, name := l.p, int64(0), ""
	if l.resolver != nil {
		res, err := resolve(ctx, l.resolver, key)
		if err != nil {
			observe.ReportFailure(ctx, l.s, op, n, err)
			return ctx, algo.Policy{}, 0, err
		}
		p, cost, name = res.Policy, res.Cost, res.Name
	}
	if observe.Active() && (l.shadow || name != "") {
		lb, _ := observe.LabelsFrom(ctx)
		if lb.Policy == "" {
			lb.Policy = name
		}
		lb.Shadow = lb.Shadow || l.shadow
		ctx = observe.WithLabels(ctx, lb)
	}
	return ctx, p, cost, nil
}

// Store returns the store the limiter takes from.
func (l *Limiter) Store() store.Store { return l.s }

// Result is a Limiter's answer: the store's algo.Result, and the Limit of
// the policy it was decided under.
type Result struct {
	algo.Result
	// Limit is the policy's capacity: the largest request a bucket ever
	// admits at once, and a calendar quota's N per period; what an
	// X-RateLimit-Limit header reports. It is zero when the call failed
	// with no answer from the store.
	//
	// The store does not report it: its algo.Result keeps to four words,
	// which the compiler passes in registers (see algo.Result).
	Limit int64
}

// withLimit is the Limiter's Result for the store's answer res (and err)
// to a call under p: res with p's capacity, or the zero Result when the
// store failed with no answer.
func withLimit(res algo.Result, p algo.Policy, err error) Result {
	if err != nil && res == (algo.Result{}) {
		return Result{}
	}
	return Result{Result: res, Limit: p.Capacity()}
}

// Allow takes one token from key's bucket: Take(ctx, key, 1), or, with a
// Resolver whose answer has a Cost, that cost.
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.take(ctx, key, 1, true)
}

// Take takes cost tokens from key's bucket, or reports how long until it
// could; cost 0 peeks. It does not wait: a denial is a Result with Allowed
// false and an exact RetryAfter. An empty key is refused with
// [store.ErrEmptyKey], prefix or not, since it would put every caller without an
// identity in one bucket. With a Resolver, an error wrapping [ErrResolve]
// reports a policy that could not be resolved (nothing was charged). Other
// errors are the Store's (see [store.Store.Take]). A shadow limiter's Result is
// always Allowed (see Config.Shadow).
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (Result, error) {
	return l.take(ctx, key, cost, false)
}

// take is Take, and Allow when allow is set: then a resolved Cost
// replaces cost.
func (l *Limiter) take(ctx context.Context, key string, cost int64, allow bool) (Result, error) {
	if l == nil || l.s == nil {
		return Result{}, ErrNilStore
	}
	if key == "" {
		return Result{}, store.ErrEmptyKey
	}
	ctx, p, rc, err := l.policy(ctx, key, observe.OpTake, cost)
	if err != nil {
		return Result{}, err
	}
	if allow && rc > 0 {
		cost = rc
	}
	res, err := l.s.Take(ctx, store.Request{Key: l.prefix + key, Policy: p, Cost: cost, Refundable: l.refundable})
	if l.shadow && err == nil {
		res.Allowed = true // the caller proceeds; RetryAfter tells the truth
	}
	return withLimit(res, p, err), err
}

// Refund gives n tokens back to key's bucket, never raising it above
// capacity: for a request that should not count after all (see
// [store.Store].Refund). A Store under a window algorithm returns
// [store.ErrUnsupported].
func (l *Limiter) Refund(ctx context.Context, key string, n int64) (Result, error) {
	if err := l.check(key); err != nil {
		return Result{}, err
	}
	ctx, p, _, err := l.policy(ctx, key, observe.OpRefund, n)
	if err != nil {
		return Result{}, err
	}
	res, err := l.s.Refund(ctx, store.Request{Key: l.prefix + key, Policy: p, Cost: n})
	return withLimit(res, p, err), err
}

// TakeAtMost takes as many whole tokens as key's bucket holds, up to n, and
// returns how many it granted; none granted is a denial with the exact wait
// for one token (see [store.Store].TakeAtMost). A Store under a window algorithm
// returns [store.ErrUnsupported].
func (l *Limiter) TakeAtMost(ctx context.Context, key string, n int64) (int64, Result, error) {
	if err := l.check(key); err != nil {
		return 0, Result{}, err
	}
	if l.shadow {
		return 0, Result{}, fmt.Errorf("%w: a shadow Limiter has no TakeAtMost", store.ErrUnsupported)
	}
	ctx, p, _, err := l.policy(ctx, key, observe.OpTakeAtMost, n)
	if err != nil {
		return 0, Result{}, err
	}
	if p.IsQuota() {
		return 0, Result{}, fmt.Errorf("ratebucket: TakeAtMost under %v: %w", p, algo.ErrQuotaUnsupported)
	}
	g, res, err := l.s.TakeAtMost(ctx, store.Request{Key: l.prefix + key, Policy: p, Cost: n, Refundable: l.refundable})
	return g, withLimit(res, p, err), err
}

// Reservation is a reservation made by [Limiter.Reserve]: the store's
// answer (embedded: Allowed, Delay, the bucket's Result after it), the
// policy's Limit (see [Result]), and what [Reservation.Wait] and
// [Reservation.Cancel] need. The zero Reservation waits for nothing and
// cancels nothing.
type Reservation struct {
	algo.Reservation
	// Limit is the capacity of the policy reserved under, as a Result's.
	Limit int64
	lim   *Limiter
	key   string
	p     algo.Policy // the policy reserved under
	at    time.Time   // the limiter's clock when the store answered
}

// Wait holds the caller until the reservation's time, Delay after the
// store answered Reserve, on the limiter's clock (Config.Clock: a
// clock.Mock's timers in tests), and returns the reservation's Result
// with a nil error: the request may proceed.
//
// If ctx ends first, the request will not proceed: Wait cancels the
// reservation with a context that outlives ctx, so its tokens come back
// when no reservation on the key was made after it (see
// [Reservation.Cancel]), and returns the bucket's Result after the
// cancellation, with Allowed false, and ctx's error (joined with the
// cancellation's, if that failed).
//
// A reservation admitted with no delay returns at once; so does a
// refused one, or the zero Reservation, with its Result (Allowed false)
// and a nil error, as a denied Take answers.
func (r Reservation) Wait(ctx context.Context) (Result, error) {
	if !r.Allowed || r.Delay <= 0 || r.lim == nil {
		return r.result(), nil
	}
	if err := r.lim.sleep(ctx, r.at.Add(r.Delay).Sub(r.lim.clk.Now())); err != nil {
		// The request will not proceed: give its place back.
		_, res, cerr := r.Cancel(context.WithoutCancel(ctx))
		if res.Allowed = false; cerr != nil {
			err = errors.Join(err, cerr)
		}
		return res, err
	}
	return r.result(), nil
}

// result is the reservation's Result.
func (r Reservation) result() Result { return Result{Result: r.Result, Limit: r.Limit} }

// Cancel gives the reservation's tokens back, before its time, when the
// request will not proceed: exactly when no reservation on the key was
// made after it, and not at all otherwise (see [store.Store].Reserve). It reports
// whether it gave them back. A reservation that was refused, or admitted
// with no delay, has nothing to cancel: Cancel reports false and calls
// nothing.
func (r Reservation) Cancel(ctx context.Context) (bool, Result, error) {
	if r.lim == nil || r.Ticket == (algo.Ticket{}) {
		return false, r.result(), nil
	}
	if err := r.lim.check(r.key); err != nil {
		return false, Result{}, err
	}
	ok, res, err := r.lim.s.CancelReservation(ctx, r.lim.prefix+r.key, r.p, r.Ticket)
	return ok, withLimit(res, r.p, err), err
}

// Reserve takes cost tokens from key's bucket now, even before they exist,
// if they exist within maxWait: the Reservation is then Allowed, and the
// request may proceed after its Delay (zero when the bucket held the
// tokens). The bucket is in debt meanwhile, so later requests on the key
// wait behind this one. A reservation that needs more than maxWait (or
// than the policy's MaxDelay, one bucket's refill) is refused, charges
// nothing, and has an exact RetryAfter: see [store.Store].Reserve.
//
// Reserve honours ctx's deadline: it reserves only what may proceed before
// it. When the deadline, and not maxWait, is what the reservation would
// exceed, it returns the refused Reservation with an error wrapping
// [ErrWouldExceedDeadline], at once and charging nothing. A Store
// under a window algorithm returns [store.ErrUnsupported]; other errors are the
// Store's.
//
// Reserve does not wait: the caller sleeps for Delay and then proceeds,
// or, if it will not, cancels the reservation to give its tokens back.
// [Reservation.Wait] does both, and [Limiter.Wait] reserves and waits.
func (l *Limiter) Reserve(ctx context.Context, key string, cost int64, maxWait time.Duration) (Reservation, error) {
	if err := l.check(key); err != nil {
		return Reservation{}, err
	}
	if l.shadow {
		return Reservation{}, fmt.Errorf("%w: a shadow Limiter has no Reserve", store.ErrUnsupported)
	}
	ctx, p, _, err := l.policy(ctx, key, observe.OpReserve, cost)
	if err != nil {
		return Reservation{}, err
	}
	if p.IsQuota() {
		return Reservation{}, fmt.Errorf("ratebucket: Reserve under %v: %w", p, algo.ErrQuotaUnsupported)
	}
	return l.reserve(ctx, key, p, cost, maxWait)
}

// reserve is Reserve under the policy p.
func (l *Limiter) reserve(ctx context.Context, key string, p algo.Policy, cost int64, maxWait time.Duration) (Reservation, error) {
	wait, left, deadline := min(maxWait, p.MaxDelay()), time.Duration(0), false
	if dl, ok := ctx.Deadline(); ok {
		// A request proceeding at the deadline is too late: ctx is done.
		if left = dl.Sub(l.clk.Now()); left-time.Microsecond < wait {
			wait, deadline = max(0, left-time.Microsecond), true
		}
	}
	r, err := l.s.Reserve(ctx, store.Request{Key: l.prefix + key, Policy: p, Cost: cost, Refundable: l.refundable}, wait)
	res := Reservation{Reservation: r, Limit: withLimit(r.Result, p, err).Limit, lim: l, key: key, p: p, at: l.clk.Now()}
	if err == nil && deadline && !r.Allowed {
		err = fmt.Errorf("%w: proceeds in %v at the earliest, deadline in %v", ErrWouldExceedDeadline, r.RetryAfter+wait, left)
	}
	return res, err
}

// check returns the error for a zero Limiter or an empty key.
func (l *Limiter) check(key string) error {
	switch {
	case l == nil || l.s == nil:
		return ErrNilStore
	case key == "":
		return store.ErrEmptyKey
	}
	return nil
}

// Wait takes cost tokens from key's bucket, blocking until they are
// available or ctx ends, like golang.org/x/time/rate's Limiter.Wait.
//
// Wait reserves the tokens at
// once, before they exist, and sleeps on the limiter's clock for the
// reservation's Delay, the exact time until they do. The bucket serves
// reservations in the order they were made: once Wait holds its place, no
// later request, large or small, can take its tokens, so a large cost is
// no longer starved by a stream of small ones. The queue is at most one
// bucket deep (Policy.MaxDelay of waiting); a Wait that finds it full
// sleeps the refusal's exact RetryAfter, until its request fits, and
// reserves then, so under sustained overload, when the queue stays full,
// smaller costs fit first. If ctx ends while Wait sleeps, it cancels the
// reservation: the tokens come back exactly if no other reservation was
// made on the key since; otherwise they stay spent (the reservations
// behind were given their times counting on them) and refill as usual.
//
// Under a calendar quota, which is not reserved, and with a Store that
// cannot reserve (one under a window algorithm), Wait retries Take after
// each denial's RetryAfter (for a quota, the start of its next period):
// the wait is exact when no one else takes from the bucket, but another
// caller may get there first, and Wait simply waits again (so a large
// cost can be starved by a stream of small ones). A denied attempt
// charges nothing, so such a Wait that gives up has cost nothing.
//
// Wait returns the admitting Result with a nil error (after a reservation,
// the bucket's Result right after it: Remaining 0 while the bucket is in
// debt); or, with the last denial's Result, or the bucket's after a
// cancelled reservation (Allowed false either way):
//   - an error wrapping [ErrWouldExceedDeadline] (which also matches
//     context.DeadlineExceeded), at once and charging nothing, when ctx's
//     deadline comes no later than the earliest instant the request could
//     proceed (at that instant the context is already done);
//   - ctx.Err() when ctx ends while waiting.
//
// Errors from the Store, including a cost above capacity (which no wait
// can admit), are returned at once.
func (l *Limiter) Wait(ctx context.Context, key string, cost int64) (Result, error) {
	if err := l.check(key); err != nil {
		return Result{}, err
	}
	if l.shadow {
		return l.waitTake(ctx, key, cost)
	}
	ctx, p, _, err := l.policy(ctx, key, observe.OpReserve, cost)
	if err != nil {
		return Result{}, err
	}
	if p.IsQuota() {
		return l.waitTake(ctx, key, cost)
	}
	for {
		r, err := l.reserve(ctx, key, p, cost, p.MaxDelay())
		switch {
		case errors.Is(err, store.ErrUnsupported): // a store under a window algorithm
			return l.waitTake(ctx, key, cost)
		case err != nil:
			return r.result(), err
		case r.Allowed && r.Delay <= 0:
			return r.result(), nil
		case r.Allowed:
			return r.Wait(ctx)
		}
		// The queue is full: the request fits after RetryAfter, and can
		// proceed MaxDelay (rounded to the µs) after that, at the earliest.
		wait := max(r.RetryAfter, time.Microsecond)
		if err := l.before(ctx, wait+p.MaxDelay()); err != nil {
			return r.result(), err
		}
		if err := l.sleep(ctx, wait); err != nil {
			return r.result(), err
		}
	}
}

// waitTake is Wait where nothing can be reserved: Take, and after each
// denial sleep its RetryAfter and try again.
func (l *Limiter) waitTake(ctx context.Context, key string, cost int64) (Result, error) {
	for {
		res, err := l.Take(ctx, key, cost)
		if err != nil || res.Allowed {
			return res, err
		}
		wait := max(res.RetryAfter, time.Microsecond) // a store never denies with 0; never spin
		if err := l.before(ctx, wait); err != nil {
			return res, err
		}
		if err := l.sleep(ctx, wait); err != nil {
			return res, err
		}
	}
}

// before returns an error wrapping ErrWouldExceedDeadline when ctx's
// deadline comes no later than wait from now on the limiter's clock.
func (l *Limiter) before(ctx context.Context, wait time.Duration) error {
	if dl, ok := ctx.Deadline(); ok {
		if left := dl.Sub(l.clk.Now()); wait >= left { // the context ends first
			return fmt.Errorf("%w: admitted in %v at the earliest, deadline in %v", ErrWouldExceedDeadline, wait, left)
		}
	}
	return nil
}

// sleep waits d on the limiter's clock, or until ctx ends, whose error it
// then returns.
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	t := l.clk.Timer(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}
