package algo_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

// TestShare: the scaled policy is valid, its capacity is ⌊C/n⌋ but at
// least 1, and n instances refill at most the whole rate.
func TestShare(t *testing.T) {
	tests := []struct {
		name string
		p    algo.Policy
		n    int
		want algo.Policy
	}{
		{"article", algo.PerSecond(2).Burst(100), 4, algo.Per(2, 4*time.Second).Burst(25)},
		{"tokens divide", algo.PerSecond(6).Burst(10), 3, algo.PerSecond(2).Burst(3)},
		{"capacity floor 1", algo.PerMinute(1).Burst(2), 5, algo.Per(1, 5*time.Minute).Burst(1)},
		{"one instance", algo.PerSecond(2).Burst(100), 1, algo.PerSecond(2).Burst(100)},
		{"long period, in lowest terms", algo.Per(3, algo.MaxPeriod).Burst(10), 2, algo.Per(1, algo.MaxPeriod*2/3).Burst(5)},
		{"period too long", algo.Per(1, algo.MaxPeriod).Burst(10), 2, algo.Per(1, algo.MaxPeriod).Burst(5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Share(tc.n); got != tc.want {
				t.Fatalf("Share(%v, %d) = %v, want %v", tc.p, tc.n, got, tc.want)
			}
		})
	}
	rapid.Check(t, func(t *rapid.T) {
		p := algo.Per(rapid.Int64Range(1, 1000).Draw(t, "tokens"), time.Duration(rapid.Int64Range(1, 1e9).Draw(t, "period µs"))*time.Microsecond).
			Burst(rapid.Int64Range(1, 1e6).Draw(t, "capacity"))
		if p.Validate() != nil {
			t.Skip("invalid policy")
		}
		n := rapid.IntRange(1, 100).Draw(t, "n")
		q := p.Share(n)
		if err := q.Validate(); err != nil {
			t.Fatalf("Share(%v, %d) = %v: %v", p, n, q, err)
		}
		if q.Capacity() != max(1, p.Capacity()/int64(n)) {
			t.Fatalf("capacity %d", q.Capacity())
		}
		// rate q ≤ rate p / n, i.e. qT·pP·n ≤ pT·qP (within int64 here)
		qr, pr := q.Rate(), p.Rate()
		if q != p && float64(qr.Tokens)*float64(pr.Period)*float64(n) > float64(pr.Tokens)*float64(qr.Period)*1.000001 {
			t.Fatalf("Share(%v, %d) = %v refills faster than 1/n", p, n, q)
		}
	})
}
