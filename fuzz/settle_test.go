package fuzz

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// settleProp runs random holds and settles, good and bad, on one bucket:
// a bad settle (a negative or overflowing actual cost, another policy, a
// forged hold, past the deadline) is its sentinel and changes nothing; the
// deficit never passes two full buckets; and the cost charged in every
// interval stays within algo.Policy.SettleBound.
func settleProp(t *rapid.T) {
	p := drawPolicy(t)
	other := algo.Per(p.Rate().Tokens, p.Rate().Period).Burst(p.Capacity()%1000 + 1) // another valid policy
	tb, full := algo.TokenBucket{}, p.Capacity()*p.Unit()
	var s algo.State
	var holds []algo.Hold
	type charge struct{ at, cost int64 }
	var ledger []charge
	now := rapid.Int64Range(0, 1<<50).Draw(t, "start")
	for range rapid.IntRange(5, 60).Draw(t, "steps") {
		now += rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 2*p.FillTime().Microseconds())).Draw(t, "advance µs")
		if len(holds) == 0 || rapid.Bool().Draw(t, "hold") {
			est := rapid.Int64Range(0, p.Capacity()).Draw(t, "estimate")
			ns, h, r, err := tb.Hold(p, s, now, est, rapid.Int64Range(1, min(3*p.FillTime().Microseconds()+1, algo.MaxHoldTTL.Microseconds())).Draw(t, "ttl"))
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			if r.Allowed {
				holds, ledger = append(holds, h), append(ledger, charge{ns.Stamp, est})
			}
			s = ns
			continue
		}
		h := holds[rapid.IntRange(0, len(holds)-1).Draw(t, "which")]
		actual := rapid.Int64Range(-1, 3*p.Capacity()).Draw(t, "actual")
		pol, bad := p, error(nil)
		switch rapid.IntRange(0, 5).Draw(t, "kind") {
		case 0:
			pol, bad = other, algo.ErrHoldPolicy
		case 1:
			h.Estimate, bad = p.Capacity()+1, algo.ErrInvalidHold
		case 2:
			actual, bad = algo.MaxCapacity+1, algo.ErrInvalidCost
		}
		if actual < 0 && bad == nil { // (algo checks the hold and policy first)
			bad = algo.ErrInvalidCost
		}
		if bad == nil && max(now, s.Stamp) > h.Deadline {
			bad = algo.ErrHoldExpired
		}
		ns, st, err := tb.Settle(pol, s, now, h, actual)
		if bad != nil {
			if !errors.Is(err, bad) || ns != s {
				t.Fatalf("bad settle: err %v, want %v; state %+v → %+v", err, bad, s, ns)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Settle: %v", err)
		}
		if ns.Level > 2*full {
			t.Fatalf("deficit %d above two full buckets %d", ns.Level, 2*full)
		}
		ledger = append(ledger, charge{ns.Stamp, actual - h.Estimate - st.Uncharged})
		s = ns
	}
	for i := range ledger {
		var sum int64
		for _, c := range ledger[i:] {
			sum += c.cost
			if d := time.Duration(c.at-ledger[i].at) * time.Microsecond; sum > p.SettleBound(d) {
				t.Fatalf("%d charged in %v, SettleBound %d", sum, d, p.SettleBound(d))
			}
		}
	}
}

// FuzzSettle runs random holds and settles, good and bad.
func FuzzSettle(f *testing.F) { f.Fuzz(rapid.MakeFuzz(settleProp)) }

// TestSettle runs the same property under rapid's own generator.
func TestSettle(t *testing.T) { rapid.Check(t, settleProp) }
