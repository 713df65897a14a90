package hybrid_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

func newLeases(t testing.TB, primary store.Store, cfg hybrid.LeasesConfig) *hybrid.Leases {
	t.Helper()
	l, err := hybrid.NewLeases(primary, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLeasesConfig: a configuration that cannot be honoured is refused,
// naming the field.
func TestLeasesConfig(t *testing.T) {
	ms := newMem(t, storetest.NewClock())
	for _, tc := range []struct {
		primary store.Store
		cfg     hybrid.LeasesConfig
		field   string
	}{
		{nil, hybrid.LeasesConfig{Instances: 1}, "primary"},
		{ms, hybrid.LeasesConfig{}, "Instances"},
		{ms, hybrid.LeasesConfig{Instances: 1, Lifetime: -1}, "Lifetime"},
		{ms, hybrid.LeasesConfig{Instances: 1, MinBatch: -1}, "MinBatch"},
		{ms, hybrid.LeasesConfig{Instances: 1, Keys: -1}, "Keys"},
	} {
		_, err := hybrid.NewLeases(tc.primary, tc.cfg)
		if !errors.Is(err, hybrid.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewLeases(%+v) = %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// TestLeasesOffConformance: with a threshold no key reaches, Leases is the
// primary, and passes the conformance suite as it does.
func TestLeasesOffConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		return newLeases(t, newMem(t, clk), hybrid.LeasesConfig{Instances: 1, MinBatch: math.MaxInt64, Clock: clk})
	})
}

// admission is one admitted request, at the shared bucket's time.
type admission struct {
	at   int64 // µs
	cost int64
}

// overBound returns a description of the first closed interval in which
// adm (in time order) admitted more than bound(d) allows, or "".
func overBound(adm []admission, bound func(d time.Duration) int64) string {
	type group struct{ at, sum int64 }
	var gs []group
	for _, a := range adm {
		if n := len(gs); n > 0 && gs[n-1].at == a.at {
			gs[n-1].sum += a.cost
			continue
		}
		gs = append(gs, group{a.at, a.cost})
	}
	for i := range gs {
		var sum int64
		for j := i; j < len(gs); j++ {
			sum += gs[j].sum
			d := time.Duration(gs[j].at-gs[i].at) * time.Microsecond
			if b := bound(d); sum > b {
				return fmt.Sprintf("%d admitted in [%d, %d] µs (length %v), bound %d", sum, gs[i].at, gs[j].at, d, b)
			}
		}
	}
	return ""
}

// fleet is n instances, each a Leases on a clock of its own (the shared
// clock shifted), in front of a store on the shared clock: one memstore
// for all, or a client each of one Redis. The bucket's time is the shared
// clock's, at which admissions are recorded, so the bound's check is
// exact.
type fleet struct {
	clk    *storetest.Clock
	p      algo.Policy
	cfg    hybrid.LeasesConfig
	ls     []*hybrid.Leases
	adm    []admission
	per    []int64 // admissions per instance
	stores []store.Store
	plant  bool // every instance spends batches it does not pay for
}

// fataler is what the fleet needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// newFleet returns a fleet over one memstore; close it when done.
func newFleet(t fataler, p algo.Policy, cfg hybrid.LeasesConfig, offsets []time.Duration, plant bool) *fleet {
	t.Helper()
	clk := storetest.NewClock()
	ms, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	stores := make([]store.Store, len(offsets))
	for i := range stores {
		stores[i] = ms
	}
	return newFleetOn(t, clk, stores, p, cfg, offsets, plant)
}

// newFleetOn returns a fleet whose instance i uses stores[i], on clk.
func newFleetOn(t fataler, clk *storetest.Clock, stores []store.Store, p algo.Policy, cfg hybrid.LeasesConfig, offsets []time.Duration, plant bool) *fleet {
	t.Helper()
	f := &fleet{clk: clk, p: p, cfg: cfg, per: make([]int64, len(offsets)), stores: stores, ls: make([]*hybrid.Leases, len(offsets)), plant: plant}
	for i, off := range offsets {
		f.replace(t, i, off)
	}
	return f
}

// replace puts a new instance with clock offset off in place i: the one
// there dies holding its batch.
func (f *fleet) replace(t fataler, i int, off time.Duration) {
	c := f.cfg
	c.Clock, c.SweepEvery = &offsetClock{c: f.clk, off: off}, -1
	primary := f.stores[i]
	if f.plant {
		primary = freeBatches{primary}
	}
	l, err := hybrid.NewLeases(primary, c)
	if err != nil {
		t.Fatal(err)
	}
	f.ls[i] = l
}

// freeBatches is a primary that gives each batch back as soon as it is
// granted, while the Leases in front of it spends the batch all the same:
// the planted over-admission (a batch not charged) that the bound's tests
// must catch.
type freeBatches struct{ store.Store }

func (f freeBatches) TakeAtMost(ctx context.Context, r store.Request) (int64, algo.Result, error) {
	g, res, err := f.Store.TakeAtMost(ctx, r)
	if err == nil && g > 0 {
		f.Store.Refund(ctx, store.Request{Key: r.Key, Policy: r.Policy, Cost: g})
	}
	return g, res, err
}

// close closes the stores (the instances start no goroutine).
func (f *fleet) close() {
	for _, s := range f.stores {
		s.Close()
	}
}

// overBound reports the first interval over the fleet's bound, or "".
func (f *fleet) overBound() string {
	return overBound(f.adm, func(d time.Duration) int64 { return f.p.BatchBound(d, f.cfg.Lifetime, len(f.ls)) })
}

// scenario drives f for steps steps, drawn from seed: bursts, trickles,
// sweeps and deaths on random instances, the clock advancing by up to L
// between steps.
func (f *fleet) scenario(t fataler, seed uint64, steps int) {
	rnd := rand.New(rand.NewPCG(seed, 1))
	for range steps {
		i := rnd.IntN(len(f.ls))
		switch a := rnd.IntN(20); {
		case a < 4:
			f.ls[i].Sweep(context.Background())
		case a < 5:
			f.replace(t, i, time.Duration(rnd.IntN(2000)-1000)*time.Millisecond)
		case a < 9:
			f.take(t, i, 1)
		default:
			for range 1 + rnd.IntN(60) {
				f.take(t, i, 1+rnd.Int64N(3))
			}
		}
		f.clk.Add(time.Duration(rnd.Int64N(f.cfg.Lifetime.Microseconds()+1)) * time.Microsecond)
	}
}

// testFleet is newFleet for a test, closed at cleanup.
func testFleet(t *testing.T, p algo.Policy, cfg hybrid.LeasesConfig, offsets []time.Duration) *fleet {
	f := newFleet(t, p, cfg, offsets, false)
	t.Cleanup(f.close)
	return f
}

// take makes instance i take cost, recording an admission.
func (f *fleet) take(t fataler, i int, cost int64) bool {
	res, err := f.ls[i].Take(context.Background(), store.Request{Key: "k", Policy: f.p, Cost: cost})
	if err != nil {
		t.Fatalf("instance %d: %v", i, err)
	}
	if res.Allowed {
		f.adm = append(f.adm, admission{f.clk.Now().UnixMicro(), cost})
		f.per[i] += cost
	}
	return res.Allowed
}

// leaseRun is the bound's property: 2 to 8 instances with clocks of their
// own take from one bucket in random bursts, sweep, die and are replaced,
// and every closed interval's admissions stay within
// algo.Policy.BatchBound. plant makes every instance spend batches it does not pay for.
func leaseRun(t *rapid.T, plant bool) {
	n := rapid.IntRange(2, 8).Draw(t, "instances")
	p := algo.Per(rapid.Int64Range(200, 5000).Draw(t, "rate"), time.Second).Burst(rapid.Int64Range(20, 200).Draw(t, "capacity"))
	cfg := hybrid.LeasesConfig{
		Instances: n,
		Lifetime:  time.Duration(rapid.IntRange(20, 500).Draw(t, "lifetime ms")) * time.Millisecond,
		MinBatch:  rapid.Int64Range(1, 4).Draw(t, "min batch"),
	}
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration(rapid.IntRange(-1000, 1000).Draw(t, "offset ms")) * time.Millisecond
	}
	f := newFleet(t, p, cfg, offsets, plant)
	defer f.close()
	for range rapid.IntRange(5, 60).Draw(t, "steps") {
		i := rapid.IntRange(0, n-1).Draw(t, "instance")
		switch rapid.IntRange(0, 9).Draw(t, "action") {
		case 0, 1:
			f.ls[i].Sweep(context.Background())
		case 2:
			f.replace(t, i, offsets[i]) // the old one dies holding its batch
		case 3, 4:
			f.take(t, i, 1) // a trickle: demand falls
		default:
			for range rapid.IntRange(1, 100).Draw(t, "burst") {
				f.take(t, i, rapid.Int64Range(1, 3).Draw(t, "cost"))
			}
		}
		f.clk.Add(time.Duration(rapid.Int64Range(0, cfg.Lifetime.Microseconds()).Draw(t, "advance µs")) * time.Microsecond)
	}
	if s := f.overBound(); s != "" {
		t.Fatalf("%v, %d instances, L %v: %s", p, n, cfg.Lifetime, s)
	}
	var local, returned bool
	for _, l := range f.ls {
		st := l.Stats()
		local, returned = local || st.Local > 0, returned || st.Returned > 0
	}
	if local {
		leasedRuns.Add(1)
	}
	if returned {
		returnedRuns.Add(1)
	}
}

// leasedRuns counts the runs of leaseRun in which an instance admitted
// from a batch and gave tokens back.
var leasedRuns, returnedRuns atomic.Int64

// TestLeasesBound: admissions at one key stay within BatchBound in every
// interval, over many instances with skewed clocks.
func TestLeasesBound(t *testing.T) {
	leasedRuns.Store(0)
	returnedRuns.Store(0)
	rapid.Check(t, func(rt *rapid.T) { leaseRun(rt, false) })
	// Over 100 checks, 57 to 77 runs admitted from a batch and 12 to 25
	// gave tokens back (30 runs; one elsewhere saw 9): floors far below
	// those, so that the check fails on a generator that stopped leasing,
	// not on a draw.
	if n, m := leasedRuns.Load(), returnedRuns.Load(); n < 25 || m < 3 {
		t.Errorf("%d runs admitted from a batch, %d gave tokens back: the property tests little", n, m)
	}
}

// failRecorder is a rapid.TB that records a failure instead of failing
// the test; FailNow ends the goroutine it is called on.
type failRecorder struct {
	*testing.T
	mu     sync.Mutex
	failed bool
	msg    string
}

func (r *failRecorder) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	if r.msg == "" {
		r.msg = msg
	}
}
func (r *failRecorder) Errorf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }
func (r *failRecorder) Error(args ...any)                 { r.fail(fmt.Sprint(args...)) }
func (r *failRecorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *failRecorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *failRecorder) FailNow()                          { r.fail(""); runtime.Goexit() }
func (r *failRecorder) Fail()                             { r.fail("") }
func (r *failRecorder) Failed() bool                      { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *failRecorder) Log(args ...any)                   {}
func (r *failRecorder) Logf(format string, args ...any)   {}

