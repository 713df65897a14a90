package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// RunPolicyChange checks that the stores newStore builds (as for [Run])
// convert a live bucket whose policy changes exactly as
// algo.TokenBucket.Rebase does under rule, the rule they were configured
// with: a rapid state machine of takes, refunds, partial grants,
// reservations, cancellations and multi-takes over a few keys, each call under one of two or three
// policies, with the clock moving forwards. The policies are token
// buckets and calendar quotas (algo.Quota), the quotas often of one
// calendar (a change keeps or scales their count) and sometimes of
// another (the key starts afresh, as it does between a bucket and a
// quota); quotas are only taken, refunded and multi-taken, and the clock
// often moves to a µs before, at or after the end of a quota's period. Every answer must equal the
// reference's, which keeps, per key, the policy of its last call and the
// state algo's functions give, and converts it with Rebase at the first
// call under another policy. Every call that converts a bucket keeps it
// converted, even one that would otherwise write nothing (a denial on
// the server clock, a refund of 0, a cancellation that gives nothing
// back, a bucket of a denied multi-take that would have admitted).
//
// It logs how many cases and conversions it checked, and how many of
// those kept a count between two quotas of one calendar.
func RunPolicyChange(t *testing.T, rule algo.ChangeRule, newStore func(t *testing.T, clk *Clock) store.Store) {
	t.Helper()
	clk := NewClock()
	s := newStore(t, clk)
	e := &env{s: s, clk: clk, prefix: fmt.Sprintf("storetest:%016x:PolicyChange:", time.Now().UnixNano())}
	var cases, changes, kept, calls int
	rapid.Check(t, func(t *rapid.T) {
		m := &changeModel{e: e, rule: rule}
		m.pols = genChangePolicies(t)
		for _, k := range e.tagged(rapid.IntRange(1, 3).Draw(t, "keys")) {
			m.keys = append(m.keys, &changeKey{key: k})
		}
		t.Repeat(rapid.StateMachineActions(m))
		cases++
		changes += m.changes
		kept += m.kept
		calls += m.calls
	})
	t.Logf("%d cases, %d calls, %d policy changes (%d keeping a quota's count), rule %v", cases, calls, changes, kept, rule)
}

// changeKey is one key of the model: the reference bucket, the policy of
// the last call on it (none before the first) and the ticket of its
// last reservation that must wait, with the policy it was made under.
type changeKey struct {
	key    string
	p      algo.Policy
	s      algo.State
	ticket algo.Ticket
	tp     algo.Policy
}

// changeModel is the state machine of RunPolicyChange.
type changeModel struct {
	e                    *env
	rule                 algo.ChangeRule
	pols                 []algo.Policy
	keys                 []*changeKey
	changes, kept, calls int
}

func (m *changeModel) now() int64 { return m.e.clk.Now().UnixMicro() }

// genChangePolicies draws two or three policies, each a token bucket, a
// quota of one calendar drawn for the case (so two quotas often share
// it), or a quota of a calendar of its own.
func genChangePolicies(t *rapid.T) []algo.Policy {
	period, off, _ := genQuota(t, "calendar ").Calendar()
	n := rapid.IntRange(2, 3).Draw(t, "policies")
	pols := make([]algo.Policy, n)
	for i := range pols {
		label := fmt.Sprint(i, " ")
		switch rapid.IntRange(0, 4).Draw(t, label+"kind") {
		case 0, 1:
			pols[i] = genPolicy(t, label)
		case 2, 3:
			pols[i] = algo.Quota(rapid.Int64Range(1, 20).Draw(t, label+"n"), period, off)
		default:
			pols[i] = genQuota(t, label)
		}
	}
	return pols
}

// pick draws a key and the policy of the call on it.
func (m *changeModel) pick(t *rapid.T) (*changeKey, algo.Policy) {
	return rapid.SampledFrom(m.keys).Draw(t, "key"), rapid.SampledFrom(m.pols).Draw(t, "policy")
}

