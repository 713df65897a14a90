package algo_test

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// leaseRef is the reference concurrency limiter, written from the
// definition with no care for speed: a map from id to expiry.
type leaseRef map[string]int64

// drop forgets the leases expired at now.
func (r leaseRef) drop(now int64) {
	maps.DeleteFunc(r, func(_ string, exp int64) bool { return exp <= now })
}

func (r leaseRef) acquire(p algo.LeasePolicy, now int64, id string) algo.LeaseResult {
	r.drop(now)
	res := algo.LeaseResult{Limit: p.Limit}
	if _, held := r[id]; held || int64(len(r)) < p.Limit {
		r[id] = now + p.TTL.Microseconds()
		res.Allowed = true
	} else {
		exps := slices.Sorted(maps.Values(r))
		// The acquire is admitted once len(r)−Limit+1 leases have expired.
		res.RetryAfter = time.Duration(exps[int64(len(r))-p.Limit]-now) * time.Microsecond
	}
	res.Remaining = max(0, p.Limit-int64(len(r)))
	return res
}

func (r leaseRef) release(now int64, id string) bool {
	r.drop(now)
	_, held := r[id]
	delete(r, id)
	return held
}

func (r leaseRef) renew(p algo.LeasePolicy, now int64, id string) bool {
	r.drop(now)
	_, held := r[id]
	if held {
		r[id] = now + p.TTL.Microseconds()
	}
	return held
}

// leaseTTLs are the TTLs drawn: the smallest, odd ones, the largest.
var leaseTTLs = []time.Duration{
	time.Microsecond, 3 * time.Microsecond, time.Millisecond + 7*time.Microsecond,
	30 * time.Second, algo.MaxLeaseTTL,
}

// drawLeasePolicy draws a small valid policy.
func drawLeasePolicy(t *rapid.T, label string) algo.LeasePolicy {
	return algo.LeasePolicy{
		Limit: rapid.Int64Range(1, 5).Draw(t, label+"limit"),
		TTL:   rapid.SampledFrom(leaseTTLs).Draw(t, label+"ttl"),
	}
}

// drawLeaseID draws an id from a small pool, so that the same id comes
// back (re-acquired, released twice), or now and then a long fresh one.
func drawLeaseID(t *rapid.T) string {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g"}),
		rapid.StringMatching(`[a-z0-9]{1,64}`),
	).Draw(t, "id")
}

// drawLeaseStep draws how far to move the clock: not at all, a µs, to a
// lease's expiry or a µs before it, or up to two TTLs.
func drawLeaseStep(t *rapid.T, p algo.LeasePolicy, s algo.Leases, now int64) int64 {
	gens := []*rapid.Generator[int64]{
		rapid.Just(int64(0)), rapid.Just(int64(1)),
		rapid.Int64Range(0, 2*p.TTL.Microseconds()),
	}
	if len(s) > 0 {
		exp := rapid.SampledFrom(s).Draw(t, "lease").Expiry
		gens = append(gens, rapid.Just(max(exp-now, 0)), rapid.Just(max(exp-now-1, 0)))
	}
	return rapid.OneOf(gens...).Draw(t, "step")
}

// drawLeaseStart draws the first instant: usually an ordinary one, else
// one so late that a lease may expire at algo.MaxTime.
func drawLeaseStart(t *rapid.T, ttl time.Duration) int64 {
	late := algo.MaxTime - ttl.Microseconds()
	if rapid.IntRange(0, 3).Draw(t, "late") > 0 {
		return t0
	}
	return rapid.Int64Range(max(late-2*ttl.Microseconds(), 0), late).Draw(t, "start")
}