// TestLeasesBoundPlanted: the property finds the planted over-admission
// (a batch given back at once and spent all the same).
func TestLeasesBoundPlanted(t *testing.T) {
	for name, v := range map[string]string{"rapid.shrinktime": "1s", "rapid.nofailfile": "true"} {
		old := flag.Lookup(name).Value.String()
		flag.Set(name, v) // a short search, and no fail file in testdata
		defer flag.Set(name, old)
	}
	r := &failRecorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(r, func(rt *rapid.T) { leaseRun(rt, true) })
	}()
	<-done
	if !r.failed || !strings.Contains(r.msg, "admitted in") {
		t.Fatalf("the property found no counter-example to a fleet whose batches are not charged (%q)", r.msg)
	}
	t.Logf("counter-example: %s", r.msg)
}

// rotate makes every live instance ask 1 token every step from from to
// to, rotating which asks first.
func (f *fleet) rotate(t fataler, from, to, step time.Duration, live func(i int, at time.Duration) bool) {
	for at := from; at < to; at += step {
		for k := range len(f.ls) {
			i := (k + int(at/step)) % len(f.ls)
			if live(i, at) {
				f.take(t, i, 1)
			}
		}
		f.clk.Add(step)
	}
}

// fairShare fails t unless each of got is 1/len(got) of their sum, ±10%.
func fairShare(t *testing.T, what string, got []int64) {
	t.Helper()
	var total int64
	for _, g := range got {
		total += g
	}
	for i, g := range got {
		if d := float64(g)/float64(total) - 1/float64(len(got)); d < -0.1/3 || d > 0.1/3 {
			t.Errorf("%s: instance %d got %d of %d: share %.3f, want 1/%d ±10%%", what, i, g, total, float64(g)/float64(total), len(got))
		}
	}
}

