package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The "llm-gateway" scenario: limiting by a cost known only after the
// work, an LLM call's tokens. Clients call a model every 2 to 14 s; each
// call uses a heavy-tailed number of tokens (150 on average doubled k
// times with probability 2^-(k+1), k ≤ 6: a mean near 525, a tail to
// 12,800, longer than the 6,000-token burst). Three classes send the same
// traffic (each client's draws come from the stream of its index alone),
// limited to 6,000 tokens a minute, three ways:
//
//   - estimate: each call takes the route's estimate (600 tokens) and is
//     never corrected: the limiter's law holds on what it charged, but
//     the tokens really used run past the stated limit (TestLLMGateway
//     replays a client), and light calls pay for tokens never used.
//   - settle: each call holds the estimate (store.Store.Hold) and settles
//     at the tokens used (store.Store.Settle): the difference back, the
//     extra into at most one bucket of debt, which the next calls wait
//     out.
//   - charge-after: each call holds 0 (admitted unless the bucket is in
//     debt) and settles at the tokens used.
//
// The law is checked on what the limiter charged, when it charged it:
// with settlements, Capacity + rate·t + one bucket of debt
// (algo.Policy.SettleBound), which the report shows as a slack of one fill
// time. A call settles when it is made: the simulator has no model of a
// call's duration, so holds are never open side by side. Under the
// windows, which have no holds, the settle classes take the estimate.

// The scenario's policy and estimate.
var (
	llmPolicy   = algo.PerMinute(6000).Burst(6000)
	llmEstimate = int64(600)
)

var llmGateway = Scenario{
	Name:    "llm-gateway",
	Summary: "LLM calls of heavy-tailed token counts: charged an estimate, settled at the tokens used, or charged after",
	Policy:  llmPolicy, Duration: 15 * time.Minute, Focus: "settle",
	debt: true,
	classes: func(base algo.Policy) []class {
		calls := func(_ int, pair *rand.Rand) generator { return &llmCalls{pair: pair} }
		return []class{
			{name: "estimate", count: 10, key: keyf("team:estimate:%d"), policy: base, gen: calls, op: settled{estimate: llmEstimate, never: true}},
			{name: "settle", count: 10, key: keyf("team:settle:%d"), policy: base, gen: calls, op: settled{estimate: llmEstimate}},
			{name: "charge-after", count: 10, key: keyf("team:after:%d"), policy: base, gen: calls, op: settled{}},
		}
	},
}

// llmCalls sends a call every 2 to 14 s whose cost is the tokens it will
// use, drawn from pair: 100 to 200, doubled while a coin comes up heads,
// at most 6 times.
type llmCalls struct {
	pair *rand.Rand
	at   int64
}

func (g *llmCalls) next(_ *rand.Rand, now int64, _ *algo.Result) (req, bool) {
	g.at = max(g.at+between(g.pair, 2*sec, 14*sec), now)
	cost := between(g.pair, 100, 200)
	for k := 0; k < 6 && g.pair.IntN(2) == 0; k++ {
		cost *= 2
	}
	return req{g.at, cost}, true
}

// settled serves a call whose cost (e.cost) is known after it ran: it
// holds estimate and settles at the cost, or with never takes the
// estimate and stays charged it. What it reports charged is what the
// bucket was charged.
type settled struct {
	estimate int64
	never    bool
}

func (o settled) serve(ctx context.Context, s store.Store, lim *ratebucket.Limiter, c *client, e event) (served, error) {
	est := min(o.estimate, c.policy.Capacity())
	q := store.Request{Key: c.key, Policy: c.policy, Cost: est}
	if !o.never {
		h, res, err := s.Hold(ctx, q, time.Minute)
		switch {
		case errors.Is(err, store.ErrUnsupported): // a window: take the estimate
		case err != nil || !res.Allowed:
			return served{res: res, at: e.at}, err
		default:
			st, err := s.Settle(ctx, c.key, c.policy, h, e.cost)
			return served{res: res, at: e.at, charged: e.cost - st.Uncharged}, err
		}
	}
	res, err := lim.Take(ctx, c.key, est)
	return served{res: res.Result, at: e.at, charged: est}, err
}

// replay is what serve does to a bucket, on algo, for the tracer: the
// timeline then draws a settled bucket's debt, below zero.
func (o settled) replay(alg algo.Algorithm, p algo.Policy, s algo.State, now int64, e event) (algo.State, algo.Result, error) {
	est := min(o.estimate, p.Capacity())
	tb, ok := alg.(algo.TokenBucket)
	if o.never || !ok {
		return alg.Take(p, s, now, est)
	}
	next, h, res, err := tb.Hold(p, s, now, est, time.Minute.Microseconds())
	if err != nil || !res.Allowed {
		return next, res, err
	}
	next, _, err = tb.Settle(p, next, now, h, e.cost)
	return next, res, err
}
