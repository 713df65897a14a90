package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// honourTiers are the tiers of the generated configurations; every
// generated request has one, so a tier's absence is never the reason a
// request fails.
var honourTiers = []string{"free", "paid"}

// TestConfigsHonoured is issue 28's property: a configuration New (and
// With) accepts is one its limits can honour. It generates Configs (one
// to three limits of token buckets and calendar quotas, each with a
// Policy, tiers (ResolveByTier) or a Resolve, shadow or enforced; a static Cost or a
// CostFunc, Delay, a Concurrency limit, ChargeIf, Leases, a route in shadow) and a
// route derived With another, builds them on one store, and sends each
// accepted one requests whose own inputs are valid (a known tier, a cost
// within every capacity), moving a mock clock between them, across quota
// periods too. No request may then end Invalid, FailedOpen or
// FailedClosed, or carry an error: a store that is up answers every one.
// A Config New refuses must be refused with ErrInvalidConfig. On memstore
// and on a real redis-server (the mock clock as redisstore's client
// clock).
func TestConfigsHonoured(t *testing.T) {
	srv := redistest.Start(t)
	backends := []struct {
		name string
		new  func(t *testing.T, clk store.Clock) store.Store
	}{
		{"memstore", func(t *testing.T, clk store.Clock) store.Store { return newStore(t, clk) }},
		{"redis", func(t *testing.T, clk store.Clock) store.Store {
			s, err := redisstore.New(srv.Client(), redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clk := clock.NewMock()
			clk.Set(time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC))
			s := b.new(t, clk)
			var accepted, refused, requests int
			rapid.Check(t, func(rt *rapid.T) {
				g := genHonourConfig(rt)
				cfg := g.cfg
				cfg.Store, cfg.Clock = s, clk
				if cfg.Leases != nil {
					lc := *cfg.Leases
					lc.Clock = clk
					cfg.Leases = &lc
				}
				cfg.Prefix = fmt.Sprintf("h%d:", accepted+refused)
				var ev events
				cfg.Observer = ev.Observe // a route keeps its parent's
				m, err := New(cfg)
				if err == nil && g.route != nil {
					m, err = m.With(*g.route)
				}
				if err != nil {
					if !errors.Is(err, ErrInvalidConfig) {
						rt.Fatalf("New/With refused with %v, which is not ErrInvalidConfig", err)
					}
					refused++
					return
				}
				accepted++
				defer m.Close()
				var status int
				h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
				for i := range rapid.IntRange(1, 8).Draw(rt, "requests") {
					status = rapid.SampledFrom([]int{200, 401, 500}).Draw(rt, "status")
					g.reqCost = rapid.Int64Range(0, g.maxReqCost).Draw(rt, "cost")
					tier := rapid.SampledFrom(honourTiers).Draw(rt, "tier")
					user := rapid.SampledFrom([]string{"u1", "u2"}).Draw(rt, "user")
					whileHeld(clk, func() { do(h, "192.0.2.1:1", asUser(user, tier)) })
					requests++
					ev.mu.Lock()
					for _, e := range ev.ev {
						if e.Err != nil || e.Outcome == Invalid || e.Outcome == FailedOpen || e.Outcome == FailedClosed || e.Outcome == Cancelled {
							ev.mu.Unlock()
							rt.Fatalf("request %d (tier %s, cost %d): %v, error %v", i, tier, g.reqCost, e.Outcome, e.Err)
						}
					}
					ev.ev = nil
					ev.mu.Unlock()
					clk.Add(rapid.SampledFrom([]time.Duration{0, 300 * time.Millisecond, 5 * time.Second, time.Hour, 26 * time.Hour}).Draw(rt, "advance"))
				}
			})
			t.Logf("%d configurations accepted, %d refused; %d requests", accepted, refused, requests)
			if accepted == 0 || refused == 0 {
				t.Fatalf("%d accepted, %d refused: the generator must make both", accepted, refused)
			}
		})
	}
}

// whileHeld runs send, which may be held by Delay on clk's timers, moving clk
// on until it returns.
func whileHeld(clk *clock.Mock, send func()) {
	done := make(chan struct{})
	go func() { send(); close(done) }()
	for {
		select {
		case <-done:
			return
		default:
			clk.Add(50 * time.Millisecond) // sleeps 1ms of real time: no spin
		}
	}
}

// honourConfig is a generated configuration: the Config, a route to
// derive from it (nil: none), and the request costs a CostFunc answers.
type honourConfig struct {
	cfg        Config
	route      *Config
	maxReqCost int64 // a CostFunc's costs are in [0, maxReqCost]
	reqCost    int64 // the current request's
}