// TestLeasesFair: 3 instances with equal demand on one key each get a
// third of the admissions (±10%) over 10 s, one that starts late reaches
// its share within 2·L, and one that dies holding a batch keeps its
// tokens from the others for at most L and never has them admitted twice.
func TestLeasesFair(t *testing.T) {
	p := algo.PerSecond(1000).Burst(100)
	cfg := hybrid.LeasesConfig{Instances: 3, Lifetime: 100 * time.Millisecond}
	// Each instance asks 1 token every ms, 3000/s against 1000/s.
	run := func(f *fleet, from, to time.Duration, live func(i int, at time.Duration) bool) {
		f.rotate(t, from, to, time.Millisecond, live)
	}
	share := func(what string, got []int64) { t.Helper(); fairShare(t, what, got) }
	t.Run("equal", func(t *testing.T) {
		f := testFleet(t, p, cfg, []time.Duration{0, 3 * time.Millisecond, -7 * time.Millisecond})
		run(f, 0, 10*time.Second, func(int, time.Duration) bool { return true })
		share("10 s", f.per)
		t.Logf("admitted %v; bound %d", f.per, p.BatchBound(10*time.Second, cfg.Lifetime, 3))
		if s := overBound(f.adm, func(d time.Duration) int64 { return p.BatchBound(d, cfg.Lifetime, 3) }); s != "" {
			t.Fatal(s)
		}
	})
	t.Run("late", func(t *testing.T) {
		f := testFleet(t, p, cfg, []time.Duration{0, 0, 0})
		start := 5 * time.Second
		run(f, 0, start, func(i int, _ time.Duration) bool { return i != 2 })
		late := 2 * cfg.Lifetime
		before := append([]int64(nil), f.per...)
		run(f, start, start+late, func(int, time.Duration) bool { return true })
		first := f.per[2] - before[2]
		// From 2·L on, each Lifetime's admissions are shared fairly.
		var windows [][]int64
		for w := start + late; w < start+late+time.Second; w += cfg.Lifetime {
			mark := append([]int64(nil), f.per...)
			run(f, w, w+cfg.Lifetime, func(int, time.Duration) bool { return true })
			got := make([]int64, 3)
			for i := range got {
				got[i] = f.per[i] - mark[i]
			}
			share(fmt.Sprintf("the L from %v", w), got)
			windows = append(windows, got)
		}
		t.Logf("late starter: %d in its first 2·L, then per L %v", first, windows)
	})
	t.Run("dead", func(t *testing.T) {
		f := testFleet(t, p, cfg, []time.Duration{0, 0, 0})
		// 250/s each, below the rate: every instance holds a batch.
		for at := time.Duration(0); at < time.Second; at += 4 * time.Millisecond {
			for i := range 3 {
				f.take(t, i, 1)
			}
			f.clk.Add(4 * time.Millisecond)
		}
		held := f.ls[2].Stats().Held
		if held == 0 {
			t.Fatal("instance 2 holds no batch to die with")
		}
		death := f.clk.Now()
		before := f.per[2]
		run(f, time.Second, 2*time.Second, func(i int, _ time.Duration) bool { return i != 2 })
		if f.per[2] != before {
			t.Fatalf("the dead instance admitted %d", f.per[2]-before)
		}
		// From L after the death the survivors get the full rate: the
		// lost batch is refilled by then.
		var after int64
		from := death.Add(cfg.Lifetime).UnixMicro()
		for _, a := range f.adm {
			if a.at >= from {
				after += a.cost
			}
		}
		end := f.ls[0].Stats().Held + f.ls[1].Stats().Held
		if want := p.Bound(time.Second-cfg.Lifetime) - p.Capacity() - end; after < want {
			t.Errorf("survivors admitted %d in the %v from L after the death, want at least %d", after, time.Second-cfg.Lifetime, want)
		}
		// Never twice: over the whole run, the fleet admits at most one
		// bucket's bound less the batch the dead instance took with it.
		var total int64
		for _, a := range f.adm {
			total += a.cost
		}
		if b := p.Bound(2 * time.Second); total > b-held {
			t.Errorf("admitted %d, more than one bucket's %d less the lost batch %d", total, b, held)
		}
		t.Logf("lost batch %d; survivors %d in the last %v; total %d", held, after, time.Second-cfg.Lifetime, total)
	})
}

