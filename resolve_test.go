package ratebucket_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// plans is a tenant database: the plan of each key, changed by tests.
type plans struct {
	mu    sync.Mutex
	plan  map[string]ratebucket.Resolved
	err   error
	calls atomic.Int64
}

func (p *plans) resolve(_ context.Context, key string) (ratebucket.Resolved, error) {
	p.calls.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return ratebucket.Resolved{}, p.err
	}
	r, ok := p.plan[key]
	if !ok {
		return ratebucket.Resolved{}, errNoTenant
	}
	return r, nil
}

func (p *plans) set(key string, r ratebucket.Resolved) {
	p.mu.Lock()
	p.plan[key] = r
	p.mu.Unlock()
}

var (
	errNoTenant = errors.New("no such tenant")
	free        = ratebucket.Resolved{Policy: algo.PerMinute(60).Burst(2), Name: "free"}
	pro         = ratebucket.Resolved{Policy: algo.PerMinute(600).Burst(5), Name: "pro"}
)

func newPlans() *plans {
	return &plans{plan: map[string]ratebucket.Resolved{"acme": free, "globex": pro}}
}

// admitted counts how many of n Allows of key lim admits.
func admitted(t *testing.T, lim *ratebucket.Limiter, key string, n int) int {
	t.Helper()
	got := 0
	for range n {
		res, err := lim.Allow(context.Background(), key)
		if err != nil {
			t.Fatalf("Allow(%q): %v", key, err)
		}
		if res.Allowed {
			got++
		}
	}
	return got
}

func TestLimiterResolvesPolicyPerKey(t *testing.T) {
	clk := storetest.NewClock()
	var rec observetest.Recorder
	s := observe.Wrap(newMemstore(t, clk), "memory", &rec)
	db := newPlans()
	lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Prefix: "api:", Resolver: db.resolve})
	if err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, lim, "acme", 10); got != 2 {
		t.Errorf("free tenant: %d of 10 admitted, want its burst 2", got)
	}
	if got := admitted(t, lim, "globex", 10); got != 5 {
		t.Errorf("pro tenant: %d of 10 admitted, want its burst 5", got)
	}
	names := map[string]int{}
	for _, d := range rec.Take() {
		names[d.Policy]++
	}
	if names["free"] != 10 || names["pro"] != 10 {
		t.Errorf("policy labels %v, want 10 free and 10 pro", names)
	}

	// A plan with a cost: Allow charges it, Take keeps its own.
	db.set("initech", ratebucket.Resolved{Policy: algo.PerMinute(60).Burst(10), Cost: 4})
	if res, err := lim.Allow(context.Background(), "initech"); err != nil || !res.Allowed || res.Remaining != 6 {
		t.Errorf("Allow under a plan of cost 4 = %+v, %v; want admitted with 6 left", res, err)
	}
	if res, err := lim.Take(context.Background(), "initech", 1); err != nil || res.Remaining != 5 {
		t.Errorf("Take(1) under a plan of cost 4 = %+v, %v; want 5 left", res, err)
	}
}

func TestLimiterResolveErrorsAreNeverADefault(t *testing.T) {
	clk := storetest.NewClock()
	hs := &hookStore{Store: newMemstore(t, clk)}
	db := newPlans()
	// A limiter with both a policy and a resolver: the policy is not a
	// fallback.
	lim, err := ratebucket.NewLimiter(hs, algo.PerSecond(1).Burst(100), ratebucket.Config{Resolver: db.resolve})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db.set("zero", ratebucket.Resolved{})
	db.set("neg", ratebucket.Resolved{Policy: free.Policy, Cost: -1})
	for _, tc := range []struct {
		key  string
		want error
	}{
		{"unknown", errNoTenant},
		{"zero", algo.ErrInvalidPolicy},
		{"neg", algo.ErrInvalidCost},
	} {
		res, err := lim.Allow(ctx, tc.key)
		if !errors.Is(err, ratebucket.ErrResolve) || !errors.Is(err, tc.want) || res.Allowed {
			t.Errorf("Allow(%q) = %+v, %v; want an error wrapping ErrResolve and %v", tc.key, res, err, tc.want)
		}
		if _, err := lim.Wait(ctx, tc.key, 1); !errors.Is(err, ratebucket.ErrResolve) {
			t.Errorf("Wait(%q) = %v; want ErrResolve", tc.key, err)
		}
	}
	if n := hs.calls.Load(); n != 0 {
		t.Errorf("%d store calls for unresolved policies, want none", n)
	}
	if _, err := ratebucket.NewLimiter(hs, algo.Policy{}, ratebucket.Config{}); !errors.Is(err, algo.ErrInvalidPolicy) {
		t.Errorf("NewLimiter with neither a policy nor a resolver: %v, want ErrInvalidPolicy", err)
	}
}