// genHonourConfig draws a configuration. Resolvers answer policies whose
// capacity holds every cost the configuration can charge, and CostFuncs
// costs within every capacity: those are answers at request time, which
// New cannot check, and the property is about what it can.
func genHonourConfig(t *rapid.T) *honourConfig {
	g := &honourConfig{}
	pools := []algo.Policy{
		algo.PerSecond(2).Burst(5), algo.PerSecond(1).Burst(3), algo.PerMinute(30).Burst(20),
		algo.Quota(4, algo.Day, 0), algo.Quota(20, algo.Month, 0), algo.Quota(3, algo.Week, -5*time.Hour),
	}
	policy := rapid.SampledFrom(pools)
	minCap := int64(algo.MaxCapacity)
	use := func(p algo.Policy) algo.Policy { minCap = min(minCap, p.Capacity()); return p }
	var resolvers []*[]algo.Policy // filtered once the costs are known
	var tierRes []func()           // build the tiers' resolvers, then
	limits := func(label string) []Limit {
		ls := make([]Limit, rapid.IntRange(1, 3).Draw(t, label+"limits"))
		for i := range ls {
			l := &ls[i]
			l.Name = fmt.Sprintf("l%d", i)
			l.Shadow = rapid.IntRange(0, 4).Draw(t, label+"shadow") == 0
			switch rapid.IntRange(0, 3).Draw(t, label+"kind") {
			case 0, 1:
				l.Policy = use(policy.Draw(t, label+"policy"))
			case 2: // tiers: ResolveByTier over the answers, once filtered
				answers := &[]algo.Policy{}
				resolvers = append(resolvers, answers)
				pick := rapid.SliceOfN(rapid.IntRange(0, len(pools)-1), len(honourTiers), len(honourTiers)).Draw(t, label+"tiers")
				var byTier Resolver
				tierRes = append(tierRes, func() {
					tiers := map[string]algo.Policy{}
					for i, tier := range honourTiers {
						tiers[tier] = (*answers)[pick[i]%len(*answers)]
					}
					var err error
					if byTier, err = ResolveByTier(tiers, tierOf); err != nil {
						t.Fatal(err)
					}
				})
				l.Resolve = ratebucket.Resolver(func(ctx context.Context, id string) (ratebucket.Resolved, error) { return byTier.Resolve(ctx, id) })
			case 3:
				answers := &[]algo.Policy{}
				resolvers = append(resolvers, answers)
				priced := rapid.Bool().Draw(t, label+"priced")
				l.Resolve = ratebucket.Resolver(func(ctx context.Context, _ string) (ratebucket.Resolved, error) {
					p := (*answers)[len(tierOf(ctx))%len(*answers)]
					res := ratebucket.Resolved{Policy: p, Name: tierOf(ctx)}
					if priced {
						res.Cost = min(g.reqCost, p.Capacity())
					}
					return res, nil
				})
			}
		}
		if rapid.IntRange(0, 5).Draw(t, label+"allShadow") == 0 { // a route in shadow
			for i := range ls {
				ls[i].Shadow = true
			}
		}
		return ls
	}
	options := func(c *Config, label string) {
		if rapid.IntRange(0, 2).Draw(t, label+"delay") == 0 {
			c.Delay = rapid.SampledFrom([]time.Duration{time.Millisecond, 700 * time.Millisecond, 3 * time.Second}).Draw(t, label+"delayBy")
		}
		if rapid.IntRange(0, 2).Draw(t, label+"conc") == 0 {
			c.Concurrency = Concurrency{Policy: algo.LeasePolicy{Limit: rapid.Int64Range(1, 3).Draw(t, label+"leases"), TTL: time.Minute}}
		}
		if rapid.IntRange(0, 2).Draw(t, label+"lease") == 0 { // a route's is refused: it shares its parent's
			c.Leases = &hybrid.LeasesConfig{
				Instances:  rapid.IntRange(1, 3).Draw(t, label+"instances"),
				Lifetime:   rapid.SampledFrom([]time.Duration{100 * time.Millisecond, 2 * time.Second, 10 * time.Second}).Draw(t, label+"lifetime"),
				MinBatch:   rapid.Int64Range(1, 4).Draw(t, label+"minBatch"),
				SweepEvery: -1,
			}
		}
		if rapid.IntRange(0, 2).Draw(t, label+"charge") == 0 {
			c.ChargeIf = func(status int) bool { return status < 500 }
		}
		switch rapid.IntRange(0, 3).Draw(t, label+"cost") {
		case 0:
			c.Cost = rapid.Int64Range(1, 25).Draw(t, label+"fixed") // above some capacities at times
		case 1:
			c.CostBy = func(*http.Request) int64 { return g.reqCost }
		}
	}
	g.cfg = Config{Key: User(IP), Fail: FailClosed(time.Second), Logger: slog.New(slog.DiscardHandler)}
	g.cfg.Limits = limits("")
	options(&g.cfg, "")
	if rapid.Bool().Draw(t, "route") {
		r := Config{}
		if rapid.Bool().Draw(t, "routeLimits") {
			r.Limits = limits("route.")
		}
		options(&r, "route.")
		g.route = &r
	}
	// The costs a request can be charged: the static ones, and a
	// CostFunc's up to the smallest static capacity.
	cost := max(g.cfg.Cost, 1)
	if g.route != nil && g.route.Cost != 0 {
		cost = g.route.Cost
	}
	g.maxReqCost = min(minCap, 5)
	need := max(cost, g.maxReqCost)
	for _, answers := range resolvers {
		for _, p := range pools {
			if p.Capacity() >= need {
				*answers = append(*answers, p)
			}
		}
		if len(*answers) == 0 {
			*answers = append(*answers, algo.PerSecond(1).Burst(need))
		}
	}
	for _, build := range tierRes {
		build()
	}
	return g
}
