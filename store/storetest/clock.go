package storetest

import (
	"sync"
	"time"
)

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