// TestLimiterResolverReservesUnderThePlan pins that Reserve, Wait and a
// reservation's Cancel use the resolved policy, not the limiter's.
func TestLimiterResolverReservesUnderThePlan(t *testing.T) {
	clk := storetest.NewClock()
	db := newPlans()
	lim, err := ratebucket.NewLimiter(newMemstore(t, clk), algo.Policy{}, ratebucket.Config{Resolver: db.resolve})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admitted(t, lim, "acme", 2) // free: burst 2, 1/s
	r, err := lim.Reserve(ctx, "acme", 1, 5*time.Second)
	if err != nil || !r.Allowed || r.Delay != time.Second {
		t.Fatalf("Reserve = %+v, %v; want admitted after 1s", r, err)
	}
	if ok, res, err := r.Cancel(ctx); err != nil || !ok || res.Remaining != 0 {
		t.Fatalf("Cancel = %v, %+v, %v; want given back", ok, res, err)
	}
	if res, err := lim.Take(ctx, "acme", 0); err != nil || res.Remaining != 0 || res.ResetAfter != 2*time.Second {
		t.Fatalf("after the cancel: %+v, %v; want empty, full in 2s", res, err)
	}
	if res, err := lim.Refund(ctx, "acme", 1); err != nil || res.Remaining != 1 {
		t.Fatalf("Refund = %+v, %v; want 1 left", res, err)
	}
	if _, err := lim.Refund(ctx, "unknown", 1); !errors.Is(err, ratebucket.ErrResolve) || !errors.Is(err, errNoTenant) {
		t.Fatalf("Refund of an unknown tenant = %v; want ErrResolve", err)
	}
}