// checkLeases fails t unless s holds exactly ref's leases, in order, all
// live at now.
func checkLeases(t *rapid.T, s algo.Leases, ref leaseRef, now int64) {
	if !slices.IsSortedFunc(s, func(a, b algo.Lease) int {
		return cmp.Or(cmp.Compare(a.Expiry, b.Expiry), strings.Compare(a.ID, b.ID))
	}) {
		t.Fatalf("state not ordered by (expiry, id): %+v", s)
	}
	got := map[string]int64{}
	for _, l := range s {
		got[l.ID] = l.Expiry
	}
	if len(got) != len(s) || !maps.Equal(got, ref) {
		t.Fatalf("state %+v, reference %v", s, ref)
	}
	if s.Live(now) != len(s) {
		t.Fatalf("state %+v at %d: Live = %d, want all %d", s, now, s.Live(now), len(s))
	}
}

// TestPropLeaseReference runs random acquires, releases and renewals, with
// the limit changing now and then (a policy that shrank), and checks every
// answer and every state against the reference. Since the state holds
// exactly the reference's live leases, and the reference admits only below
// the limit, no key ever holds more than Limit leases.
func TestPropLeaseReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pols := []algo.LeasePolicy{drawLeasePolicy(t, "")}
		if rapid.IntRange(0, 3).Draw(t, "limit changes") == 0 {
			pols = append(pols, algo.LeasePolicy{Limit: rapid.Int64Range(1, 5).Draw(t, "second limit"), TTL: pols[0].TTL})
		}
		now := drawLeaseStart(t, pols[0].TTL)
		var s algo.Leases
		ref := leaseRef{}
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			p := rapid.SampledFrom(pols).Draw(t, "policy")
			now = min(now+drawLeaseStep(t, p, s, now), algo.MaxTime-p.TTL.Microseconds())
			id := drawLeaseID(t)
			var err error
			switch op := rapid.IntRange(0, 4).Draw(t, "op"); op {
			case 0, 1:
				var res algo.LeaseResult
				want := ref.acquire(p, now, id)
				if s, res, err = p.Acquire(s, now, id); err != nil || res != want {
					t.Fatalf("AcquireLease(%v, %q) at %d = %+v, %v; reference %+v", p, id, now, res, err, want)
				}
			case 2, 3:
				var ok bool
				want := ref.release(now, id)
				if s, ok, err = s.Release(now, id); err != nil || ok != want {
					t.Fatalf("ReleaseLease(%q) at %d = %v, %v; reference %v", id, now, ok, err, want)
				}
			default:
				var ok bool
				want := ref.renew(p, now, id)
				if s, ok, err = p.Renew(s, now, id); err != nil || ok != want {
					t.Fatalf("RenewLease(%v, %q) at %d = %v, %v; reference %v", p, id, now, ok, err, want)
				}
			}
			checkLeases(t, s, ref, now)
			if limit := max(pols[0].Limit, pols[len(pols)-1].Limit); int64(len(s)) > limit {
				t.Fatalf("%d leases held, limit %d", len(s), limit)
			}
		}
	})
}

// TestPropLeaseRetryAfter fills a key after a random history and checks the
// denial's RetryAfter to the microsecond: with no release in between, an
// acquire then is admitted, and one a microsecond earlier is denied with a
// RetryAfter of 1µs. With Limit 1 this is "an expired lease frees its slot
// exactly at its expiry".
func TestPropLeaseRetryAfter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawLeasePolicy(t, "")
		now := drawLeaseStart(t, p.TTL)
		var s algo.Leases
		var err error
		for i := range rapid.IntRange(0, 20).Draw(t, "ops") {
			now = min(now+drawLeaseStep(t, p, s, now), algo.MaxTime-p.TTL.Microseconds())
			if s, _, err = p.Acquire(s, now, fmt.Sprint("h", i)); err != nil {
				t.Fatal(err)
			}
		}
		var res algo.LeaseResult
		for i := 0; i == 0 || res.Allowed; i++ { // fill at a frozen clock
			if s, res, err = p.Acquire(s, now, fmt.Sprint("fill", i)); err != nil {
				t.Fatal(err)
			}
		}
		ra := us(t, res.RetryAfter)
		if ra <= 0 || ra > p.TTL.Microseconds() || res.Remaining != 0 {
			t.Fatalf("denied with %+v, want 0 < RetryAfter ≤ TTL %v and nothing remaining", res, p.TTL)
		}
		if now+ra > algo.MaxTime-p.TTL.Microseconds() {
			return // no acquire is valid that late (its lease would expire past MaxTime)
		}
		_, early, err := p.Acquire(slices.Clone(s), now+ra-1, "late")
		if err != nil || early.Allowed || early.RetryAfter != time.Microsecond {
			t.Fatalf("acquire 1µs before RetryAfter %v: %+v, %v; want denied with RetryAfter 1µs", res.RetryAfter, early, err)
		}
		_, onTime, err := p.Acquire(s, now+ra, "late")
		if err != nil || !onTime.Allowed {
			t.Fatalf("acquire at RetryAfter %v: %+v, %v; want admitted", res.RetryAfter, onTime, err)
		}
	})
}

