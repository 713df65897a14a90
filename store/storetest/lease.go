package storetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// testLeases checks the leases.
func testLeases(t *testing.T, e *env) {
	t.Run("model", func(t *testing.T) { testLeaseModel(t, e) })
	t.Run("concurrent", func(t *testing.T) { testLeaseConcurrent(t, e) })
	t.Run("namespace", func(t *testing.T) { testLeaseNamespace(t, e) })
	t.Run("bad input", func(t *testing.T) { testLeaseBadInput(t, e) })
	t.Run("close", func(t *testing.T) { testLeaseClose(t, e) }) // last: it closes the store
}

// leaseTTLs are at least a second, so that a Redis store expiring keys in
// real time loses nothing while a case runs; odd ones put expiries off
// whole milliseconds.
var leaseTTLs = []time.Duration{
	time.Second + 3*time.Microsecond, 7*time.Second + 1*time.Microsecond, 30 * time.Second,
	time.Hour + 7*time.Millisecond, algo.MaxLeaseTTL,
}

// leaseKey is one key of the model: its policy, the reference state
// (algo's functions applied to the same calls) and a ledger kept by this
// test alone: the expiry of every lease the store granted and that was not
// released since.
type leaseKey struct {
	key    string
	p      algo.LeasePolicy
	ref    algo.Leases
	ledger map[string]int64
}

// live returns how many of the ledger's leases are live at now.
func (k *leaseKey) live(now int64) int64 {
	n := int64(0)
	for _, exp := range k.ledger {
		if exp > now {
			n++
		}
	}
	return n
}

// leaseModel is the state machine of testLeaseModel.
type leaseModel struct {
	e       *env
	keys    []*leaseKey
	ids     []string        // every id used so far, in order
	crashed map[string]bool // ids of holders that never release or renew
	n       int
}

// now returns the clock's time in µs.
func (m *leaseModel) now() int64 { return m.e.clk.Now().UnixMicro() }

// fresh returns an id not used before, of varied shapes and lengths.
func (m *leaseModel) fresh(t *rapid.T) string {
	m.n++
	shape := rapid.SampledFrom([]string{"id", "{tag}:", "ü", strings.Repeat("x", algo.MaxLeaseIDLen-8)}).Draw(t, "id shape")
	id := fmt.Sprintf("%s%d", shape, m.n)
	m.ids = append(m.ids, id)
	return id
}

// acquire calls AcquireLease on the store and on the reference, fails t if
// they differ or the store breaks the ledger's rules, and records a grant.
func (m *leaseModel) acquire(t *rapid.T, k *leaseKey, id string) algo.LeaseResult {
	now := m.now()
	liveBefore, held := k.live(now), k.ledger[id] > now
	var want algo.LeaseResult
	var err error
	if k.ref, want, err = k.p.Acquire(k.ref, now, id); err != nil {
		t.Fatalf("reference AcquireLease(%v, %q) at %d: %v", k.p, id, now, err)
	}
	got, err := m.e.s.AcquireLease(context.Background(), k.key, k.p, id)
	switch {
	case err != nil:
		t.Fatalf("AcquireLease(%q, %v, %q) at +%v: %v", k.key, k.p, id, m.e.clk.Now().Sub(Start), err)
	case got != want:
		t.Fatalf("AcquireLease(%q, %v, %q) at +%v = %+v; algo.LeasePolicy.Acquire says %+v",
			k.key, k.p, id, m.e.clk.Now().Sub(Start), got, want)
	case got.Allowed != (held || liveBefore < k.p.Limit):
		t.Fatalf("AcquireLease(%q) with %d live leases (limit %d; this id live: %v) = %+v", id, liveBefore, k.p.Limit, held, got)
	}
	if got.Allowed {
		k.ledger[id] = now + k.p.TTL.Microseconds()
	}
	return got
}

