package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The "beyond-take" scenario: what the operations around a take buy. Each
// of its three pairs of classes sends the same traffic (drawn from the
// stream seeded by the client's index alone), once served by a plain Take
// and once with an operation:
//
//   - upload, upload+refund: users post 20 photos a second apart against
//     10 a minute; a third of the uploads fail on the server, and
//     upload+refund gives a failed upload's token back (httplimit's
//     ChargeIf sparing 5xx), so a user is not charged for the server's
//     failures.
//   - burst, burst+delay: a client fires 20 requests within a second
//     against burst 10 at 2 a second; burst+delay reserves instead of
//     taking, and a request that fits within 5 s is held for its exact
//     delay (httplimit's Delay) instead of refused.
//   - report, report+inflight: users start 6 reports, each running 8 s, a
//     second apart; report+inflight holds a lease per report (httplimit's
//     Concurrency) and refuses a third one in flight.
//
// A refunded request is served but leaves no charge; a held one proceeds,
// and is checked against the never-exceed law, at its reserved time. With
// an algorithm or a store without the operation (the windows, or a
// redisstore without refunds), the class is served by plain Takes: its
// row then shows what the operation would have changed.

// The scenario's policies, and its operations' settings.
var (
	uploadPolicy = algo.PerMinute(10).Burst(10)
	burstPolicy  = algo.PerSecond(2).Burst(10)
	// maxDelay is burst+delay's Delay: at 2 a second, the 10 requests
	// beyond a burst of 10.
	maxDelay = 5 * time.Second
	// reportLease is report+inflight's: 2 in flight, each report holding
	// its lease for its 8 s (the lease's TTL is the report's duration: a
	// lease the store drops exactly when the report ends, so the
	// simulator needs no release event).
	reportLease = algo.LeasePolicy{Limit: 2, TTL: 8 * time.Second}
)

var beyondTake = Scenario{
	Name:    "beyond-take",
	Summary: "failed uploads refunded, a burst held by Delay, slow reports held to 2 in flight, each beside the same traffic without",
	Policy:  uploadPolicy, Duration: 15 * time.Minute, Focus: "upload",
	classes: func(base algo.Policy) []class {
		uploads := func(_ int, pair *rand.Rand) generator {
			return &failing{sessions: sessions{starts: pair, first: 2 * mn, gapMin: 3 * mn, gapMax: 6 * mn,
				plan: func(_ *rand.Rand, at int64) []req { return spread(nil, at, at+19*sec, 20, 1) }}, pair: pair}
		}
		bursts := func(_ int, pair *rand.Rand) generator {
			return &sessions{starts: pair, first: mn, gapMin: mn / 2, gapMax: 3 * mn / 2,
				plan: func(_ *rand.Rand, at int64) []req { return spread(nil, at, at+sec, 20, 1) }}
		}
		reports := func(_ int, pair *rand.Rand) generator {
			return &sessions{starts: pair, first: 2 * mn, gapMin: mn, gapMax: 3 * mn,
				plan: func(_ *rand.Rand, at int64) []req { return spread(nil, at, at+5*sec, 6, 1) }}
		}
		return []class{
			{name: "upload", count: 10, key: keyf("user:upload:%d"), policy: base, gen: uploads},
			{name: "upload+refund", count: 10, key: keyf("user:refund:%d"), policy: base, gen: uploads, op: refundFailed{}},
			{name: "burst", count: 10, key: keyf("user:burst:%d"), policy: burstPolicy, gen: bursts},
			{name: "burst+delay", count: 10, key: keyf("user:delay:%d"), policy: burstPolicy, gen: bursts, op: delayed{maxDelay}},
			{name: "report", count: 10, key: keyf("user:report:%d"), policy: api, gen: reports},
			{name: "report+inflight", count: 10, key: keyf("user:inflight:%d"), policy: api, gen: reports, op: inflight{reportLease}},
		}
	},
}

// failing is sessions whose requests each fail on the server with
// probability 1/3, drawn from pair as each is sent.
type failing struct {
	sessions
	pair   *rand.Rand
	failed bool // the request sent last failed
}

func (f *failing) next(r *rand.Rand, now int64, res *algo.Result) (req, bool) {
	q, ok := f.sessions.next(r, now, res)
	f.failed = f.pair.IntN(3) == 0
	return q, ok
}

// served is the answer to one request: what its client sees, when it
// proceeds (µs since the run began: after it was sent when a reservation
// held it) and the cost that stays charged (zero when refunded).
type served struct {
	res         algo.Result
	at, charged int64
}

// op serves the requests of a class that does more than take.
type op interface {
	serve(ctx context.Context, s store.Store, lim *ratebucket.Limiter, c *client, e event) (served, error)
}

// serve sends client c's request e through the instance's store s and
// its Limiter for c's policy: a plain Take, or the class's op.
func (cl *class) serve(ctx context.Context, s store.Store, lim *ratebucket.Limiter, c *client, e event) (served, error) {
	if cl.op != nil {
		return cl.op.serve(ctx, s, lim, c, e)
	}
	return plainTake(ctx, lim, c, e)
}

// plainTake serves e with a plain Take.
func plainTake(ctx context.Context, lim *ratebucket.Limiter, c *client, e event) (served, error) {
	res, err := lim.Take(ctx, c.key, e.cost)
	return served{res: res.Result, at: e.at, charged: e.cost}, err
}

// refundFailed takes, and gives the tokens of a request that failed back
// at once, as httplimit's ChargeIf does after the handler returns.
type refundFailed struct{}

func (refundFailed) serve(ctx context.Context, s store.Store, lim *ratebucket.Limiter, c *client, e event) (served, error) {
	out, err := plainTake(ctx, lim, c, e)
	f, _ := c.gen.(*failing)
	if err != nil || !out.res.Allowed || f == nil || !f.failed {
		return out, err
	}
	switch _, err := s.Refund(ctx, store.Request{Key: c.key, Policy: c.policy, Cost: e.cost}); {
	case errors.Is(err, store.ErrUnsupported): // another algorithm: the charge stands
	case err != nil:
		return out, err
	default:
		out.charged = 0
	}
	return out, nil
}

// delayed reserves within max instead of taking: a request that fits is
// admitted and proceeds after its delay, as with httplimit's Delay.
type delayed struct{ max time.Duration }

func (d delayed) serve(ctx context.Context, s store.Store, lim *ratebucket.Limiter, c *client, e event) (served, error) {
	r, err := s.Reserve(ctx, store.Request{Key: c.key, Policy: c.policy, Cost: e.cost}, d.max)
	if errors.Is(err, store.ErrUnsupported) {
		return plainTake(ctx, lim, c, e)
	}
	return served{res: r.Result, at: e.at + r.Delay.Microseconds(), charged: e.cost}, err
}

// inflight holds a lease for each request before it takes, and refuses a
// request when the client has p.Limit in flight, as httplimit's
// Concurrency does. A request the bucket refuses gives its lease back.
type inflight struct{ p algo.LeasePolicy }

func (o inflight) serve(ctx context.Context, s store.Store, lim *ratebucket.Limiter, c *client, e event) (served, error) {
	ls := s
	id := strconv.FormatUint(e.seq, 36) // unique in the run, and no randomness
	l, err := ls.AcquireLease(ctx, c.key, o.p, id)
	if err != nil || !l.Allowed {
		return served{res: algo.Result{RetryAfter: l.RetryAfter}, at: e.at}, err
	}
	out, err := plainTake(ctx, lim, c, e)
	if err == nil && !out.res.Allowed {
		_, err = ls.ReleaseLease(ctx, c.key, id)
	}
	return out, err
}
