package sim

import (
	"sync/atomic"
	"time"

	"github.com/ratebucket/ratebucket/store"
)

// Start is the virtual instant at which every run begins: midnight UTC on
// 1 January 2030. A fixed start keeps runs identical bit for bit, window
// boundaries included.
var Start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is the simulator's virtual time. It satisfies [store.Clock], so a
// store built with it reads simulated time, and it moves only when told to:
// [Run] sets it to each event's instant in turn, jumping over the quiet
// time between events. It never sleeps and never reads the real clock,
// which is why an hour of traffic takes seconds. (A
// github.com/benbjohnson/clock Mock would do the same job, but its Add and
// Set sleep a millisecond of real time each.)
//
// The zero Clock reads the Unix epoch; [NewClock] starts one elsewhere. A
// Clock is safe for simultaneous use (a store may read it from its own
// goroutines); it must not be copied after first use.
type Clock struct {
	us atomic.Int64 // µs since the Unix epoch
}

var _ store.Clock = (*Clock)(nil)

// NewClock returns a Clock reading t, truncated to the microsecond.
func NewClock(t time.Time) *Clock {
	c := new(Clock)
	c.Set(t)
	return c
}

// Now returns the current virtual time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()).UTC() }

// Set moves the clock to t (backwards too: a test may want that).
func (c *Clock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// Add moves the clock by d and returns the new time.
func (c *Clock) Add(d time.Duration) time.Time {
	return time.UnixMicro(c.us.Add(d.Microseconds())).UTC()
}

// Skewed returns a clock that reads c's time plus skew: the wall clock of
// an app instance whose clock is off by skew. It follows c as c moves.
func (c *Clock) Skewed(skew time.Duration) store.Clock {
	return skewed{c, skew.Microseconds()}
}

// micros returns the virtual time in µs since the Unix epoch.
func (c *Clock) micros() int64 { return c.us.Load() }

type skewed struct {
	c    *Clock
	skew int64
}

func (s skewed) Now() time.Time { return time.UnixMicro(s.c.us.Load() + s.skew).UTC() }

// callerClock is the clock of one store shared by several skewed instances
// whose requests carry the caller's time, as redisstore does with a client
// clock: Lua receives the calling instance's Now. The simulator is
// single-threaded, so before each call it sets skew to the calling
// instance's, and the shared store reads exactly that instance's clock.
type callerClock struct {
	c    *Clock
	skew atomic.Int64 // µs
}

func (k *callerClock) Now() time.Time {
	return time.UnixMicro(k.c.us.Load() + k.skew.Load()).UTC()
}