// drawKnown draws an id to release or renew: one this key holds or held,
// any id used so far (on any key), or one never used; never a crashed
// holder's.
func (m *leaseModel) drawKnown(t *rapid.T, k *leaseKey) string {
	notCrashed := func(id string) bool { return !m.crashed[id] }
	gens := []*rapid.Generator[string]{rapid.Just("never-acquired")}
	if mine := slices.Sorted(filter(maps.Keys(k.ledger), notCrashed)); len(mine) > 0 {
		gens = append(gens, rapid.SampledFrom(mine), rapid.SampledFrom(mine))
	}
	if used := slices.Collect(filter(slices.Values(m.ids), notCrashed)); len(used) > 0 {
		gens = append(gens, rapid.SampledFrom(used))
	}
	return rapid.OneOf(gens...).Draw(t, "known id")
}

// filter yields the elements of seq that keep returns true for.
func filter(seq iter.Seq[string], keep func(string) bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for v := range seq {
			if keep(v) && !yield(v) {
				return
			}
		}
	}
}

// key draws one of the model's keys.
func (m *leaseModel) key(t *rapid.T) *leaseKey {
	return m.keys[rapid.IntRange(0, len(m.keys)-1).Draw(t, "key")]
}

// Acquire takes a lease under a fresh id, or re-acquires an id in use
// (which renews it when it is live on this key).
func (m *leaseModel) Acquire(t *rapid.T) {
	k := m.key(t)
	id := m.fresh(t)
	if rapid.Bool().Draw(t, "reuse id") {
		id = m.drawKnown(t, k)
	}
	m.acquire(t, k, id)
}

// Crash takes a lease whose holder will never release or renew it: only
// its expiry frees the slot.
func (m *leaseModel) Crash(t *rapid.T) {
	id := m.fresh(t)
	m.crashed[id] = true
	m.acquire(t, m.key(t), id)
}

// Release frees a lease, or tries to free one that is not live: that must
// be reported as a no-op.
func (m *leaseModel) Release(t *rapid.T) {
	k := m.key(t)
	id, now := m.drawKnown(t, k), m.now()
	var want bool
	var err error
	if k.ref, want, err = k.ref.Release(now, id); err != nil {
		t.Fatalf("reference ReleaseLease(%q): %v", id, err)
	}
	got, err := m.e.s.ReleaseLease(context.Background(), k.key, id)
	if err != nil || got != want || got != (k.ledger[id] > now) {
		t.Fatalf("ReleaseLease(%q, %q) at +%v = %v, %v; algo says %v; its lease (expiry %d) live: %v",
			k.key, id, m.e.clk.Now().Sub(Start), got, err, want, k.ledger[id], k.ledger[id] > now)
	}
	delete(k.ledger, id)
}

// Renew extends a lease, or tries to extend one that is not live, which
// must report false and change nothing.
func (m *leaseModel) Renew(t *rapid.T) {
	k := m.key(t)
	id, now := m.drawKnown(t, k), m.now()
	var want bool
	var err error
	if k.ref, want, err = k.p.Renew(k.ref, now, id); err != nil {
		t.Fatalf("reference RenewLease(%q): %v", id, err)
	}
	got, err := m.e.s.RenewLease(context.Background(), k.key, k.p, id)
	if err != nil || got != want || got != (k.ledger[id] > now) {
		t.Fatalf("RenewLease(%q, %q) at +%v = %v, %v; algo says %v; its lease (expiry %d) live: %v",
			k.key, id, m.e.clk.Now().Sub(Start), got, err, want, k.ledger[id], k.ledger[id] > now)
	}
	if got {
		k.ledger[id] = now + k.p.TTL.Microseconds()
	}
}

// Advance moves the clock: not at all, a few µs, to a lease's expiry or a
// µs before it, or up to two TTLs.
func (m *leaseModel) Advance(t *rapid.T) {
	k, now := m.key(t), m.now()
	gens := []*rapid.Generator[int64]{rapid.Int64Range(0, 3), rapid.Int64Range(0, 2*k.p.TTL.Microseconds())}
	var live []int64
	for _, exp := range k.ledger {
		if exp > now {
			live = append(live, exp-now)
		}
	}
	if len(live) > 0 {
		slices.Sort(live)
		to := rapid.SampledFrom(live).Draw(t, "to expiry")
		gens = append(gens, rapid.Int64Range(to-1, to))
	}
	step := rapid.OneOf(gens...).Draw(t, "step µs")
	m.e.clk.Set(time.UnixMicro(min(now+step, leaseLatest)))
}