// pickBucket draws a key and a token bucket's policy for an operation
// that quotas do not have (algo.ErrQuotaUnsupported); it skips when the
// case has no bucket.
func (m *changeModel) pickBucket(t *rapid.T) (*changeKey, algo.Policy) {
	var buckets []algo.Policy
	for _, p := range m.pols {
		if !p.IsQuota() {
			buckets = append(buckets, p)
		}
	}
	if len(buckets) == 0 {
		t.Skip("no token bucket among the policies")
	}
	return rapid.SampledFrom(m.keys).Draw(t, "key"), rapid.SampledFrom(buckets).Draw(t, "policy")
}

// convert returns k's reference state for a call under p at now: Rebase'd
// when k's last call was under another policy.
func (m *changeModel) convert(t *rapid.T, k *changeKey, p algo.Policy) algo.State {
	m.calls++
	if k.p == (algo.Policy{}) || k.p == p {
		return k.s
	}
	m.changes++
	s, err := algo.TokenBucket{}.Rebase(k.p, p, k.s, m.now(), m.rule)
	if err != nil {
		t.Fatalf("reference Rebase(%v, %v, %+v): %v", k.p, p, k.s, err)
	}
	if k.p.IsQuota() && p.IsQuota() && s.Level > 0 {
		m.kept++
	}
	return s
}

// step applies one call under p on key k to the reference (ref, on k's
// state converted to p, at now) and to the store (call), fails t unless
// their answers are equal, keeps the reference's new state and returns
// its answer.
func (m *changeModel) step(t *rapid.T, name string, k *changeKey, p algo.Policy,
	ref func(s algo.State, now int64) (algo.State, any, error), call func(ctx context.Context) (any, error)) any {
	s, want, err := ref(m.convert(t, k, p), m.now())
	if err != nil {
		t.Fatalf("reference %s: %v", name, err)
	}
	got, err := call(context.Background())
	if err != nil {
		t.Fatalf("%s on %q under %v: %v", name, k.key, p, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("at +%v: %s on %q under %v (last call under %v, reference state %+v) = %+v, algo says %+v",
			m.e.clk.Now().Sub(Start), name, k.key, p, k.p, k.s, got, want)
	}
	k.p, k.s = p, s
	return want
}

// Take takes a cost (0 peeks) under a drawn policy.
func (m *changeModel) Take(t *rapid.T) {
	k, p := m.pick(t)
	cost := genCost(t, p)
	m.step(t, fmt.Sprintf("Take(%d)", cost), k, p, func(s algo.State, now int64) (algo.State, any, error) {
		s, res, err := algo.TokenBucket{}.Take(p, s, now, cost)
		return s, res, err
	}, func(ctx context.Context) (any, error) {
		return m.e.s.Take(ctx, store.Request{Key: k.key, Policy: p, Cost: cost})
	})
}

// Refund refunds up to the capacity, 0 included.
func (m *changeModel) Refund(t *rapid.T) {
	k, p := m.pick(t)
	n := rapid.Int64Range(0, p.Capacity()).Draw(t, "n")
	m.step(t, fmt.Sprintf("Refund(%d)", n), k, p, func(s algo.State, now int64) (algo.State, any, error) {
		s, res, err := algo.TokenBucket{}.Refund(p, s, now, n)
		return s, res, err
	}, func(ctx context.Context) (any, error) {
		return m.e.s.Refund(ctx, store.Request{Key: k.key, Policy: p, Cost: n})
	})
}

// AtMost grants up to n, n possibly above the capacity.
func (m *changeModel) AtMost(t *rapid.T) {
	k, p := m.pickBucket(t)
	n := rapid.Int64Range(0, 2*p.Capacity()).Draw(t, "n")
	m.step(t, fmt.Sprintf("TakeAtMost(%d)", n), k, p, func(s algo.State, now int64) (algo.State, any, error) {
		s, g, res, err := algo.TokenBucket{}.TakeAtMost(p, s, now, n)
		return s, fmt.Sprint(g, res), err
	}, func(ctx context.Context) (any, error) {
		g, res, err := m.e.s.TakeAtMost(ctx, store.Request{Key: k.key, Policy: p, Cost: n})
		return fmt.Sprint(g, res), err
	})
}

// Reserve reserves with a drawn wait: none, a token's time or a bucket's.
func (m *changeModel) Reserve(t *rapid.T) {
	k, p := m.pickBucket(t)
	cost := genCost(t, p)
	wait := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 2*tokenUS(p)), rapid.Just(p.FillTime().Microseconds())).Draw(t, "wait")
	res := m.step(t, fmt.Sprintf("Reserve(%d, %dµs)", cost, wait), k, p, func(s algo.State, now int64) (algo.State, any, error) {
		s, res, err := algo.TokenBucket{}.Reserve(p, s, now, cost, wait)
		return s, res, err
	}, func(ctx context.Context) (any, error) {
		return m.e.s.Reserve(ctx, store.Request{Key: k.key, Policy: p, Cost: cost}, time.Duration(wait)*time.Microsecond)
	}).(algo.Reservation)
	if res.Ticket != (algo.Ticket{}) {
		k.ticket, k.tp = res.Ticket, p
	}
}

