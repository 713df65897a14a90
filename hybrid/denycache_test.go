package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

var ctx = context.Background()

// newMem returns a memstore reading clk, closed at cleanup.
func newMem(t testing.TB, clk store.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newCache returns a DenyCache over primary reading clk.
func newCache(t testing.TB, primary store.Store, cfg hybrid.DenyCacheConfig) *hybrid.DenyCache {
	t.Helper()
	c, err := hybrid.NewDenyCache(primary, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDenyCacheConformance(t *testing.T) {
	for _, margin := range []time.Duration{-1, 0, 50 * time.Millisecond} {
		t.Run(fmt.Sprintf("margin=%v", margin), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
				skipBackwards(t)
				return newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: margin, Size: 64})
			})
		})
	}
}

// abuse drives an abusive client at one request every 3333µs (18,000 a
// minute) for d against a cache and, in lockstep, a plain store on the same
// clock, and fails on any difference in their answers. It returns the
// number of requests and of admissions.
func abuse(t testing.TB, clk *storetest.Clock, cached, plain store.Store, p algo.Policy, d time.Duration) (reqs, admitted int64) {
	t.Helper()
	const every = 3333 * time.Microsecond
	for end := clk.Now().Add(d); clk.Now().Before(end); clk.Add(every) {
		got, err := cached.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("request %d at +%v: cached %+v, plain %+v", reqs, clk.Now().Sub(storetest.Start), got, want)
		}
		reqs++
		if got.Allowed {
			admitted++
		}
	}
	return reqs, admitted
}

// TestDenyCacheAbusiveClient is the measurement: 18,000 requests a
// minute against burst 100 at 2 per second, answered identically to the
// plain store (every field of every Result), with at least 99% fewer
// primary calls. Each refilled token costs one call (its admission); the
// margin adds the calls that fall within it before each token.
func TestDenyCacheAbusiveClient(t *testing.T) {
	p := algo.PerSecond(2).Burst(100)
	tokens := func(d time.Duration) int64 { return int64(d / (500 * time.Millisecond)) }
	tests := []struct {
		name     string
		margin   time.Duration
		d        time.Duration
		maxExtra int64 // calls allowed beyond one per admission
	}{
		{"exact clock", -1, 2 * time.Minute, 1},
		{"default margin", 0, 10 * time.Minute, 1 + tokens(10*time.Minute)*2/5},
		{"10ms margin", 10 * time.Millisecond, 2 * time.Minute, 1 + 4*tokens(2*time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			clk := storetest.NewClock()
			c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: tc.margin})
			reqs, admitted := abuse(t, clk, c, newMem(t, clk), p, d)
			if want := p.Capacity() + int64(d/(500*time.Millisecond)); admitted < want-1 || admitted > want {
				t.Errorf("admitted %d, want capacity + rate·d = %d (less one for the last token)", admitted, want)
			}
			st := c.Stats()
			if st.Calls+st.Denied != reqs {
				t.Errorf("calls %d + local denials %d != %d requests", st.Calls, st.Denied, reqs)
			}
			if st.Calls > admitted+tc.maxExtra {
				t.Errorf("%d primary calls for %d admissions: more than %d extra", st.Calls, admitted, tc.maxExtra)
			}
			reduction := 1 - float64(st.Calls)/float64(reqs)
			t.Logf("%d requests, %d admitted, %d primary calls: %.2f%% fewer", reqs, admitted, st.Calls, 100*reduction)
			if tc.margin <= time.Millisecond && reduction < 0.99 {
				t.Errorf("reduction %.4f < 0.99", reduction)
			}
		})
	}
}