// leaseLatest is the latest time the model moves to: an acquire at it
// still expires by algo.MaxTime.
const leaseLatest = algo.MaxTime - int64(algo.MaxLeaseTTL/time.Microsecond)

// Edge fills a key at a frozen clock, then checks the denial to the µs: an
// acquire a µs before RetryAfter is denied with RetryAfter 1µs, one at
// RetryAfter is admitted, because the lease that frees the slot expires
// exactly then.
func (m *leaseModel) Edge(t *rapid.T) {
	k := m.key(t)
	res := m.acquire(t, k, m.fresh(t))
	for res.Allowed {
		res = m.acquire(t, k, m.fresh(t))
	}
	ra := res.RetryAfter
	if ra <= 0 || ra > k.p.TTL || res.Remaining != 0 {
		t.Fatalf("denied with %+v on a full key, want 0 < RetryAfter ≤ TTL %v and nothing remaining", res, k.p.TTL)
	}
	start := m.e.clk.Now()
	if start.Add(ra).UnixMicro() > leaseLatest {
		return
	}
	m.e.clk.Set(start.Add(ra - time.Microsecond))
	if early := m.acquire(t, k, m.fresh(t)); early.Allowed || early.RetryAfter != time.Microsecond {
		t.Fatalf("acquire 1µs before RetryAfter %v = %+v, want denied with RetryAfter 1µs", ra, early)
	}
	m.e.clk.Set(start.Add(ra))
	if onTime := m.acquire(t, k, m.fresh(t)); !onTime.Allowed {
		t.Fatalf("acquire at RetryAfter %v = %+v, want admitted: the expired lease's slot is free", ra, onTime)
	}
}

// Check holds after every action: no key has more than its limit of live
// leases by the ledger, the reference agrees on the count, and a probe
// (acquire a fresh id and release it at once, which changes nothing)
// gets the reference's answers.
func (m *leaseModel) Check(t *rapid.T) {
	now := m.now()
	for _, k := range m.keys {
		if n := k.live(now); n > k.p.Limit || int64(k.ref.Live(now)) != n {
			t.Fatalf("key %q: %d live leases granted, limit %d; reference holds %d", k.key, n, k.p.Limit, k.ref.Live(now))
		}
		m.n++
		probe := fmt.Sprint("probe", m.n)
		if m.acquire(t, k, probe).Allowed {
			m.ids = append(m.ids, probe)
			m.release(t, k, probe)
		}
	}
}

// release is Release with the id given.
func (m *leaseModel) release(t *rapid.T, k *leaseKey, id string) {
	now := m.now()
	var err error
	if k.ref, _, err = k.ref.Release(now, id); err != nil {
		t.Fatal(err)
	}
	if got, err := m.e.s.ReleaseLease(context.Background(), k.key, id); err != nil || !got {
		t.Fatalf("ReleaseLease(%q, %q) of a live lease = %v, %v; want true", k.key, id, got, err)
	}
	delete(k.ledger, id)
}

// testLeaseModel runs random acquires, crashes, releases, renewals and
// clock moves on a few keys, against algo's functions on the same calls and
// against the test's own ledger of grants (see leaseModel).
func testLeaseModel(t *testing.T, e *env) {
	rapid.Check(t, func(t *rapid.T) {
		e.clk.Set(rapid.SampledFrom([]time.Time{Start, time.UnixMicro(leaseLatest - 100*int64(algo.MaxLeaseTTL/time.Microsecond))}).Draw(t, "start"))
		m := &leaseModel{e: e, crashed: map[string]bool{}}
		for i := range rapid.IntRange(1, 3).Draw(t, "keys") {
			p := algo.LeasePolicy{
				Limit: rapid.Int64Range(1, 4).Draw(t, fmt.Sprint("limit ", i)),
				TTL:   rapid.SampledFrom(leaseTTLs).Draw(t, fmt.Sprint("ttl ", i)),
			}
			m.keys = append(m.keys, &leaseKey{key: e.key(), p: p, ledger: map[string]int64{}})
		}
		t.Repeat(rapid.StateMachineActions(m))
	})
}

