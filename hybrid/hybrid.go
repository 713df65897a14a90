package hybrid

import (
	"context"
	"errors"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Defaults of the configurations: [DenyCacheConfig], [FallbackConfig] and
// [LeasesConfig].
const (
	// DefaultCacheSize is the default number of keys a DenyCache
	// remembers.
	DefaultCacheSize = 100_000
	// DefaultCacheShards is the default number of independently locked
	// shards.
	DefaultCacheShards = 64
	// DefaultClockMargin is the default ClockMargin: enough for a Redis
	// server clock on an NTP-disciplined host, far below the 500ms a
	// token takes at 2 per second.
	DefaultClockMargin = time.Millisecond

	// The Fallback's: see FallbackConfig.
	DefaultTimeout          = 50 * time.Millisecond
	DefaultFailureThreshold = 5
	DefaultFailureRatio     = 0.5
	DefaultMinCalls         = 20
	DefaultWindow           = 10 * time.Second
	DefaultCoolDown         = 2 * time.Second

	// DefaultLifetime is a token lease's default Lifetime: short enough
	// that the fleet holds at most a tenth of a second's refill.
	DefaultLifetime = 100 * time.Millisecond
	// DefaultMinBatch is the default MinBatch: a batch saves at least 3
	// primary calls.
	DefaultMinBatch = 4
	// DefaultLeaseKeys is the default number of keys whose demand Leases
	// measures at once.
	DefaultLeaseKeys = 10_000
)

// Stats counts what one of this package's wrappers did. Each fills the
// fields that are its own, as its Stats method says; the others are zero.
type Stats struct {
	// Calls is the number of calls made to the primary.
	Calls int64

	// Denied (DenyCache) is the number of requests denied locally,
	// without a call.
	Denied int64
	// Entries is the number of keys remembered now (DenyCache) or whose
	// demand is measured now (Leases).
	Entries int
	// Evictions (DenyCache) is the number of entries dropped to make
	// room.
	Evictions int64

	// State (Fallback) is the breaker's state.
	State observe.BreakerState
	// Failures (Fallback) counts the primary calls that failed.
	Failures int64
	// Degraded (Fallback) counts requests answered by the Mode.
	Degraded int64
	// Opens (Fallback) counts transitions to open.
	Opens int64
	// LastError (Fallback) is the primary's last failure, or nil.
	LastError error

	// Local (Leases) counts requests admitted from a batch, without a
	// call.
	Local int64
	// Batches (Leases) counts the grants that filled or topped up a
	// batch.
	Batches int64
	// Returned (Leases) counts tokens given back to the primary; Lost,
	// tokens whose return failed (never admitted: the bucket refills
	// them).
	Returned, Lost int64
	// Held (Leases) is the tokens in batches now.
	Held int64
}

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