// TestLeasesLocalAllocs: admitting from a batch allocates nothing.
func TestLeasesLocalAllocs(t *testing.T) {
	clk := storetest.NewClock()
	l := newLeases(t, newMem(t, clk), hybrid.LeasesConfig{Instances: 1, Lifetime: time.Hour, Clock: clk, SweepEvery: -1})
	r := store.Request{Key: "hot", Policy: algo.PerSecond(1e6).Burst(1e9), Cost: 1}
	for range 10 {
		l.Take(ctx, r) // the demand, then the batch
	}
	if n := testing.AllocsPerRun(1000, func() { l.Take(ctx, r) }); n != 0 {
		t.Errorf("a local admission allocates %v times", n)
	}
	if st := l.Stats(); st.Local < 1000 {
		t.Fatalf("only %d admitted from the batch", st.Local)
	}
}

// BenchmarkLeases compares a hot key's Take through Leases (admitted from
// the batch) with the memstore's own.
func BenchmarkLeases(b *testing.B) {
	clk := storetest.NewClock()
	ms := newMem(b, clk)
	l := newLeases(b, ms, hybrid.LeasesConfig{Instances: 1, Lifetime: time.Hour, Clock: clk, SweepEvery: -1})
	r := store.Request{Key: "hot", Policy: algo.PerSecond(1e6).Burst(1e9), Cost: 1}
	for name, s := range map[string]store.Store{"memstore": ms, "leases": l} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Take(ctx, r)
			}
		})
	}
}

// BenchmarkLeasesParallel is BenchmarkLeases on GOMAXPROCS goroutines
// (2 in bench/'s runs) over 1,000 leased keys, each goroutine going
// through them from its own start: the keys share the Leases' locks, which
// must not make a parallel load slower.
func BenchmarkLeasesParallel(b *testing.B) {
	clk := storetest.NewClock()
	l := newLeases(b, newMem(b, clk), hybrid.LeasesConfig{Instances: 1, Lifetime: time.Hour, Clock: clk, SweepEvery: -1})
	p := algo.PerSecond(1e6).Burst(1e9)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%d", i)
		for range 10 {
			l.Take(ctx, store.Request{Key: keys[i], Policy: p, Cost: 1}) // the demand, then the batch
		}
	}
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(499))
		for pb.Next() {
			i++
			l.Take(ctx, store.Request{Key: keys[i%len(keys)], Policy: p, Cost: 1})
		}
	})
	if st := l.Stats(); st.Local < int64(b.N) {
		b.Fatalf("only %d of %d admitted from the batches", st.Local, b.N)
	}
}

// TestLeasesClockJumps: a key's times are kept relative to a base that
// moves with the clock; a jump of an hour forward or back, or of 40 days
// (beyond what they keep exactly), ends the batch, which the key's next
// take gives back, and a key leased after the jump leases as before.
func TestLeasesClockJumps(t *testing.T) {
	p := algo.PerSecond(100).Burst(1000)
	for _, d := range []time.Duration{time.Hour, -time.Hour, 40 * 24 * time.Hour} {
		t.Run(d.String(), func(t *testing.T) {
			r := newLeaseRig(t)
			held := r.batch(t, "k", p)
			r.clk.Add(d)
			if res, err := r.l.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1}); err != nil || !res.Allowed {
				t.Fatalf("take after the jump: %+v, %v", res, err)
			}
			if st := r.l.Stats(); st.Returned != held {
				t.Fatalf("%+v after the jump: want the batch of %d given back", st, held)
			}
			r.batch(t, "k2", p)
		})
	}
}

