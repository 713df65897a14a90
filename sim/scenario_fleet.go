package sim

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/clusterslot"
	"github.com/ratebucket/ratebucket/store"
)

// The "leases" and "fleet" scenarios: token leases (hybrid.Leases, the
// [Leased] topology) against one shared bucket, and a fleet of instances
// over a Redis Cluster of several shards. Both are data: a scenario's
// lifetime is the Lifetime of its instances' leases, and its shards the
// masters of the Cluster its shared store stands for.

// hot is the hot key's policy: 10,000 a second with a burst of 1,000, a
// global limit shared by a fleet. In "leases" its clients ask for 12,000
// a second, a fifth over the limit (the law's test); in "fleet" 8,000, a
// normal day under it.
var hot = algo.PerSecond(10_000).Burst(1_000)

// hotClients sends perSec requests a second at one key from n clients,
// each a flood of perSec/n a second.
func hotClients(name string, n int, perSec int64, base algo.Policy) class {
	mean := int64(n) * sec / perSec
	return class{name: name, count: n, key: func(int) string { return "global" }, policy: base,
		gen: func(int, *rand.Rand) generator { return &flood{mean: mean} }}
}

// perUser is each distinct key's policy in "fleet": 10 a second, burst 20.
var perUser = algo.PerSecond(10).Burst(20)

var leases = Scenario{
	Name:    "leases",
	Summary: "one global key at 10,000/s, asked for 12,000/s through every instance: leased batches against one shared bucket",
	Policy:  hot, Duration: 5 * time.Second, Focus: "global",
	lifetime: 100 * time.Millisecond,
	classes: func(base algo.Policy) []class {
		return []class{hotClients("global", 100, 12_000, base), webUsers(50, api)}
	},
}

var fleetScenario = Scenario{
	Name:    "fleet",
	Summary: "a global key at 10,000/s (asked 8,000/s) and 10k users at 0.5/s each, over a 6-shard Redis Cluster",
	Policy:  hot, Duration: 5 * time.Second, Focus: "global",
	lifetime: 100 * time.Millisecond, shards: 6,
	classes: func(base algo.Policy) []class {
		return []class{hotClients("global", 100, 8_000, base),
			{name: "user", count: 10_000, key: keyf("user:%d"), policy: perUser,
				gen: func(int, *rand.Rand) generator { return &flood{mean: 2 * sec} }}}
	},
}

// shardOf returns the shard of key among n, as a Redis Cluster of n
// masters created by redis-cli assigns them: the key's hash slot in n
// contiguous ranges of slots.
func shardOf(key string, n int) int {
	return clusterslot.Of(key) * n / clusterslot.Count
}

// sharded is one store per shard, each key sent to its shard's: what a
// Redis Cluster client does. A multi-key call goes to its first key's
// shard, as a Cluster requires its keys to share a slot.
type sharded []store.Store

var _ store.Store = sharded(nil)

func (s sharded) of(key string) store.Store { return s[shardOf(key, len(s))] }

func (s sharded) first(rs []store.Request) store.Store {
	if len(rs) == 0 {
		return s[0]
	}
	return s.of(rs[0].Key)
}

func (s sharded) Take(ctx context.Context, r store.Request) (algo.Result, error) {
	return s.of(r.Key).Take(ctx, r)
}

func (s sharded) TakeMulti(ctx context.Context, rs []store.Request) (store.MultiResult, error) {
	return s.first(rs).TakeMulti(ctx, rs)
}

func (s sharded) TakeAtMost(ctx context.Context, r store.Request) (int64, algo.Result, error) {
	return s.of(r.Key).TakeAtMost(ctx, r)
}

func (s sharded) Refund(ctx context.Context, r store.Request) (algo.Result, error) {
	return s.of(r.Key).Refund(ctx, r)
}

func (s sharded) RefundMulti(ctx context.Context, rs []store.Request) ([]algo.Result, error) {
	return s.first(rs).RefundMulti(ctx, rs)
}

func (s sharded) Reserve(ctx context.Context, r store.Request, maxWait time.Duration) (algo.Reservation, error) {
	return s.of(r.Key).Reserve(ctx, r, maxWait)
}

func (s sharded) CancelReservation(ctx context.Context, key string, p algo.Policy, t algo.Ticket) (bool, algo.Result, error) {
	return s.of(key).CancelReservation(ctx, key, p, t)
}

func (s sharded) Hold(ctx context.Context, r store.Request, ttl time.Duration) (algo.Hold, algo.Result, error) {
	return s.of(r.Key).Hold(ctx, r, ttl)
}

func (s sharded) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error) {
	return s.of(key).Settle(ctx, key, p, h, actual)
}

func (s sharded) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	return s.of(key).AcquireLease(ctx, key, p, id)
}

func (s sharded) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	return s.of(key).ReleaseLease(ctx, key, id)
}

func (s sharded) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	return s.of(key).RenewLease(ctx, key, p, id)
}

// Close is a no-op: the fleet closes each shard's store.
func (s sharded) Close() error { return nil }

// tapped passes every call to its store and tells the fleet's tap of the
// Take, TakeAtMost and Refund calls a Leased instance makes to the shared
// store: the simulator draws the shared bucket and each instance's batch
// from them (see tracer.backend).
type tapped struct {
	store.Store
	f    *fleet
	inst int
	clk  store.Clock
}

func (t tapped) Take(ctx context.Context, r store.Request) (algo.Result, error) {
	res, err := t.Store.Take(ctx, r)
	if err == nil && t.f.tap != nil {
		t.f.tap(t.inst, r, t.clk.Now(), opTake, 0)
	}
	return res, err
}

func (t tapped) TakeAtMost(ctx context.Context, r store.Request) (int64, algo.Result, error) {
	g, res, err := t.Store.TakeAtMost(ctx, r)
	if err == nil && t.f.tap != nil {
		t.f.tap(t.inst, r, t.clk.Now(), opTakeAtMost, g)
	}
	return g, res, err
}

func (t tapped) Refund(ctx context.Context, r store.Request) (algo.Result, error) {
	res, err := t.Store.Refund(ctx, r)
	if err == nil && t.f.tap != nil {
		t.f.tap(t.inst, r, t.clk.Now(), opRefund, 0)
	}
	return res, err
}

// backendOp is a call tapped reports.
type backendOp int

const (
	opTake backendOp = iota
	opTakeAtMost
	opRefund
)