// TestDenyCacheTwin drives random requests (random policies, costs and
// clock steps) through a cache over a client-clock primary (sharedBucket,
// algo.TokenBucket over shared state) and checks every local answer
// against what the primary itself would have answered at that instant: the
// same Result when the cache is alone, a denial with no later RetryAfter
// when a second instance also takes from the primary. With a monotonic
// clock it also runs a plain memstore in lockstep and requires the same
// decisions (and, alone, the same Results) at every step. With the clock
// stepping back (up to 2ms behind its latest reading, with a 2ms margin)
// the plain store is not comparable step by step: a local denial does not
// advance the primary's stamp as the plain store's denial does, so the
// cache is stricter there. The law (never more than capacity + rate·t)
// holds in every case: TestDenyCacheConformance checks it.
func TestDenyCacheTwin(t *testing.T) {
	tests := []struct {
		name   string
		others bool
		back   time.Duration
	}{
		{"alone", false, 0},
		{"other instance", true, 0},
		{"clock steps back", false, 2 * time.Millisecond},
		{"other instance, clock steps back", true, 2 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { twin(t, rt, tc.others, tc.back) })
		})
	}
}

func twin(t *testing.T, rt *rapid.T, others bool, back time.Duration) {
	clk := storetest.NewClock()
	shared := &sharedBucket{}
	primary, plain := shared.view(clk), newMem(t, clk)
	margin := time.Duration(-1)
	if back > 0 {
		margin = back
	}
	c := newCache(t, primary, hybrid.DenyCacheConfig{Clock: clk, ClockMargin: margin, Size: 4, Shards: 1})
	ps := []algo.Policy{genPolicy(rt, "p0"), genPolicy(rt, "p1")}
	latest := clk.Now()
	for i := range rapid.IntRange(1, 100).Draw(rt, "ops") {
		k := rapid.IntRange(0, len(ps)-1).Draw(rt, "key")
		key, p := fmt.Sprint("k", k), ps[k]
		cost := rapid.Int64Range(0, p.Capacity()).Draw(rt, "cost")
		step := rapid.Int64Range(-back.Microseconds(), 2*p.FillTime().Microseconds()/p.Capacity()).Draw(rt, "step µs")
		if now := clk.Add(time.Duration(step) * time.Microsecond); now.After(latest) {
			latest = now
		} else if now.Before(latest.Add(-back)) {
			clk.Set(latest.Add(-back))
		}
		if others && rapid.IntRange(0, 3).Draw(rt, "other") == 0 {
			a, err1 := primary.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
			b, err2 := plain.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
			if err1 != nil || err2 != nil || (back == 0 && a != b) {
				rt.Fatalf("other instance: %+v %v, %+v %v", a, err1, b, err2)
			}
			continue
		}
		truth := shared.peek(key, p, clk.Now(), cost)
		local := c.Stats().Denied
		got, err := c.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
		if err != nil {
			rt.Fatalf("step %d: %v", i, err)
		}
		if c.Stats().Denied > local && (others && (truth.Allowed || got.RetryAfter > truth.RetryAfter) || !others && got != truth) {
			rt.Fatalf("step %d: Take(%s, %v, %d) answered locally %+v, the primary would say %+v", i, key, p, cost, got, truth)
		}
		if back > 0 {
			continue
		}
		want, err := plain.Take(ctx, store.Request{Key: key, Policy: p, Cost: cost})
		if err != nil || got.Allowed != want.Allowed || (!others && got != want) {
			rt.Fatalf("step %d: Take(%s, %v, %d) cached %+v, plain %+v %v", i, key, p, cost, got, want, err)
		}
	}
}