// TestLeasesLongLifetime: with a Lifetime of a minute (times kept in ticks
// of 4 µs), a batch is spent without a call until its Lifetime ends, and
// given back at the first take after.
func TestLeasesLongLifetime(t *testing.T) {
	clk := storetest.NewClock()
	l := newLeases(t, newMem(t, clk), hybrid.LeasesConfig{Instances: 1, Lifetime: time.Minute, MinBatch: 2, Clock: clk, SweepEvery: -1})
	r := store.Request{Key: "k", Policy: algo.PerSecond(100).Burst(1000), Cost: 1}
	take := func() {
		t.Helper()
		if res, err := l.Take(ctx, r); err != nil || !res.Allowed {
			t.Fatalf("take: %+v, %v", res, err)
		}
	}
	for l.Stats().Held < 5 {
		clk.Add(time.Millisecond)
		take()
	}
	calls := l.Stats().Calls
	clk.Add(time.Minute - 10*time.Millisecond)
	take()
	if st := l.Stats(); st.Calls != calls || st.Returned != 0 {
		t.Fatalf("%+v within the Lifetime: want no call since %d", st, calls)
	}
	clk.Add(10 * time.Millisecond)
	take()
	if st := l.Stats(); st.Returned == 0 {
		t.Fatalf("%+v after the Lifetime: want the batch given back", st)
	}
}

// TestLeasesKeyLengths: the empty key (which memstore refuses) and a key
// longer than 32,767 bytes are passed through unleased; a key of 32,767
// bytes is leased.
func TestLeasesKeyLengths(t *testing.T) {
	p := algo.PerSecond(100).Burst(1000)
	for _, n := range []int{0, 1<<15 - 1, 1 << 15} {
		r := &leaseRig{clk: storetest.NewClock()}
		ms, err := memstore.New(memstore.Config{Clock: r.clk, MaxKeyLen: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
		r.l = newLeases(t, ms, hybrid.LeasesConfig{Instances: 1, MinBatch: 2, Clock: r.clk, SweepEvery: -1})
		key := strings.Repeat("k", n)
		for range 20 {
			r.clk.Add(time.Millisecond)
			if res, err := r.l.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1}); n > 0 && (err != nil || !res.Allowed) {
				t.Fatalf("%d bytes: %+v, %v", n, res, err)
			}
		}
		if st, leased := r.l.Stats(), n == 1<<15-1; (st.Local > 0) != leased || (st.Entries == 1) != leased {
			t.Errorf("%d bytes: %+v, want leased %v", n, st, leased)
		}
	}
}

// TestLeasesCompact: once a sweep forgets 9,000 idle keys, the shards
// give back the chunks that held them, keeping those of the keys still
// measured, which stay leased from their batches; keys measured afterwards
// lease as before.
func TestLeasesCompact(t *testing.T) {
	r := newLeaseRig(t)
	p := algo.PerSecond(100).Burst(1000)
	take := func(key string) {
		t.Helper()
		if res, err := r.l.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1}); err != nil || !res.Allowed {
			t.Fatalf("take %s: %+v, %v", key, res, err)
		}
	}
	for i := range 9_000 {
		take(fmt.Sprint("idle:", i))
	}
	full := hybrid.LeaseChunks(r.l)
	r.clk.Add(time.Hour)
	for range 5 { // 3 keys that hold a batch (of 2) through the sweep
		for k := range 3 {
			take(fmt.Sprint("hot:", k))
		}
	}
	held := r.l.Stats().Held
	r.l.Sweep(ctx)
	st := r.l.Stats()
	if st.Entries != 3 || st.Held != held || held != 6 {
		t.Fatalf("%+v after the sweep: want the 3 hot keys, holding %d (6)", st, held)
	}
	if n := hybrid.LeaseChunks(r.l); n > 3 || full < 9_000/8 {
		t.Errorf("%d chunks after the sweep, %d before: want at most one per hot key", n, full)
	}
	for k := range 3 {
		take(fmt.Sprint("hot:", k))
	}
	if st2 := r.l.Stats(); st2.Local != st.Local+3 || st2.Held != held-3 || st2.Batches != st.Batches {
		t.Errorf("%+v after the sweep: want the hot keys' batches spent from", st2)
	}
	r.batch(t, "new", p)
}

// leaseRig is one instance's Leases over a memstore on one clock.
type leaseRig struct {
	clk *storetest.Clock
	ms  store.Store
	l   *hybrid.Leases
}

func newLeaseRig(t *testing.T) *leaseRig {
	r := &leaseRig{clk: storetest.NewClock()}
	r.ms = newMem(t, r.clk)
	r.l = newLeases(t, r.ms, hybrid.LeasesConfig{Instances: 1, MinBatch: 2, Clock: r.clk, SweepEvery: -1})
	return r
}

