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

// sourced is implemented by this package's wrappers so that they compose:
// the bool reports whether the answer came from the innermost primary store
// (Redis, say) rather than from a local cache or fallback. A DenyCache learns
// only from primary answers, and a Fallback's breaker counts only primary
// answers as proof that the primary is healthy.
type sourced interface {
	takeFrom(ctx context.Context, r store.Request) (algo.Result, bool, error)
	takeMultiFrom(ctx context.Context, reqs []store.Request) (store.MultiResult, bool, error)
}

// denier is implemented by DenyCache: the local denials it can prove
// without calling its primary. A Fallback whose primary is a denier asks it
// before answering by its Mode.
// It also keeps count of the Fallback's local admissions (charge), and
// forgets them when the primary is back (forgetLocal).
type denier interface {
	denyDown(r store.Request) (algo.Result, bool)
	denyMulti(reqs []store.Request) (store.MultiResult, bool)
	charge(r store.Request)
	forgetLocal()
	hit(ctx context.Context, i int) // reports a local denial
}

// takeFrom calls s, telling whether the answer came from a primary store.
func takeFrom(ctx context.Context, s store.Store, r store.Request) (algo.Result, bool, error) {
	if w, ok := s.(sourced); ok {
		return w.takeFrom(ctx, r)
	}
	res, err := s.Take(ctx, r)
	return res, true, err
}

// takeMultiFrom is takeFrom for multi-limit takes.
func takeMultiFrom(ctx context.Context, s store.Store, reqs []store.Request) (store.MultiResult, bool, error) {
	if w, ok := s.(sourced); ok {
		return w.takeMultiFrom(ctx, reqs)
	}
	mr, err := s.TakeMulti(ctx, reqs)
	return mr, true, err
}

// systemClock is the default clock: time.Now, whose monotonic reading makes
// durations between two readings immune to wall-clock steps.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