// testLeaseConcurrent: goroutines acquiring on one key at a frozen clock
// never hold more than the limit at once, and exactly the limit are
// admitted when nobody releases.
func testLeaseConcurrent(t *testing.T, e *env) {
	const goroutines, attempts = 8, 25
	p := algo.LeasePolicy{Limit: 5, TTL: time.Minute}
	ctx := context.Background()
	// hammer runs try attempts times in each goroutine, all released at
	// once so that their calls overlap, and stops at the first error.
	hammer := func(t *testing.T, try func(id string) error) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				<-start
				for range attempts {
					if err := try(store.NewLeaseID()); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
	}
	t.Run("hold", func(t *testing.T) {
		for range 4 { // on fresh keys: the race to fill one is short
			key := e.key()
			var admitted atomic.Int64
			hammer(t, func(id string) error {
				res, err := e.s.AcquireLease(ctx, key, p, id)
				if res.Allowed {
					admitted.Add(1)
				}
				return err
			})
			if admitted.Load() != p.Limit {
				t.Fatalf("%d goroutines × %d acquires, none released, at a frozen clock: %d admitted, want exactly %d",
					goroutines, attempts, admitted.Load(), p.Limit)
			}
		}
	})
	t.Run("hold and release", func(t *testing.T) {
		key := e.key()
		var held, most atomic.Int64
		hammer(t, func(id string) error {
			res, err := e.s.AcquireLease(ctx, key, p, id)
			if err != nil || !res.Allowed {
				return err
			}
			n := held.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			held.Add(-1) // before the release: the slot is no longer used
			if ok, err := e.s.ReleaseLease(ctx, key, id); err != nil || !ok {
				return fmt.Errorf("ReleaseLease of a live lease = %v, %v", ok, err)
			}
			return nil
		})
		if most.Load() > p.Limit {
			t.Fatalf("%d leases held at once, limit %d", most.Load(), p.Limit)
		}
		if res := e.leaseOK(t, key, p, "after"); res.Remaining != p.Limit-1 {
			t.Fatalf("after every lease was released: %+v, want %d remaining", res, p.Limit-1)
		}
	})
}

// leaseOK acquires a lease and fails t unless it is admitted.
func (e *env) leaseOK(t tb, key string, p algo.LeasePolicy, id string) algo.LeaseResult {
	t.Helper()
	res, err := e.s.AcquireLease(context.Background(), key, p, id)
	if err != nil || !res.Allowed {
		t.Fatalf("AcquireLease(%q, %v, %q) = %+v, %v; want admitted", key, p, id, res, err)
	}
	return res
}

// testLeaseNamespace: a key's bucket and its lease set are apart.
func testLeaseNamespace(t *testing.T, e *env) {
	key := e.key()
	bp, lp := algo.PerHour(1).Burst(1), algo.LeasePolicy{Limit: 1, TTL: time.Minute}
	if res := e.take(t, key, bp, 1); !res.Allowed {
		t.Fatalf("first Take = %+v", res)
	}
	e.leaseOK(t, key, lp, "a")
	if res := e.take(t, key, bp, 1); res.Allowed {
		t.Fatalf("Take on an empty bucket whose key holds a lease = %+v, want denied", res)
	}
	if ok, err := e.s.ReleaseLease(context.Background(), key, "a"); err != nil || !ok {
		t.Fatalf("ReleaseLease = %v, %v", ok, err)
	}
	if res := e.take(t, key, bp, 0); res.Remaining != 0 {
		t.Fatalf("peek after the release = %+v: the bucket changed", res)
	}
}

