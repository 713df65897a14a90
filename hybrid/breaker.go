package hybrid

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/observe"
)

// The breaker's states are observe's (observe.BreakerState), here by
// short names.
const (
	closed   = observe.BreakerClosed   // calls go to the primary
	open     = observe.BreakerOpen     // the primary failed repeatedly; the Fallback's Mode answers until the cool-down ends
	halfOpen = observe.BreakerHalfOpen // the cool-down ended; a few probe calls decide whether it closes or opens again
)

// outcome is what a primary call proved about the primary's health.
type outcome int

const (
	neutral outcome = iota // nothing: bad input, the caller gave up, a local answer
	success
	failure
)

// ticket is what allow hands a caller that may call the primary; done
// takes it back.
type ticket struct {
	gen   uint64 // the breaker generation the call started in
	probe bool   // a half-open probe, counted against Probes
}

// breaker is the state machine. It runs no goroutines: transitions happen
// inside allow and done, by the injected clock, so a test steps it with a
// manual clock and nothing sleeps.
type breaker struct {
	cfg   FallbackConfig
	state atomic.Uint32 // mirrors st for lock-free reads

	mu          sync.Mutex
	st          observe.BreakerState
	gen         uint64 // bumped at every transition: outcomes of older calls are ignored
	consecutive int    // consecutive failures while closed
	calls, fail int    // outcomes in the current window while closed
	windowStart time.Time
	openedAt    time.Time
	inflight    int // probes in flight while half-open
	successes   int // consecutive successful probes
	lastErr     error
	opens       int64
	pending     []transition

	notifyMu sync.Mutex // delivers transitions in order, outside mu
	notify   func(transition)
}

type transition struct {
	from, to observe.BreakerState
	err      error
}

// allow reports whether a call may go to the primary now.
func (b *breaker) allow(now time.Time) (ticket, bool) {
	b.mu.Lock()
	defer b.unlock()
	if b.st == open && now.Sub(b.openedAt) >= b.cfg.CoolDown {
		b.move(halfOpen, nil)
	}
	switch b.st {
	case closed:
		return ticket{gen: b.gen}, true
	case halfOpen:
		if b.inflight < b.cfg.Probes {
			b.inflight++
			return ticket{gen: b.gen, probe: true}, true
		}
	}
	return ticket{}, false
}

// done records the outcome of a call allow let through.
func (b *breaker) done(now time.Time, t ticket, o outcome, err error) {
	b.mu.Lock()
	defer b.unlock()
	if t.gen != b.gen {
		return // started before the last transition: stale evidence
	}
	if o == failure {
		b.lastErr = err
	}
	switch b.st {
	case closed:
		if now.Sub(b.windowStart) >= b.cfg.Window {
			b.windowStart, b.calls, b.fail = now, 0, 0
		}
		switch o {
		case success:
			b.consecutive = 0
			b.calls++
		case failure:
			b.consecutive++
			b.calls++
			b.fail++
			if b.consecutive >= b.cfg.FailureThreshold ||
				(b.calls >= b.cfg.MinCalls && float64(b.fail) >= b.cfg.FailureRatio*float64(b.calls)) {
				b.openedAt = now
				b.move(open, err)
			}
		}
	case halfOpen:
		b.inflight--
		switch o {
		case success:
			if b.successes++; b.successes >= b.cfg.ProbeSuccesses {
				b.windowStart = now
				b.move(closed, nil)
			}
		case failure:
			b.openedAt = now
			b.move(open, err)
		}
	}
}

// move changes state under mu and queues the transition for delivery.
func (b *breaker) move(to observe.BreakerState, err error) {
	from := b.st
	b.st, b.gen = to, b.gen+1
	b.state.Store(uint32(to))
	b.consecutive, b.calls, b.fail, b.inflight, b.successes = 0, 0, 0, 0, 0
	if to == open {
		b.opens++
	}
	b.pending = append(b.pending, transition{from, to, err})
}

// unlock releases mu, then delivers queued transitions in order: notifyMu
// is taken before mu is released, so two transitions are never reported out
// of order, and the hook runs without mu (it may call State).
func (b *breaker) unlock() {
	if len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	ev := b.pending
	b.pending = nil
	b.notifyMu.Lock()
	b.mu.Unlock()
	defer b.notifyMu.Unlock()
	for _, t := range ev {
		b.notify(t)
	}
}

// retryIn returns how long until the breaker lets a probe through, at
// least a millisecond: the earliest a request refused locally for want of
// the primary could be answered by it.
func (b *breaker) retryIn(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st != open {
		return time.Millisecond
	}
	return max(time.Millisecond, b.cfg.CoolDown-now.Sub(b.openedAt))
}

// snapshot returns the last failure and the number of openings so far.
func (b *breaker) snapshot() (error, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr, b.opens
}
