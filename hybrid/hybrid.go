package hybrid

import (
	"context"
	"errors"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Errors returned by this package. Match them with [errors.Is].
var (
	// ErrInvalidConfig reports a configuration a constructor refused.
	ErrInvalidConfig = errors.New("hybrid: invalid config")
	// ErrOpen reports that a Fallback in FailClosed mode refused a
	// request because the primary store is failing. It wraps the
	// primary's last error when there is one.
	ErrOpen = errors.New("hybrid: primary store unavailable")
)

// sourced is implemented by this package's wrappers so that they compose.
// Its methods are the wrapper's Take and TakeMulti after the entry's
// context check, which the outermost wrapper makes once for the chain; the
// bool reports whether the answer came from the innermost primary store
// (Redis, say) rather than from a local cache or fallback. A DenyCache
// learns only from primary answers, and a Fallback's breaker counts only
// primary answers as proof that the primary is healthy: each wrapper asks
// its primary directly (its src field, nil for a plain store), so the bool
// crosses one frame, from the wrapper that knows to the one that uses it.
type sourced interface {
	take(ctx context.Context, r store.Request) (algo.Result, bool, error)
	takeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, bool, error)
}

// denier is implemented by DenyCache: the local denials it can prove
// without calling its primary. A Fallback whose primary is a denier asks it
// before answering by its Mode.
// It also keeps count of the Fallback's local admissions (charge), and
// forgets them when the primary is back (forgetLocal).
type denier interface {
	denyDown(r store.Request) (algo.Result, bool)
	denyDownMulti(reqs []store.Request) (store.MultiResult, bool)
	charge(r store.Request)
	forgetLocal()
	hit(ctx context.Context, i int) // reports a local denial
}

// systemClock is the default clock: time.Now, whose monotonic reading makes
// durations between two readings immune to wall-clock steps.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