func TestResolverCacheStalenessIsTTL(t *testing.T) {
	clk := storetest.NewClock()
	db := newPlans()
	c, err := ratebucket.NewResolverCache(db.resolve, ratebucket.CacheConfig{TTL: 30 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5 {
		if r, err := c.Resolve(ctx, "acme"); err != nil || r.Name != "free" {
			t.Fatalf("Resolve = %+v, %v", r, err)
		}
	}
	db.set("acme", pro) // the tenant upgrades
	clk.Add(30*time.Second - time.Microsecond)
	if r, _ := c.Resolve(ctx, "acme"); r.Name != "free" {
		t.Errorf("within TTL of the answer: %q, want the cached free", r.Name)
	}
	clk.Add(time.Microsecond)
	if r, _ := c.Resolve(ctx, "acme"); r.Name != "pro" {
		t.Errorf("TTL after the answer: %q, want pro", r.Name)
	}
	if n := db.calls.Load(); n != 2 {
		t.Errorf("%d resolver calls, want 2", n)
	}
	if st := c.Stats(); st != (ratebucket.CacheStats{Keys: 1, Hits: 5, Misses: 2}) {
		t.Errorf("Stats = %+v", st)
	}
	db.set("acme", free)
	c.Forget("acme")
	if r, _ := c.Resolve(ctx, "acme"); r.Name != "free" {
		t.Errorf("after Forget: %q, want the source's free", r.Name)
	}
}

func TestResolverCacheIsBounded(t *testing.T) {
	clk := storetest.NewClock()
	db := newPlans()
	for _, k := range []string{"a", "b", "c", "d"} {
		db.set(k, free)
	}
	c, err := ratebucket.NewResolverCache(db.resolve, ratebucket.CacheConfig{Size: 3, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "a", "d"} { // d evicts b, the least recently used
		c.Resolve(ctx, k)
	}
	if st := c.Stats(); st.Keys != 3 || st.Misses != 4 {
		t.Fatalf("Stats = %+v, want 3 keys and 4 misses", st)
	}
	before := db.calls.Load()
	for _, k := range []string{"a", "c", "d"} {
		c.Resolve(ctx, k)
	}
	if n := db.calls.Load() - before; n != 0 {
		t.Errorf("a, c, d cost %d resolver calls, want 0", n)
	}
	c.Resolve(ctx, "b")
	if n := db.calls.Load() - before; n != 1 {
		t.Errorf("b cost %d resolver calls, want 1: it was evicted", n-0)
	}
	for _, cfg := range []ratebucket.CacheConfig{{Size: -1}, {TTL: -1}, {ErrorTTL: -1}} {
		if _, err := ratebucket.NewResolverCache(db.resolve, cfg); !errors.Is(err, ratebucket.ErrInvalidCacheConfig) {
			t.Errorf("NewResolverCache(%+v) = %v, want ErrInvalidCacheConfig", cfg, err)
		}
	}
	if _, err := ratebucket.NewResolverCache(nil, ratebucket.CacheConfig{}); !errors.Is(err, ratebucket.ErrInvalidCacheConfig) {
		t.Errorf("NewResolverCache(nil) = %v, want ErrInvalidCacheConfig", err)
	}
}

func TestResolverCacheErrors(t *testing.T) {
	clk := storetest.NewClock()
	db := newPlans()
	db.err = errors.New("database down")
	c, err := ratebucket.NewResolverCache(db.resolve, ratebucket.CacheConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratebucket.NewLimiter(newMemstore(t, clk), algo.Policy{}, ratebucket.Config{Resolver: c.Resolve})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := lim.Allow(ctx, "acme"); !errors.Is(err, ratebucket.ErrResolve) || !errors.Is(err, db.err) {
			t.Fatalf("Allow = %v, want ErrResolve wrapping the database's error", err)
		}
	}
	if n := db.calls.Load(); n != 3 {
		t.Errorf("%d resolver calls, want 3: errors are not cached by default", n)
	}
	db.mu.Lock()
	db.err = nil
	db.mu.Unlock()
	if res, err := lim.Allow(ctx, "acme"); err != nil || !res.Allowed {
		t.Errorf("after the database is back: %+v, %v", res, err)
	}

	// With ErrorTTL, an error is reused that long.
	c, _ = ratebucket.NewResolverCache(db.resolve, ratebucket.CacheConfig{ErrorTTL: time.Second, Clock: clk})
	before := db.calls.Load()
	for range 3 {
		if _, err := c.Resolve(ctx, "nobody"); !errors.Is(err, errNoTenant) {
			t.Fatalf("Resolve = %v", err)
		}
	}
	clk.Add(time.Second)
	c.Resolve(ctx, "nobody")
	if n := db.calls.Load() - before; n != 2 {
		t.Errorf("%d resolver calls, want 2: one per ErrorTTL", n)
	}
}

// blocking is a resolver that waits for release, counting its calls and
// announcing each on started.
type blocking struct {
	calls   atomic.Int64
	started chan struct{}
	release chan struct{}
}

func (b *blocking) resolve(ctx context.Context, _ string) (ratebucket.Resolved, error) {
	b.calls.Add(1)
	b.started <- struct{}{}
	select {
	case <-b.release:
		return free, nil
	case <-ctx.Done():
		return ratebucket.Resolved{}, ctx.Err()
	}
}

// waitMisses spins until c has counted n misses: the callers are then
// waiting for the resolver call in flight.
func waitMisses(c *ratebucket.ResolverCache, n uint64) {
	for c.Stats().Misses < n {
		runtime.Gosched()
	}
}

func TestResolverCacheSharesOneCallPerKey(t *testing.T) {
	b := &blocking{started: make(chan struct{}, 16), release: make(chan struct{})}
	c, err := ratebucket.NewResolverCache(b.resolve, ratebucket.CacheConfig{Clock: storetest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	got := make(chan ratebucket.Resolved, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Resolve(context.Background(), "acme")
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
	}
	<-b.started
	waitMisses(c, n)
	close(b.release)
	wg.Wait()
	close(got)
	for r := range got {
		if r.Name != "free" {
			t.Errorf("a caller got %+v", r)
		}
	}
	if k := b.calls.Load(); k != 1 {
		t.Errorf("%d resolver calls for %d concurrent misses, want 1", k, n)
	}
}

// TestResolverCacheLeaderLeaves pins that a caller whose context ends
// while it runs the shared resolver call does not fail the others: they
// ask again for themselves.
func TestResolverCacheLeaderLeaves(t *testing.T) {
	b := &blocking{started: make(chan struct{}, 16), release: make(chan struct{})}
	c, err := ratebucket.NewResolverCache(b.resolve, ratebucket.CacheConfig{Clock: storetest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() {
		_, err := c.Resolve(ctx, "acme")
		leader <- err
	}()
	<-b.started
	follower := make(chan error, 1)
	go func() {
		r, err := c.Resolve(context.Background(), "acme")
		if err == nil && r.Name != "free" {
			err = errors.New("wrong answer " + r.Name)
		}
		follower <- err
	}()
	waitMisses(c, 2)
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: %v, want its context's end", err)
	}
	<-b.started // the follower's own call
	close(b.release)
	if err := <-follower; err != nil {
		t.Errorf("follower: %v, want the plan", err)
	}
	if st := c.Stats(); st.Keys != 0 {
		t.Errorf("Stats = %+v: the follower's retry is not cached, the leader's error neither", st)
	}
}

// TestShadowLimiterChargesItsOwnBucket pins the shadow decision: a shadow
// limiter charges exactly what an enforced one would (only what it
// admits), reports its refusals as shadow denials, and lets every call
// through.
func TestShadowLimiterChargesItsOwnBucket(t *testing.T) {
	clk := storetest.NewClock()
	var rec observetest.Recorder
	s := observe.Wrap(newMemstore(t, clk), "memory", &rec)
	p := algo.PerSecond(1).Burst(3)
	shadow, err := ratebucket.NewLimiter(s, p, ratebucket.Config{Prefix: "new:", Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	enforced, err := ratebucket.NewLimiter(s, p, ratebucket.Config{Prefix: "old:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "jobs", Policy: "new-limit"})
	var sh, en []bool
	var retry []time.Duration
	for range 5 {
		r1, err := shadow.Allow(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		r2, _ := enforced.Allow(ctx, "alice")
		sh, en, retry = append(sh, r1.Allowed), append(en, r2.Allowed), append(retry, r1.RetryAfter)
		if r1.Remaining != r2.Remaining {
			t.Errorf("shadow bucket at %d, enforced at %d: a shadow limit charges as an enforced one", r1.Remaining, r2.Remaining)
		}
	}
	if want := []bool{true, true, true, true, true}; !slices.Equal(sh, want) {
		t.Errorf("shadow Allowed %v, want %v", sh, want)
	}
	if want := []bool{true, true, true, false, false}; !slices.Equal(en, want) {
		t.Errorf("enforced Allowed %v, want %v", en, want)
	}
	if retry[2] != 0 || retry[3] != time.Second || retry[4] != time.Second {
		t.Errorf("shadow RetryAfter %v, want 0 then 1s for the refusals", retry)
	}
	var outcomes []string
	for _, d := range rec.Take() {
		if d.Route != "jobs" || d.Policy != "new-limit" {
			t.Errorf("labels lost: %+v", d)
		}
		outcomes = append(outcomes, d.Outcome.String())
	}
	want := []string{"allowed", "allowed", "allowed", "allowed", "allowed", "allowed",
		"shadow_denied", "denied", "shadow_denied", "denied"}
	if !slices.Equal(outcomes, want) {
		t.Errorf("outcomes\n %v\nwant\n %v", outcomes, want)
	}
	// Wait never holds a shadow caller; Reserve and TakeAtMost would.
	if res, err := shadow.Wait(ctx, "alice", 1); err != nil || !res.Allowed {
		t.Errorf("shadow Wait = %+v, %v; want at once", res, err)
	}
	if _, err := shadow.Reserve(ctx, "alice", 1, time.Second); !errors.Is(err, store.ErrUnsupported) {
		t.Errorf("shadow Reserve: %v, want ErrUnsupported", err)
	}
	if _, _, err := shadow.TakeAtMost(ctx, "alice", 1); !errors.Is(err, store.ErrUnsupported) {
		t.Errorf("shadow TakeAtMost: %v, want ErrUnsupported", err)
	}
}

// BenchmarkResolverCache measures a cache hit, from one goroutine and
// from all, over 1024 keys:
//
//	go test -run '^$' -bench ResolverCache -benchmem ./store/
func BenchmarkResolverCache(b *testing.B) {
	src := func(context.Context, string) (ratebucket.Resolved, error) { return pro, nil }
	c, err := ratebucket.NewResolverCache(src, ratebucket.CacheConfig{}) // the real clock, as in production
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
		c.Resolve(context.Background(), keys[i])
	}
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			c.Resolve(context.Background(), keys[i%len(keys)])
		}
	})
	b.Run("hit-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				c.Resolve(context.Background(), keys[i%len(keys)])
			}
		})
	})
}

// TestResolverCachePanic: a resolver that panics leaves no call in
// flight behind: the panic reaches its caller, and the next call asks
// again.
func TestResolverCachePanic(t *testing.T) {
	calls := 0
	c, err := ratebucket.NewResolverCache(func(context.Context, string) (ratebucket.Resolved, error) {
		if calls++; calls == 1 {
			panic("plan database driver bug")
		}
		return free, nil
	}, ratebucket.CacheConfig{})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the resolver's panic did not reach its caller")
			}
		}()
		c.Resolve(context.Background(), "acme")
	}()
	if r, err := c.Resolve(context.Background(), "acme"); err != nil || r.Name != "free" {
		t.Errorf("after a panic: %+v, %v; want the plan", r, err)
	}
}

