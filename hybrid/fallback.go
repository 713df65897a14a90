package hybrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Mode says how a [Fallback] answers a request the primary cannot: while
// the breaker is open, when a half-open breaker has its probes in flight,
// and when a call fails or times out.
type Mode int

const (
	// LocalFallback answers from the local store with the policy scaled
	// to this instance's share of the fleet (see [FallbackConfig]). It is
	// the default, and needs a local store.
	LocalFallback Mode = iota
	// FailClosed refuses: the error wraps [ErrOpen] and the primary's
	// last error. httplimit turns a store error into its own fail mode,
	// fail-closed (503) for sensitive routes such as login or payment.
	FailClosed
	// FailOpen admits: Allowed true, Remaining as if the bucket were
	// full. Use it where serving unlimited beats refusing, and only with
	// the state-change hook watched.
	FailOpen
)

// String returns "local-fallback", "fail-closed" or "fail-open".
func (m Mode) String() string {
	switch m {
	case LocalFallback:
		return "local-fallback"
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// FallbackConfig configures a [Fallback]. The zero value is ready to use.
type FallbackConfig struct {
	// Mode answers what the primary cannot. The default is LocalFallback.
	Mode Mode
	// Instances is how many app instances share the primary. While the
	// primary is failing, this instance limits each key to 1/Instances of
	// the policy: capacity divided and rounded down (at least 1 token),
	// rate divided exactly (the period multiplied), so the fleet admits
	// about what one shared bucket would. The default is 1.
	Instances int
	// Timeout bounds each primary call (a context deadline), and so the
	// latency a hanging primary adds to a request. The primary must
	// honour context deadlines: for redisstore, build the go-redis client
	// with ContextTimeoutEnabled: true. The default is DefaultTimeout.
	Timeout time.Duration
	// FailureThreshold opens the breaker after this many consecutive
	// failures (errors or timeouts). The default is
	// DefaultFailureThreshold.
	FailureThreshold int
	// FailureRatio opens the breaker when at least this fraction of the
	// calls in the current Window failed, once MinCalls calls were made
	// in it. The defaults are DefaultFailureRatio, DefaultMinCalls and
	// DefaultWindow.
	FailureRatio float64
	MinCalls     int
	Window       time.Duration
	// CoolDown is how long the breaker stays open before it lets probes
	// through. The default is DefaultCoolDown.
	CoolDown time.Duration
	// Probes is the most calls in flight to the primary while half-open;
	// other calls are answered by Mode at once, so nothing queues behind
	// a primary that may still hang. ProbeSuccesses is how many probes
	// must succeed in a row to close. Both default to 1.
	Probes, ProbeSuccesses int
	// Clock times the breaker. The default is the system clock.
	Clock store.Clock
	// MaxKeyLen is the key length bound applied to the answers the
	// Fallback gives itself (fail-open, fail-closed), so that a key the
	// primary would refuse with store.ErrKeyTooLong is refused while it is
	// down too. Give it the primary's MaxKeyLen; the default (0) is
	// store.DefaultMaxKeyLen, the stores' default.
	MaxKeyLen int
	// Logger receives one record per state change (Warn when opening,
	// Info otherwise). The default is slog.Default().
	Logger *slog.Logger
	// OnStateChange, when set, is called after each state change, in
	// order, from the goroutine whose call caused it. It may call
	// Fallback.State but not Take or TakeMulti.
	OnStateChange func(from, to observe.BreakerState)
	// Observer, when set, receives an observe.BreakerChange after each state
	// change, labelled with Name (default "fallback"), before
	// OnStateChange is called.
	Observer observe.Observer
	Name     string
}

// Fallback is a [store.Store] that calls a primary store through a circuit
// breaker and answers by its [Mode] when the primary cannot: closed, calls
// go to the primary with a deadline; after repeated failures it opens and
// stops calling the primary; after a cool-down it half-opens and lets a few
// probes through; a successful probe closes it, a failed one opens it again.
//
// Bad input (an empty key, a bad policy or cost, a corrupt key) is returned
// as the primary returned it and never counts against the primary, nor does
// a caller cancelling its context. A caller's deadline that passes during a
// primary call counts as a failure, as Timeout does, and the caller gets
// the context's error. Fallback is safe for simultaneous use by
// multiple goroutines, starts no goroutines, and keeps no queue: a caller
// waits at most Timeout for the primary.
type Fallback struct {
	primary, local store.Store
	src            sourced // primary, when it is one of this package's wrappers
	cfg            FallbackConfig
	br             breaker
	obs            observer
	ops            // Refund, TakeAtMost, Reserve…: see ops.go

	calls, failures, degraded atomic.Int64
	closed                    atomic.Bool
}

var (
	_ store.Store = (*Fallback)(nil)
)

// NewFallback returns a Fallback around primary. local is the store used in
// LocalFallback mode (a memstore.Store of its own) and may be nil in the
// other modes. It returns an error wrapping [ErrInvalidConfig] for a nil
// primary, a missing local store, or a field out of range.
func NewFallback(primary, local store.Store, cfg FallbackConfig) (*Fallback, error) {
	switch {
	case primary == nil:
		return nil, fmt.Errorf("%w: nil primary store", ErrInvalidConfig)
	case cfg.Mode < LocalFallback || cfg.Mode > FailOpen:
		return nil, fmt.Errorf("%w: unknown mode %v", ErrInvalidConfig, cfg.Mode)
	case cfg.Mode == LocalFallback && local == nil:
		return nil, fmt.Errorf("%w: LocalFallback needs a local store", ErrInvalidConfig)
	case cfg.Instances < 0 || cfg.Timeout < 0 || cfg.FailureThreshold < 0 || cfg.MinCalls < 0 ||
		cfg.Window < 0 || cfg.CoolDown < 0 || cfg.Probes < 0 || cfg.ProbeSuccesses < 0:
		return nil, fmt.Errorf("%w: negative field in %+v", ErrInvalidConfig, cfg)
	case cfg.FailureRatio < 0 || cfg.FailureRatio > 1:
		return nil, fmt.Errorf("%w: FailureRatio %v outside [0, 1]", ErrInvalidConfig, cfg.FailureRatio)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Instances, 1)
	def(&cfg.FailureThreshold, DefaultFailureThreshold)
	def(&cfg.MinCalls, DefaultMinCalls)
	def(&cfg.Probes, 1)
	def(&cfg.ProbeSuccesses, 1)
	defDur(&cfg.Timeout, DefaultTimeout)
	defDur(&cfg.Window, DefaultWindow)
	defDur(&cfg.CoolDown, DefaultCoolDown)
	if cfg.FailureRatio == 0 {
		cfg.FailureRatio = DefaultFailureRatio
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	src, _ := primary.(sourced)
	f := &Fallback{primary: primary, src: src, local: local, cfg: cfg, obs: newObserver(cfg.Observer, cfg.Name, defaultFallbackName)}
	f.br.cfg = cfg
	f.br.windowStart = cfg.Clock.Now()
	f.br.notify = f.report
	f.ops.run = f.opFrom
	return f, nil
}

// report logs a state change and calls the hook. When the primary is back
// it also drops what a DenyCache primary counted of the local admissions.
func (f *Fallback) report(t transition) {
	level := slog.LevelInfo
	if t.to == open {
		level = slog.LevelWarn
	}
	attrs := []any{"from", t.from.String(), "to", t.to.String(), "mode", f.cfg.Mode.String()}
	if t.err != nil {
		attrs = append(attrs, "error", t.err.Error())
	}
	f.cfg.Logger.Log(context.Background(), level, "ratebucket: primary store circuit "+t.to.String(), attrs...)
	if d, ok := f.primary.(denier); ok && t.to == closed {
		d.forgetLocal()
	}
	f.obs.breaker(t)
	if f.cfg.OnStateChange != nil {
		f.cfg.OnStateChange(t.from, t.to)
	}
}

// Close makes later calls fail with [store.ErrClosed]. It closes neither
// the primary nor the local store, which belong to the caller. Close is
// idempotent.
func (f *Fallback) Close() error {
	f.closed.Store(true)
	return nil
}

// State returns the breaker's state.
func (f *Fallback) State() observe.BreakerState { return observe.BreakerState(f.br.state.Load()) }

// Stats returns counts of what the Fallback did: Calls and the breaker's
// fields of [Stats].
func (f *Fallback) Stats() Stats {
	err, opens := f.br.snapshot()
	return Stats{State: f.State(), Calls: f.calls.Load(), Failures: f.failures.Load(),
		Degraded: f.degraded.Load(), Opens: opens, LastError: err}
}

// Take asks the primary through the breaker, or answers by Mode.
func (f *Fallback) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	if err := ctx.Err(); err != nil {
		return algo.Result{}, err
	}
	res, _, err := f.take(ctx, req)
	return res, err
}

// take is Take after the context check (see sourced): the primary's
// answer, or degrade's. It checks no input unless it degrades: the primary
// does.
func (f *Fallback) take(ctx context.Context, r store.Request) (algo.Result, bool, error) {
	if f.closed.Load() {
		return algo.Result{}, false, store.ErrClosed
	}
	t, ok := f.admit()
	if !ok {
		res, err := f.degrade(ctx, r, nil)
		return res, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	var res algo.Result
	var err error
	primary := true
	if f.src != nil {
		res, primary, err = f.src.take(cctx, r)
	} else {
		res, err = f.primary.Take(cctx, r)
	}
	cancel()
	if !f.failed(ctx, t, primary, err) {
		return res, primary, err
	}
	res, err = f.degrade(ctx, r, err)
	return res, false, err
}

// TakeMulti is Take for multi-limit takes: all are charged or none, on
// the primary or, in LocalFallback mode, on the local store.
func (f *Fallback) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	if err := ctx.Err(); err != nil {
		return store.MultiResult{}, err
	}
	mr, _, err := f.takeMulti(ctx, reqs)
	return mr, err
}

// takeMulti is take for multi-limit takes.
func (f *Fallback) takeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, bool, error) {
	if f.closed.Load() {
		return store.MultiResult{}, false, store.ErrClosed
	}
	t, ok := f.admit()
	if !ok {
		mr, err := f.degradeMulti(ctx, reqs, nil)
		return mr, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	var mr store.MultiResult
	var err error
	primary := true
	if f.src != nil {
		mr, primary, err = f.src.takeMulti(cctx, reqs)
	} else {
		mr, err = f.primary.TakeMulti(cctx, reqs)
	}
	cancel()
	if !f.failed(ctx, t, primary, err) {
		return mr, primary, err
	}
	mr, err = f.degradeMulti(ctx, reqs, err)
	return mr, false, err
}

// guard runs call on the primary through the breaker, with the deadline,
// and answers with degrade what the primary does not: take's steps for the
// calls around a take (ops, leases), which are not on the hot path.
func guard[T any](f *Fallback, ctx context.Context, call func(context.Context) (T, bool, error), degrade func(error) (T, error)) (T, bool, error) {
	if f.closed.Load() {
		var zero T
		return zero, false, store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, false, err
	}
	t, ok := f.admit()
	if !ok {
		res, err := degrade(nil)
		return res, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	res, primary, err := call(cctx)
	cancel()
	if !f.failed(ctx, t, primary, err) {
		return res, primary, err
	}
	res, err = degrade(err)
	return res, false, err
}

// admit asks the breaker whether a call may go to the primary now, and
// counts it as a primary call or as degraded.
func (f *Fallback) admit() (ticket, bool) {
	t, ok := f.br.allow(f.cfg.Clock.Now())
	if ok {
		f.calls.Add(1)
	} else {
		f.degraded.Add(1)
	}
	return t, ok
}

// failed records the outcome of a primary call admitted with t, and
// reports whether the caller must answer by degrading: the call failed and
// the caller is still waiting for an answer.
func (f *Fallback) failed(ctx context.Context, t ticket, primary bool, err error) bool {
	o := classify(ctx, primary, err)
	f.br.done(f.cfg.Clock.Now(), t, o, err)
	if o != failure || ctx.Err() != nil {
		return false // nobody is waiting for a degraded answer
	}
	f.failures.Add(1)
	f.degraded.Add(1)
	return true
}

// classify tells what a primary call proved about the primary. A caller
// that cancelled proved nothing; a caller's deadline that passed during the
// call counts as a failure like Timeout does: the primary did not answer in
// the time it was given (else callers with deadlines shorter than Timeout
// would keep a hanging primary's breaker closed forever).
func classify(ctx context.Context, primary bool, err error) outcome {
	switch {
	case err == nil && primary:
		return success
	case err == nil, store.IsInputError(err), errors.Is(err, store.ErrClosed), errors.Is(ctx.Err(), context.Canceled):
		return neutral // a local answer, the caller's mistake, or the caller gave up
	}
	return failure
}

// degrade answers a request the primary did not: with the denial of a
// DenyCache primary when it proves one, else by Mode. cause is the failure
// that made this call degrade, or nil when the breaker refused it.
func (f *Fallback) degrade(ctx context.Context, r store.Request, cause error) (algo.Result, error) {
	key, p, cost := r.Key, r.Policy, r.Cost
	if err := store.CheckRequest(r, store.MaxKeyLen(f.cfg.MaxKeyLen)); err != nil {
		return algo.Result{}, fmt.Errorf("hybrid: %w", err)
	}
	if d, ok := f.primary.(denier); ok {
		if res, ok := d.denyDown(r); ok {
			d.hit(ctx, -1)
			return res, nil // certainly denied by Redis, reachable or not
		}
	}
	switch f.cfg.Mode {
	case FailOpen:
		return algo.Result{Allowed: true, Remaining: p.Capacity() - cost}, nil
	case FailClosed:
		return algo.Result{}, f.openErr(cause)
	}
	q := p.Share(f.cfg.Instances)
	if cost > q.Capacity() {
		// The share can never hold this request: deny until the primary
		// may answer again.
		return algo.Result{RetryAfter: f.br.retryIn(f.cfg.Clock.Now())}, nil
	}
	res, err := f.local.Take(ctx, store.Request{Key: key, Policy: q, Cost: cost})
	if d, ok := f.primary.(denier); ok && err == nil && res.Allowed {
		d.charge(r)
	}
	return res, err
}

// degradeMulti is degrade for multi-limit takes.
func (f *Fallback) degradeMulti(ctx context.Context, reqs []store.Request, cause error) (store.MultiResult, error) {
	if err := store.CheckRequests(reqs, store.MaxKeyLen(f.cfg.MaxKeyLen)); err != nil {
		return store.MultiResult{}, fmt.Errorf("hybrid: %w", err)
	}
	if d, ok := f.primary.(denier); ok {
		if mr, ok := d.denyDownMulti(reqs); ok {
			d.hit(ctx, mr.Denied)
			return mr, nil
		}
	}
	mr := store.MultiResult{Allowed: true, Denied: -1, Results: make([]algo.Result, len(reqs))}
	switch f.cfg.Mode {
	case FailOpen:
		for i, r := range reqs {
			mr.Results[i] = algo.Result{Allowed: true, Remaining: r.Policy.Capacity() - r.Cost}
		}
		return mr, nil
	case FailClosed:
		return store.MultiResult{}, f.openErr(cause)
	}
	scaled := make([]store.Request, len(reqs))
	for i, r := range reqs {
		scaled[i] = store.Request{Key: r.Key, Policy: r.Policy.Share(f.cfg.Instances), Cost: r.Cost}
		if r.Cost > scaled[i].Policy.Capacity() {
			ra := f.br.retryIn(f.cfg.Clock.Now())
			mr.Allowed, mr.Denied, mr.RetryAfter = false, i, ra
			mr.Results[i] = algo.Result{RetryAfter: ra}
			return mr, nil
		}
	}
	return f.local.TakeMulti(ctx, scaled)
}

// openErr is the FailClosed error: ErrOpen wrapping the primary's failure.
func (f *Fallback) openErr(cause error) error {
	if cause == nil {
		cause, _ = f.br.snapshot()
	}
	if cause == nil {
		return ErrOpen
	}
	return fmt.Errorf("%w: %w", ErrOpen, cause)
}