// TestLeaseSteps walks one key with a limit of 2 through named instants.
func TestLeaseSteps(t *testing.T) {
	p := algo.LeasePolicy{Limit: 2, TTL: 10 * time.Second}
	ttl := p.TTL.Microseconds()
	type step struct {
		name    string
		at      int64
		op, id  string // op: acquire, release, renew
		ok      bool   // Allowed, released or renewed
		left    int64  // Remaining after an acquire
		retryUS int64
	}
	steps := []step{
		{"t0", t0, "acquire", "a", true, 1, 0},
		{"t0+1s", t0 + s1, "acquire", "b", true, 0, 0},
		{"t0+2s: full", t0 + 2*s1, "acquire", "c", false, 0, ttl - 2*s1},
		{"t0+2s: a again renews a", t0 + 2*s1, "acquire", "a", true, 0, 0},
		{"t0+2s: now b expires first", t0 + 2*s1, "acquire", "c", false, 0, ttl - s1},
		{"t0+3s: release b", t0 + 3*s1, "release", "b", true, 0, 0},
		{"t0+3s: release b twice", t0 + 3*s1, "release", "b", false, 0, 0},
		{"t0+3s: release unknown", t0 + 3*s1, "release", "zz", false, 0, 0},
		{"t0+3s: c fits", t0 + 3*s1, "acquire", "c", true, 0, 0},
		{"a's expiry - 1µs: renew a", t0 + 2*s1 + ttl - 1, "renew", "a", true, 0, 0},
		{"c's expiry - 1µs: full", t0 + 3*s1 + ttl - 1, "acquire", "d", false, 0, 1},
		{"c's expiry: c's slot is free", t0 + 3*s1 + ttl, "acquire", "d", true, 0, 0},
		{"c's expiry: release c, expired", t0 + 3*s1 + ttl, "release", "c", false, 0, 0},
		{"c's expiry: renew c, expired", t0 + 3*s1 + ttl, "renew", "c", false, 0, 0},
	}
	var s algo.Leases
	for _, st := range steps {
		var ok bool
		var res algo.LeaseResult
		var err error
		switch st.op {
		case "acquire":
			s, res, err = p.Acquire(s, st.at, st.id)
			ok = res.Allowed
			want := algo.LeaseResult{Allowed: st.ok, Limit: 2, Remaining: st.left, RetryAfter: time.Duration(st.retryUS) * time.Microsecond}
			if err == nil && res != want {
				t.Fatalf("%s: AcquireLease(%q) = %+v, want %+v", st.name, st.id, res, want)
			}
		case "release":
			s, ok, err = s.Release(st.at, st.id)
		case "renew":
			s, ok, err = p.Renew(s, st.at, st.id)
		}
		if err != nil || ok != st.ok {
			t.Fatalf("%s: %s(%q) = %v, %v; want %v", st.name, st.op, st.id, ok, err, st.ok)
		}
	}
	if len(s) != 2 || s[0].ID != "a" || s.IdleAt() != t0+3*s1+2*ttl {
		t.Fatalf("final state %+v: want a, then d, idle at d's expiry", s)
	}
}