// genPolicy draws policies with Refill 1 and above (3 per second: the
// bound is not pinned to the microsecond) and small capacities.
func genPolicy(t *rapid.T, label string) algo.Policy {
	tokens := rapid.Int64Range(1, 7).Draw(t, label+" tokens")
	period := time.Duration(rapid.SampledFrom([]int64{1, 7, 1000, 1_000_000}).Draw(t, label+" period µs")) * time.Microsecond
	p := algo.Per(tokens, period).Burst(rapid.Int64Range(1, 12).Draw(t, label+" capacity"))
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDenyCacheClockMargin: a second instance whose clock runs 100ms ahead
// moves the bucket's stamp forward (a peek refills it in its own time), so
// the bucket holds a token 100ms before our clock says it can. Without a
// margin the cache denies what the primary admits; with a margin of at
// least the skew it does not.
func TestDenyCacheClockMargin(t *testing.T) {
	p := algo.PerSecond(2).Burst(1)
	tests := []struct {
		name      string
		margin    time.Duration
		wantAllow bool
	}{
		{"no margin: false denial", -1, false},
		{"margin below skew: false denial", 50 * time.Millisecond, false},
		{"margin covers skew", 100 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ours := storetest.NewClock()
			ahead := &offsetClock{ours, 100 * time.Millisecond}
			shared := &sharedBucket{}
			c := newCache(t, shared.view(ours), hybrid.DenyCacheConfig{Clock: ours, ClockMargin: tc.margin})
			if res, _ := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); !res.Allowed {
				t.Fatal("first take denied")
			}
			ours.Add(400 * time.Millisecond)
			if _, err := shared.view(ahead).Take(ctx, store.Request{Key: "k", Policy: p, Cost: 0}); err != nil { // at 500ms in its time
				t.Fatal(err)
			}
			ours.Add(20 * time.Millisecond)
			res, err := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != tc.wantAllow {
				t.Fatalf("at 420ms: %+v, want Allowed %v", res, tc.wantAllow)
			}
		})
	}
}

// TestDenyCacheBadInput: inputs a store refuses reach the primary even for
// a key whose bucket the cache knows to be empty.
func TestDenyCacheBadInput(t *testing.T) {
	clk := storetest.NewClock()
	c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk})
	p := algo.PerSecond(1).Burst(2)
	for range 3 {
		if _, err := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		key  string
		p    algo.Policy
		cost int64
		want error
	}{
		{"empty key", "", p, 1, store.ErrEmptyKey},
		{"negative cost", "k", p, -1, algo.ErrInvalidCost},
		{"cost above capacity", "k", p, 3, algo.ErrCostExceedsCapacity},
		{"zero policy", "k", algo.Policy{}, 1, algo.ErrInvalidPolicy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Take(ctx, store.Request{Key: tc.key, Policy: tc.p, Cost: tc.cost}); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Take(cancelled, store.Request{Key: "k", Policy: p, Cost: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	if _, err := hybrid.NewDenyCache(nil, hybrid.DenyCacheConfig{}); !errors.Is(err, hybrid.ErrInvalidConfig) {
		t.Fatalf("nil primary: %v", err)
	}
	if _, err := hybrid.NewDenyCache(c, hybrid.DenyCacheConfig{Size: -1}); !errors.Is(err, hybrid.ErrInvalidConfig) {
		t.Fatalf("negative size: %v", err)
	}
}

// TestDenyCacheBounded: many drained keys never hold more entries than
// Size, and evictions change no answer.
func TestDenyCacheBounded(t *testing.T) {
	clk := storetest.NewClock()
	c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1, Size: 16, Shards: 4})
	plain := newMem(t, clk)
	p := algo.PerMinute(1).Burst(1)
	for i := range 2000 {
		key := fmt.Sprint("k", i%100)
		got, _ := c.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1})
		want, _ := plain.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1})
		if got != want {
			t.Fatalf("%s: %+v, plain %+v", key, got, want)
		}
		clk.Add(time.Millisecond)
	}
	st := c.Stats()
	if st.Entries > 16 || st.Evictions == 0 {
		t.Fatalf("stats %+v: want at most 16 entries and some evictions", st)
	}
}

// drained returns a cache over a memstore whose key "k" is empty under p
// (one token an hour), after one local denial.
func drained(t *testing.T) (*hybrid.DenyCache, algo.Policy) {
	t.Helper()
	clk := storetest.NewClock()
	c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk})
	p := algo.PerHour(1).Burst(1)
	c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
	if res, _ := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); res.Allowed || c.Stats().Denied != 1 {
		t.Fatalf("second take %+v, stats %+v: want a local denial", res, c.Stats())
	}
	return c, p
}

