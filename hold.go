package ratebucket

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// Hold is a hold made by [Limiter.Hold]: the store's answer (Allowed, the
// bucket's Result after it, with the policy's Limit) and the open hold (algo.Hold: its estimate and
// deadline) that [Hold.Settle] closes at the actual cost. The zero Hold,
// like a refused one, has nothing to settle.
type Hold struct {
	Result
	algo.Hold
	lim *Limiter
	key string
}

// Hold takes estimate tokens from key's bucket now, for work whose cost is
// known only after it is done (an LLM call's tokens, a response's bytes):
// admitted exactly when a Take of estimate would be, and then open until
// [Hold.Settle] corrects it to the actual cost or ttl passes, after which
// it has settled at its estimate (see [store.Store].Hold). An estimate of
// 0 charges all of the cost when it is known, and is refused while the
// bucket is in debt. A refused hold charges nothing and has an exact
// RetryAfter.
//
// A shadow Limiter has no Hold ([store.ErrUnsupported]), nor does a
// calendar quota (algo.ErrQuotaUnsupported); other errors are the Store's.
func (l *Limiter) Hold(ctx context.Context, key string, estimate int64, ttl time.Duration) (Hold, error) {
	if err := l.check(key); err != nil {
		return Hold{}, err
	}
	if l.shadow {
		return Hold{}, fmt.Errorf("%w: a shadow Limiter has no Hold", store.ErrUnsupported)
	}
	ctx, p, _, err := l.policy(ctx, key, observe.OpHold, estimate)
	if err != nil {
		return Hold{}, err
	}
	if p.IsQuota() {
		return Hold{}, fmt.Errorf("ratebucket: Hold under %v: %w", p, algo.ErrQuotaUnsupported)
	}
	h, res, err := l.s.Hold(ctx, store.Request{Key: l.prefix + key, Policy: p, Cost: estimate, Refundable: true}, ttl)
	return Hold{Result: withLimit(res, p, err), Hold: h, lim: l, key: key}, err
}

// Settle closes the hold at the actual cost: the difference from the
// estimate is given back, or the extra charged, even into debt, at most one
// full bucket of it (Uncharged reports the rest); requests after wait the
// debt out, each told the exact wait. A hold settled already is
// algo.ErrHoldSettled, one past its deadline algo.ErrHoldExpired (its
// estimate stays charged), a negative or overflowing actual cost
// algo.ErrInvalidCost: see [store.Store].Settle. A hold that was refused
// has nothing to settle: Settle returns a zero Settlement and calls nothing.
func (h Hold) Settle(ctx context.Context, actual int64) (algo.Settlement, error) {
	if h.lim == nil || !h.Allowed || h.ID == "" {
		return algo.Settlement{}, nil
	}
	if err := h.lim.check(h.key); err != nil {
		return algo.Settlement{}, err
	}
	return h.lim.s.Settle(ctx, h.lim.prefix+h.key, h.Policy, h.Hold, actual)
}