// TestLeaseErrors: bad input is an error matching its sentinel, and the
// state (which holds an expired lease a call would drop) is untouched.
func TestLeaseErrors(t *testing.T) {
	p := algo.LeasePolicy{Limit: 3, TTL: time.Second}
	state := algo.Leases{{ID: "old", Expiry: t0 - 1}, {ID: "x", Expiry: t0 + 5}}
	long := strings.Repeat("i", algo.MaxLeaseIDLen+1)
	tests := []struct {
		name string
		p    algo.LeasePolicy
		s    algo.Leases
		now  int64
		id   string
		want error
		rel  bool // ReleaseLease (no policy, any time up to MaxTime) fails too
	}{
		{"zero policy", algo.LeasePolicy{}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"limit 0", algo.LeasePolicy{Limit: 0, TTL: time.Second}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"negative limit", algo.LeasePolicy{Limit: -1, TTL: time.Second}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"limit above MaxLeaseLimit", algo.LeasePolicy{Limit: algo.MaxLeaseLimit + 1, TTL: time.Second}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"ttl 0", algo.LeasePolicy{Limit: 1}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"negative ttl", algo.LeasePolicy{Limit: 1, TTL: -time.Second}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"ttl under 1µs", algo.LeasePolicy{Limit: 1, TTL: 999}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"ttl not whole µs", algo.LeasePolicy{Limit: 1, TTL: 1500}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"ttl above MaxLeaseTTL", algo.LeasePolicy{Limit: 1, TTL: algo.MaxLeaseTTL + time.Microsecond}, state, t0, "a", algo.ErrInvalidLeasePolicy, false},
		{"empty id", p, state, t0, "", algo.ErrInvalidLeaseID, true},
		{"id too long", p, state, t0, long, algo.ErrInvalidLeaseID, true},
		{"negative time", p, state, -1, "a", algo.ErrInvalidTime, true},
		{"expiry past MaxTime", p, state, algo.MaxTime - p.TTL.Microseconds() + 1, "a", algo.ErrInvalidTime, false},
		{"unordered state", p, algo.Leases{{ID: "b", Expiry: t0 + 5}, {ID: "a", Expiry: t0 + 5}}, t0, "a", algo.ErrInvalidState, true},
		{"repeated lease", p, algo.Leases{{ID: "a", Expiry: t0 + 5}, {ID: "a", Expiry: t0 + 5}}, t0, "a", algo.ErrInvalidState, true},
		{"empty id in state", p, algo.Leases{{ID: "", Expiry: t0 - 5}}, t0, "a", algo.ErrInvalidState, true},
		{"negative expiry in state", p, algo.Leases{{ID: "a", Expiry: -1}}, t0, "a", algo.ErrInvalidState, true},
		{"expiry past MaxTime in state", p, algo.Leases{{ID: "a", Expiry: algo.MaxTime + 1}}, t0, "a", algo.ErrInvalidState, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := []struct {
				name string
				call func(s algo.Leases) (algo.Leases, error)
			}{
				{"AcquireLease", func(s algo.Leases) (algo.Leases, error) {
					s, _, err := tc.p.Acquire(s, tc.now, tc.id)
					return s, err
				}},
				{"RenewLease", func(s algo.Leases) (algo.Leases, error) {
					s, _, err := tc.p.Renew(s, tc.now, tc.id)
					return s, err
				}},
				{"ReleaseLease", func(s algo.Leases) (algo.Leases, error) {
					s, _, err := s.Release(tc.now, tc.id)
					return s, err
				}},
			}
			for _, c := range calls {
				if c.name == "ReleaseLease" && !tc.rel {
					continue
				}
				in := slices.Clone(tc.s)
				got, err := c.call(in)
				if !errors.Is(err, tc.want) {
					t.Fatalf("%s = %v, want an error matching %v", c.name, err, tc.want)
				}
				if !slices.Equal(got, tc.s) || !slices.Equal(in, tc.s) {
					t.Fatalf("%s changed the state %+v to %+v (argument now %+v)", c.name, tc.s, got, in)
				}
			}
		})
	}
}

