package algo

import "testing"

// TestTakeToOverwrites pins TakeTo's contract for callers that reuse one
// Result: every field is written on success, and the Result is zeroed on
// error, so nothing from an earlier call leaks into the next answer.
func TestTakeToOverwrites(t *testing.T) {
	p := PerSecond(2).Burst(10)
	stale := Result{Allowed: true, Remaining: 99, RetryAfter: 99, ResetAfter: 99}
	cases := []struct {
		name    string
		s       State
		cost    int64
		want    Result
		wantErr error
	}{
		{"admitted from full", State{}, 1, Result{Allowed: true, Remaining: 9, ResetAfter: 500_000_000}, nil},
		{"denied when empty", State{Level: 10 * p.Unit(), Stamp: 1}, 1, Result{RetryAfter: 500_000_000, ResetAfter: 5_000_000_000}, nil},
		{"peek at full", State{}, 0, Result{Allowed: true, Remaining: 10}, nil},
		{"cost above capacity", State{}, 11, Result{}, ErrCostExceedsCapacity},
		{"negative cost", State{}, -1, Result{}, ErrInvalidCost},
	}
	for _, c := range cases {
		res := stale
		_, err := TokenBucket{}.TakeTo(&res, p, c.s, 1, c.cost)
		if err != c.wantErr {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.wantErr)
		}
		if res != c.want {
			t.Errorf("%s: TakeTo wrote %+v, want %+v", c.name, res, c.want)
		}
		_, viaTake, _ := TokenBucket{}.Take(p, c.s, 1, c.cost)
		if viaTake != res {
			t.Errorf("%s: Take = %+v, TakeTo = %+v", c.name, viaTake, res)
		}
	}
}