// testLeaseBadInput: bad input, or a context that has ended, is an error
// matching its sentinel and changes nothing.
func testLeaseBadInput(t *testing.T, e *env) {
	p := algo.LeasePolicy{Limit: 2, TTL: time.Minute}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	long := e.sized(store.DefaultMaxKeyLen + 1)
	tests := []struct {
		name    string
		ctx     context.Context
		key, id string // "" key: a fresh one, unless empty
		p       algo.LeasePolicy
		want    error
	}{
		{"empty key", nil, "", "x", p, store.ErrEmptyKey},
		{"key too long", nil, long, "x", p, store.ErrKeyTooLong},
		{"empty id", nil, "", "", p, algo.ErrInvalidLeaseID},
		{"id too long", nil, "", strings.Repeat("i", algo.MaxLeaseIDLen+1), p, algo.ErrInvalidLeaseID},
		{"zero policy", nil, "", "x", algo.LeasePolicy{}, algo.ErrInvalidLeasePolicy},
		{"limit 0", nil, "", "x", algo.LeasePolicy{Limit: 0, TTL: time.Minute}, algo.ErrInvalidLeasePolicy},
		{"negative limit", nil, "", "x", algo.LeasePolicy{Limit: -1, TTL: time.Minute}, algo.ErrInvalidLeasePolicy},
		{"limit above MaxLeaseLimit", nil, "", "x", algo.LeasePolicy{Limit: algo.MaxLeaseLimit + 1, TTL: time.Minute}, algo.ErrInvalidLeasePolicy},
		{"ttl 0", nil, "", "x", algo.LeasePolicy{Limit: 2}, algo.ErrInvalidLeasePolicy},
		{"negative ttl", nil, "", "x", algo.LeasePolicy{Limit: 2, TTL: -time.Second}, algo.ErrInvalidLeasePolicy},
		{"ttl not whole µs", nil, "", "x", algo.LeasePolicy{Limit: 2, TTL: time.Second + 1}, algo.ErrInvalidLeasePolicy},
		{"ttl above MaxLeaseTTL", nil, "", "x", algo.LeasePolicy{Limit: 2, TTL: algo.MaxLeaseTTL + time.Microsecond}, algo.ErrInvalidLeasePolicy},
		{"canceled", canceled, "", "x", p, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := e.key()
			key, ctx := tc.key, tc.ctx
			if key == "" && tc.want != store.ErrEmptyKey {
				key = good
			}
			if ctx == nil {
				ctx = context.Background()
			}
			e.leaseOK(t, good, p, "held")
			calls := map[string]func() error{
				"AcquireLease": func() error { _, err := e.s.AcquireLease(ctx, key, tc.p, tc.id); return err },
				"RenewLease":   func() error { _, err := e.s.RenewLease(ctx, key, tc.p, tc.id); return err },
				"ReleaseLease": func() error { _, err := e.s.ReleaseLease(ctx, key, tc.id); return err },
			}
			for _, name := range []string{"AcquireLease", "RenewLease", "ReleaseLease"} {
				if name == "ReleaseLease" && errors.Is(tc.want, algo.ErrInvalidLeasePolicy) {
					continue // it takes no policy
				}
				if err := calls[name](); !errors.Is(err, tc.want) {
					t.Fatalf("%s(%.40q, %v, %.40q) = %v, want an error matching %v", name, key, tc.p, tc.id, err, tc.want)
				}
			}
			// "held" is still the only lease: re-acquiring it renews it.
			if res := e.leaseOK(t, good, p, "held"); res.Remaining != 1 {
				t.Fatalf("after the bad calls, key holds %d leases, want 1", p.Limit-res.Remaining)
			}
		})
	}
}

// testLeaseClose: after Close every lease call fails with store.ErrClosed.
func testLeaseClose(t *testing.T, e *env) {
	p, key := algo.LeasePolicy{Limit: 1, TTL: time.Minute}, e.key()
	e.leaseOK(t, key, p, "a")
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := context.Background()
	if res, err := e.s.AcquireLease(ctx, e.key(), p, "b"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("AcquireLease after Close = %+v, %v; want store.ErrClosed", res, err)
	}
	if ok, err := e.s.RenewLease(ctx, key, p, "a"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("RenewLease after Close = %v, %v; want store.ErrClosed", ok, err)
	}
	if ok, err := e.s.ReleaseLease(ctx, key, "a"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ReleaseLease after Close = %v, %v; want store.ErrClosed", ok, err)
	}
}