// TestLeasePolicyBounds: each bound of LeasePolicy.Validate, valid on one
// side of it.
func TestLeasePolicyBounds(t *testing.T) {
	for _, p := range []algo.LeasePolicy{
		{Limit: 1, TTL: time.Microsecond},
		{Limit: algo.MaxLeaseLimit, TTL: algo.MaxLeaseTTL},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%v: %v, want valid", p, err)
		}
		if _, res, err := p.Acquire(nil, algo.MaxTime-p.TTL.Microseconds(), strings.Repeat("i", algo.MaxLeaseIDLen)); err != nil || !res.Allowed {
			t.Errorf("%v: AcquireLease at the latest time with the longest id = %+v, %v", p, res, err)
		}
	}
	if got := (algo.LeasePolicy{Limit: 10, TTL: 30 * time.Second}).String(); got != "10 in flight, ttl 30s" {
		t.Errorf("String() = %q", got)
	}
}

// TestLeaseAllocs: once a key's state has grown to its limit, acquire and
// release allocate nothing (the ids are the caller's).
func TestLeaseAllocs(t *testing.T) {
	p := algo.LeasePolicy{Limit: 8, TTL: time.Second}
	ids := make([]string, p.Limit)
	s := make(algo.Leases, 0, p.Limit)
	for i := range ids {
		ids[i] = fmt.Sprint("lease-", i)
		s, _, _ = p.Acquire(s, t0, ids[i])
	}
	now, i := t0, 0
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		s, _, _ = s.Release(now, ids[i])
		s, _, _ = p.Acquire(s, now, ids[i])
		i = (i + 1) % len(ids)
	})
	if allocs != 0 {
		t.Fatalf("release+acquire on a full key: %v allocations, want 0", allocs)
	}
}

// BenchmarkLease measures a release and an acquire on a key holding n
// leases (ids made beforehand), the steady state of a busy key.
func BenchmarkLease(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprint(n, " held"), func(b *testing.B) {
			p := algo.LeasePolicy{Limit: int64(n), TTL: time.Minute}
			ids := make([]string, n)
			var s algo.Leases
			for i := range ids {
				ids[i] = fmt.Sprintf("%026d", i)
				s, _, _ = p.Acquire(s, t0, ids[i])
			}
			now, i := t0, 0
			b.ReportAllocs()
			for b.Loop() {
				now++
				s, _, _ = s.Release(now, ids[i]) // the oldest
				s, _, _ = p.Acquire(s, now, ids[i])
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}

// Two leases in flight at most: a third holder is told when the earliest
// lease expires; a release frees a slot at once; a crashed holder's lease
// frees its slot at its expiry.
func ExampleLeasePolicy_Acquire() {
	p := algo.LeasePolicy{Limit: 2, TTL: 30 * time.Second}
	var s algo.Leases // a key with no leases
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	show := func(id string) {
		var res algo.LeaseResult
		s, res, _ = p.Acquire(s, now, id)
		fmt.Printf("acquire %s: allowed=%v remaining=%d retry after %v\n", id, res.Allowed, res.Remaining, res.RetryAfter)
	}
	show("a")
	now += 10e6 // 10s later
	show("b")
	show("c")
	var ok bool
	s, ok, _ = s.Release(now, "b")
	fmt.Println("release b:", ok)
	s, ok, _ = s.Release(now, "b")
	fmt.Println("release b again:", ok)
	show("c")
	now += 20e6 // a never released: its lease expires at 30s
	show("d")
	// Output:
	// acquire a: allowed=true remaining=1 retry after 0s
	// acquire b: allowed=true remaining=0 retry after 0s
	// acquire c: allowed=false remaining=0 retry after 20s
	// release b: true
	// release b again: false
	// acquire c: allowed=true remaining=0 retry after 0s
	// acquire d: allowed=true remaining=0 retry after 0s
}