// TestDenyCacheForget: after a key is reset in the primary, Forget makes
// the cache follow.
func TestDenyCacheForget(t *testing.T) {
	c, p := drained(t)
	c.Forget("k")
	if st := c.Stats(); st.Entries != 0 {
		t.Fatalf("after Forget: %+v", st)
	}
	if res, _ := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); res.Allowed || c.Stats().Calls != 2 {
		t.Fatalf("after Forget: %+v, %+v: want the primary asked", res, c.Stats())
	}
}

// TestDenyCacheHitAllocs: a local denial allocates nothing.
func TestDenyCacheHitAllocs(t *testing.T) {
	c, p := drained(t)
	if n := testing.AllocsPerRun(100, func() { c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}) }); n != 0 {
		t.Fatalf("%v allocations per local denial", n)
	}
}

// BenchmarkDenyCacheAbusive replays the abusive client (one request per
// 3333µs of virtual time) and reports primary calls per request.
func BenchmarkDenyCacheAbusive(b *testing.B) {
	p := algo.PerSecond(2).Burst(100)
	for _, name := range []string{"plain", "denycache"} {
		b.Run(name, func(b *testing.B) {
			clk := storetest.NewClock()
			var calls countingStore
			calls.Store = newMem(b, clk)
			var s store.Store = &calls
			if name == "denycache" {
				s = newCache(b, &calls, hybrid.DenyCacheConfig{Clock: clk})
			}
			b.ReportAllocs()
			for b.Loop() {
				s.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1})
				clk.Add(3333 * time.Microsecond)
			}
			b.ReportMetric(float64(calls.n)/float64(b.N), "calls/op")
		})
	}
}

// countingStore counts the calls that reach a store.
type countingStore struct {
	store.Store
	n int64
}

func (c *countingStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	c.n++
	return c.Store.Take(ctx, req)
}

// TestDenyCacheMulti: the abusive client against two limits at once (burst
// 100 at 2 per second, and 1,000 a day) through TakeMulti gets the plain
// store's answer to every request, with the local denials saving the calls.
func TestDenyCacheMulti(t *testing.T) {
	clk := storetest.NewClock()
	c := newCache(t, newMem(t, clk), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
	plain := newMem(t, clk)
	reqs := []store.Request{
		{Key: "{u}:burst", Policy: algo.PerSecond(2).Burst(100), Cost: 1},
		{Key: "{u}:daily", Policy: algo.PerDay(1000).Burst(1000), Cost: 1},
	}
	n, admitted := 0, 0
	for ; n < 18_000; n++ { // a minute at 18,000 a minute
		got, err1 := c.TakeMulti(ctx, reqs)
		want, err2 := plain.TakeMulti(ctx, reqs)
		if err1 != nil || err2 != nil || got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter ||
			fmt.Sprint(got.Results) != fmt.Sprint(want.Results) {
			t.Fatalf("request %d: cached %+v %v, plain %+v %v", n, got, err1, want, err2)
		}
		if got.Allowed {
			admitted++
		}
		clk.Add(3333 * time.Microsecond)
	}
	if st := c.Stats(); st.Calls > int64(admitted)+1 {
		t.Fatalf("%d calls for %d admissions of %d requests", st.Calls, admitted, n)
	}
}

// BenchmarkDenyCacheLocalDeny measures a local denial on the system clock,
// from many goroutines on distinct drained keys.
func BenchmarkDenyCacheLocalDeny(b *testing.B) {
	c := newCache(b, newMem(b, nil), hybrid.DenyCacheConfig{})
	p := algo.PerHour(1).Burst(1)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		c.Take(ctx, store.Request{Key: keys[i], Policy: p, Cost: 1})
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if res, _ := c.Take(ctx, store.Request{Key: keys[i%len(keys)], Policy: p, Cost: 1}); res.Allowed {
				b.Fatal("admitted")
			}
		}
	})
}