// TestLimiterReportsResolveFailures checks that a call whose policy could
// not be resolved, which reaches no store, is still a failed decision for
// the store's observer (and its counts), under the call's labels and with
// the resolver's error; and that a store not observed is not asked.
func TestLimiterReportsResolveFailures(t *testing.T) {
	c := &observetest.Counter{}
	db := newPlans()
	s := observe.Wrap(newMemstore(t, storetest.NewClock()), "memory", c)
	lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Resolver: db.resolve})
	if err != nil {
		t.Fatal(err)
	}
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /api", Policy: "plan"})
	calls := []func() error{
		func() error { _, err := lim.Allow(ctx, "unknown"); return err },
		func() error { _, err := lim.Take(ctx, "unknown", 3); return err },
		func() error { _, err := lim.Refund(ctx, "unknown", 2); return err },
		func() error { _, _, err := lim.TakeAtMost(ctx, "unknown", 4); return err },
		func() error { _, err := lim.Reserve(ctx, "unknown", 5, time.Second); return err },
	}
	for i, call := range calls {
		if err := call(); !errors.Is(err, ratebucket.ErrResolve) {
			t.Fatalf("call %d: %v, want ErrResolve", i, err)
		}
	}
	want := []struct {
		op   observe.Op
		cost int64
	}{{observe.OpTake, 1}, {observe.OpTake, 3}, {observe.OpRefund, 2}, {observe.OpTakeAtMost, 4}, {observe.OpReserve, 5}}
	got := c.Take()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	for i, d := range got {
		if d.Op != want[i].op || d.Cost != want[i].cost || d.Outcome != observe.OutcomeError || !errors.Is(d.Err, errNoTenant) ||
			d.Route != "GET /api" || d.Policy != "plan" || d.Store != "memory" {
			t.Errorf("event %d = %+v; want a failed %v of cost %d with the labels and the resolver's error", i, d, want[i].op, want[i].cost)
		}
	}
	if n := c.Tallies()[[3]string{"memory", "plan", "GET /api"}]; n[observe.OutcomeError] != uint64(len(calls)) {
		t.Errorf("counts %v, want %d failures", n, len(calls))
	}
	observe.ReportFailure(ctx, newMemstore(t, storetest.NewClock()), observe.OpTake, 1, errNoTenant) // not observed: nothing to do
}