// Cancel cancels a key's last waiting reservation, under the policy it
// was made with (the key may have changed policy since).
func (m *changeModel) Cancel(t *rapid.T) {
	k := rapid.SampledFrom(m.keys).Draw(t, "key")
	if k.ticket == (algo.Ticket{}) {
		t.Skip("no reservation to cancel")
	}
	p, tk := k.tp, k.ticket
	m.step(t, fmt.Sprintf("CancelReservation(%+v)", tk), k, p, func(s algo.State, now int64) (algo.State, any, error) {
		s, back, res, err := algo.TokenBucket{}.Cancel(p, s, now, tk)
		return s, fmt.Sprint(back, res), err
	}, func(ctx context.Context) (any, error) {
		back, res, err := m.e.s.CancelReservation(ctx, k.key, p, tk)
		return fmt.Sprint(back, res), err
	})
}

// Multi takes from several keys at once, each under a drawn policy.
func (m *changeModel) Multi(t *rapid.T) {
	idx := rapid.SliceOfNDistinct(rapid.IntRange(0, len(m.keys)-1), 1, len(m.keys), rapid.ID[int]).Draw(t, "keys")
	reqs := make([]store.Request, len(idx))
	refs := make([]*ref, len(idx))
	all := make([]int, len(idx))
	for j, i := range idx {
		k, p := m.keys[i], rapid.SampledFrom(m.pols).Draw(t, "policy")
		reqs[j] = store.Request{Key: k.key, Policy: p, Cost: genCost(t, p)}
		refs[j], all[j] = &ref{p: p, s: m.convert(t, k, p)}, j
	}
	want, next := expectMulti(t, m.e, refs, all, reqs)
	got, err := m.e.s.TakeMulti(context.Background(), reqs)
	if err != nil {
		t.Fatalf("TakeMulti(%+v): %v", reqs, err)
	}
	if !sameMulti(got, want) {
		t.Fatalf("at +%v: TakeMulti(%+v) =\n%+v\nwant\n%+v", m.e.clk.Now().Sub(Start), reqs, got, want)
	}
	for j, i := range idx {
		k := m.keys[i]
		switch {
		case want.Allowed || !want.Results[j].Allowed: // charged, or denying: as a Take
			k.s = next[j]
		case k.p != reqs[j].Policy: // would admit, converted: kept converted
			k.s = refs[j].s
		}
		k.p = reqs[j].Policy
	}
}

// Advance moves the clock forwards: by a step of a drawn bucket, or for
// a quota to its period's end or beyond.
func (m *changeModel) Advance(t *rapid.T) {
	p := rapid.SampledFrom(m.pols).Draw(t, "step of")
	if p.IsQuota() {
		m.e.clk.Set(genQuotaStep(t, p, m.e.clk.Now()))
		return
	}
	m.e.clk.Add(genStep(t, p))
}

// tokenUS is how long one token of p takes to refill, in µs, rounded up.
func tokenUS(p algo.Policy) int64 { return (p.Unit() + p.Refill() - 1) / p.Refill() }

// Check has nothing to check between actions: each action compares its
// own answer.
func (m *changeModel) Check(*rapid.T) {}