// batch makes demand for key under p until a batch is held, and returns
// what is held.
func (r *leaseRig) batch(t *testing.T, key string, p algo.Policy) int64 {
	t.Helper()
	for range 100 {
		if h := r.l.Stats().Held; h >= 5 {
			return h
		}
		r.clk.Add(time.Millisecond)
		if res, err := r.l.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1}); err != nil || !res.Allowed {
			t.Fatalf("take: %+v, %v", res, err)
		}
	}
	t.Fatalf("no batch: %+v", r.l.Stats())
	return 0
}

// remaining peeks key's bucket in the primary.
func (r *leaseRig) remaining(t *testing.T, key string, p algo.Policy) int64 {
	t.Helper()
	res, err := r.ms.Take(ctx, store.Request{Key: key, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

// TestLeasesGiveBack: a policy change gives the batch back under the old
// policy before the new one is taken from; a Reserve gives it back before
// the reservation, so it waits only for tokens nobody holds; a sweep
// after the Lifetime gives it back and, once the demand is gone, forgets
// the key; Close gives back what is left.
func TestLeasesGiveBack(t *testing.T) {
	old := algo.PerSecond(100).Burst(1000) // rate·L = 10 at L = 100ms
	t.Run("policy change", func(t *testing.T) {
		r := newLeaseRig(t)
		held := r.batch(t, "k", old)
		before := r.remaining(t, "k", old)
		next := algo.PerSecond(200).Burst(1000)
		if res, err := r.l.Take(ctx, store.Request{Key: "k", Policy: next, Cost: 1}); err != nil || !res.Allowed {
			t.Fatalf("under the new policy: %+v, %v", res, err)
		}
		st := r.l.Stats()
		if st.Returned != held {
			t.Fatalf("%+v: want the batch of %d given back", st, held)
		}
		// The bucket got the batch back (under the old policy, then
		// converted keeping its tokens), less the new policy's batch.
		if got, want := r.remaining(t, "k", next), before+held-1-st.Held; got != want {
			t.Errorf("remaining %d after the change, want %d", got, want)
		}
	})
	t.Run("reserve", func(t *testing.T) {
		r := newLeaseRig(t)
		held := r.batch(t, "k", old)
		before := r.remaining(t, "k", old)
		rsv, err := r.l.Reserve(ctx, store.Request{Key: "k", Policy: old, Cost: before + held}, 0)
		if err != nil || !rsv.Allowed || rsv.Delay != 0 {
			t.Fatalf("Reserve of the bucket's and the batch's tokens: %+v, %v; want admitted at once", rsv, err)
		}
		if st := r.l.Stats(); st.Held != 0 || st.Returned != held {
			t.Fatalf("%+v: want the batch given back", st)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		r := newLeaseRig(t)
		held := r.batch(t, "k", old)
		if n := r.l.Sweep(ctx); n != 0 {
			t.Fatalf("Sweep gave back %d of a live batch", n)
		}
		r.clk.Add(hybrid.DefaultLifetime)
		if n := r.l.Sweep(ctx); n != held {
			t.Fatalf("Sweep after the Lifetime gave back %d, want %d", n, held)
		}
		for range 20 { // ten windows without demand
			r.clk.Add(hybrid.DefaultLifetime)
			r.l.Sweep(ctx)
		}
		if st := r.l.Stats(); st.Entries != 0 {
			t.Fatalf("%+v: want the idle key forgotten", st)
		}
	})
	t.Run("close", func(t *testing.T) {
		r := newLeaseRig(t)
		held := r.batch(t, "k", old)
		before := r.remaining(t, "k", old)
		r.l.Close()
		if got := r.remaining(t, "k", old); got != before+held {
			t.Fatalf("remaining %d after Close, want %d", got, before+held)
		}
		if _, err := r.l.Take(ctx, store.Request{Key: "k", Policy: old, Cost: 1}); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("Take after Close: %v", err)
		}
	})
}

// TestLeasesCosts: a cost is taken from the batch whole or not at all (the
// batch is topped up, within the cap, when it holds less); a cost above
// the cap is the primary's Take; a short grant pauses the key, whose
// requests are then denied without a call until the pause ends; an empty
// bucket denies with at least the primary's RetryAfter for what the batch
// lacks.
func TestLeasesCosts(t *testing.T) {
	p := algo.PerSecond(100).Burst(30) // cap: min(30, 10) = 10 at L = 100ms
	r := newLeaseRig(t)
	take := func(cost int64) algo.Result {
		t.Helper()
		res, err := r.l.Take(ctx, store.Request{Key: "k", Policy: p, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for range 4 { // demand: a batch
		take(1)
	}
	held := r.l.Stats().Held
	if held == 0 || held >= 9 {
		t.Fatalf("held %d, want a batch below the cap", held)
	}
	if res := take(held + 1); !res.Allowed || r.l.Stats().Held > 10-held-1 {
		t.Fatalf("a cost of %d over a batch of %d: %+v, %+v; want topped up within the cap", held+1, held, res, r.l.Stats())
	}
	calls := r.l.Stats().Calls
	before := r.remaining(t, "k", p)
	if res := take(11); !res.Allowed || r.remaining(t, "k", p) != before-11 || r.l.Stats().Calls != calls+1 {
		t.Fatalf("a cost above the cap: %+v; want the primary's Take of 11", res)
	}
	for take(1).Allowed { // drain the bucket and the batch
	}
	// The drain ended on a short grant: the key is paused (pauseFor),
	// and a denial says so.
	calls = r.l.Stats().Calls
	if res := take(1); res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > 50*time.Millisecond || r.l.Stats().Calls != calls {
		t.Fatalf("in the pause: %+v, %d calls; want a local denial for at most L/2", res, r.l.Stats().Calls-calls)
	}
	r.clk.Add(50 * time.Millisecond) // past any pause: 5 tokens refilled
	for take(1).Allowed {
	}
	r.clk.Add(50 * time.Millisecond)
	for take(1).Allowed {
	}
	want, _ := r.ms.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
	if res := take(3); res.Allowed || res.RetryAfter < want.RetryAfter+20*time.Millisecond {
		t.Fatalf("3 on an empty bucket: %+v; want at least the primary's RetryAfter for 3 tokens, %v", res, want.RetryAfter+20*time.Millisecond)
	}
}

// TestLeasesConcurrent: two instances, eight goroutines each, with sweeps
// and stats alongside, on a frozen clock: no refill, so the fleet admits
// at most the bucket's capacity, and after Close the bucket holds exactly
// what was not admitted: no token lost or spent twice.
func TestLeasesConcurrent(t *testing.T) {
	clk := storetest.NewClock()
	ms := newMem(t, clk)
	p := algo.PerSecond(10_000).Burst(5_000) // cap: min(5000, 1000)/2 = 500
	var ls [2]*hybrid.Leases
	for i := range ls {
		ls[i] = newLeases(t, ms, hybrid.LeasesConfig{Instances: 2, Clock: clk, SweepEvery: -1})
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 500 {
				res, err := ls[g%2].Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1 + int64(g%3)})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1 + int64(g%3))
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			ls[0].Sweep(ctx)
			ls[1].Stats()
		}
	})
	wg.Wait()
	for _, l := range ls {
		l.Close()
	}
	res, err := ms.Take(ctx, store.Request{Key: "k", Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if n := admitted.Load(); n > p.Capacity() || res.Remaining != p.Capacity()-n {
		t.Fatalf("admitted %d of %d; the bucket holds %d after Close, want %d", n, p.Capacity(), res.Remaining, p.Capacity()-n)
	}
}

// TestLeasesUnderDenyCache: a DenyCache in front of Leases learns only
// from the primary's own answers, never from an admission out of a batch
// (whose Remaining is the batch's): it never denies while the bucket has
// tokens.
func TestLeasesUnderDenyCache(t *testing.T) {
	clk := storetest.NewClock()
	l := newLeases(t, newMem(t, clk), hybrid.LeasesConfig{Instances: 1, MinBatch: 2, Clock: clk, SweepEvery: -1})
	c := newCache(t, l, hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
	p := algo.PerSecond(100).Burst(1000) // batches of at most 10, 1000 in the bucket
	for i := range 500 {
		res, err := c.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
		if err != nil || !res.Allowed {
			t.Fatalf("take %d: %+v, %v; cache %+v", i, res, err, c.Stats())
		}
	}
	if st, ls := c.Stats(), l.Stats(); st.Denied != 0 || ls.Local < 400 {
		t.Fatalf("cache %+v, leases %+v: want no local denial, most admitted from batches", st, ls)
	}
}

// gate is a primary whose Take returns only once n Takes are in flight
// at once, or fails when its context ends.
type gate struct {
	store.Store
	n   int64
	in  atomic.Int64
	all chan struct{}
}

func (g *gate) Take(ctx context.Context, r store.Request) (algo.Result, error) {
	if g.in.Add(1) == g.n {
		close(g.all)
	}
	select {
	case <-g.all:
		return g.Store.Take(ctx, r)
	case <-ctx.Done():
		return algo.Result{}, fmt.Errorf("%d of %d Takes in flight at once: %w", g.in.Load(), g.n, ctx.Err())
	}
}

// TestLeasesDirectConcurrent: the Takes of a key that is not leased (its
// cap, 0 at 2/s, is below MinBatch) reach the primary concurrently, not
// one at a time under the key's lock: each of 8 callers' Take returns
// only once all 8 are in flight.
func TestLeasesDirectConcurrent(t *testing.T) {
	clk := storetest.NewClock()
	g := &gate{Store: newMem(t, clk), n: 8, all: make(chan struct{})}
	l := newLeases(t, g, hybrid.LeasesConfig{Instances: 1, Clock: clk, SweepEvery: -1})
	p := algo.PerSecond(2).Burst(100)
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range g.n {
		wg.Go(func() {
			if _, err := l.Take(gctx, store.Request{Key: "hot", Policy: p, Cost: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := l.Stats(); st.Calls != g.n || st.Local != 0 {
		t.Fatalf("%+v: want %d direct calls", st, g.n)
	}
}

// topHook is a primary whose TakeAtMost calls hook first, counting the
// calls in flight at once and the most seen.
type topHook struct {
	store.Store
	hook     func(r store.Request)
	in, most atomic.Int64
}

func (p *topHook) TakeAtMost(ctx context.Context, r store.Request) (int64, algo.Result, error) {
	n := p.in.Add(1)
	defer p.in.Add(-1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	if p.hook != nil {
		p.hook(r)
	}
	return p.Store.TakeAtMost(ctx, r)
}

// TestLeasesTopUpSerialized: 8 callers on one leased key whose batch runs
// dry every few takes make one TakeAtMost at a time, though each yields
// the processor while in flight: the key's takes wait for its top-up.
func TestLeasesTopUpSerialized(t *testing.T) {
	clk := storetest.NewClock()
	prim := &topHook{Store: newMem(t, clk), hook: func(store.Request) {
		for range 20 {
			runtime.Gosched()
		}
	}}
	l := newLeases(t, prim, hybrid.LeasesConfig{Instances: 1, MinBatch: 2, Clock: clk, SweepEvery: -1})
	p := algo.PerSecond(100).Burst(1_000_000) // a cap of 10: many top-ups
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if _, err := l.Take(ctx, store.Request{Key: "hot", Policy: p, Cost: 1}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if st := l.Stats(); st.Batches < 10 || prim.most.Load() != 1 {
		t.Fatalf("%+v: %d TakeAtMost in flight at most, want 1 over 10 batches or more", st, prim.most.Load())
	}
}

// TestLeasesTopUpUnlocked: while a key's TakeAtMost is in flight, Takes
// of 1,000 other keys (some in its shard, but for a chance of 1 in 10^6)
// complete: no lock is held over a primary call.
func TestLeasesTopUpUnlocked(t *testing.T) {
	clk := storetest.NewClock()
	var l *hybrid.Leases
	prim := &topHook{Store: newMem(t, clk)}
	p := algo.PerSecond(100).Burst(1000)
	others := make(chan error, 1)
	prim.hook = func(r store.Request) {
		if r.Key != "a" || prim.hook == nil {
			return
		}
		prim.hook = nil // once
		go func() {
			for i := range 1000 {
				if _, err := l.Take(ctx, store.Request{Key: fmt.Sprint("other:", i), Policy: p, Cost: 1}); err != nil {
					others <- err
					return
				}
			}
			others <- nil
		}()
		select {
		case err := <-others:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(30 * time.Second): // a deadlock's timeout, not a timing
			t.Error("other keys' Takes still waiting after 30 s")
		}
	}
	l = newLeases(t, prim, hybrid.LeasesConfig{Instances: 1, MinBatch: 2, Clock: clk, SweepEvery: -1})
	for range 3 {
		if _, err := l.Take(ctx, store.Request{Key: "a", Policy: p, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Batches == 0 || st.Entries != 1001 {
		t.Fatalf("%+v: want a batch for a, and 1,001 keys", st)
	}
}

// TestLeasesSaturatedCalls: 3 instances over one memstore, each a closed
// loop asking far above the rate of a saturated key (issue 29), make at
// most 0.02 primary calls per admission and admit at least 95% of what the
// bucket can give, C + r·T over T, in virtual time. With the pause on a
// dry key turned off the same run must fail the calls check: every
// refused request then asks the primary again.
func TestLeasesSaturatedCalls(t *testing.T) {
	p := algo.PerSecond(50_000).Burst(5_000)
	cfg := hybrid.LeasesConfig{Instances: 3, Lifetime: 100 * time.Millisecond}
	// run asks for T. The unpaced run needs less than the paced one's 2 s
	// to show what it costs: 200 ms (two lifetimes) takes 0.4 s under
	// -race, not 9.5 s, and makes 7.6 calls per admitted (11.4 over 2 s).
	run := func(t *testing.T, nopause bool, T time.Duration) (perAdmitted float64, admitted, can int64) {
		f := testFleet(t, p, cfg, []time.Duration{0, 3 * time.Millisecond, -7 * time.Millisecond})
		if nopause {
			for _, l := range f.ls {
				hybrid.PlantNoPause(l)
			}
		}
		// 3 takes every 5 µs: 600,000/s against 50,000/s.
		f.rotate(t, 0, T, 5*time.Microsecond, func(int, time.Duration) bool { return true })
		var calls int64
		for i, l := range f.ls {
			calls += l.Stats().Calls
			admitted += f.per[i]
		}
		can = p.Capacity() + p.Bound(T) - p.Capacity() // C + r·T
		t.Logf("nopause %v: %d admitted of %d the bucket can give, %d calls: %.4f per admitted; per instance %v",
			nopause, admitted, can, calls, float64(calls)/float64(admitted), f.per)
		if !nopause {
			fairShare(t, "paced", f.per)
		}
		return float64(calls) / float64(admitted), admitted, can
	}
	check := func(perAdmitted float64, admitted, can int64) string {
		switch {
		case perAdmitted > 0.02:
			return fmt.Sprintf("%.4f calls per admitted, want at most 0.02", perAdmitted)
		case float64(admitted) < 0.95*float64(can):
			return fmt.Sprintf("admitted %d, want at least 95%% of %d", admitted, can)
		}
		return ""
	}
	t.Run("paced", func(t *testing.T) {
		if s := check(run(t, false, 2*time.Second)); s != "" {
			t.Error(s)
		}
	})
	t.Run("unpaced", func(t *testing.T) {
		if s := check(run(t, true, 200*time.Millisecond)); s == "" {
			t.Error("without the pause the run passes too: the test proves nothing")
		}
	})
}
