package algo_test

import (
	"math"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// TestBound pins the never-exceed law's bound: exact, floored, saturating,
// and absent for a quota.
func TestBound(t *testing.T) {
	p := algo.Per(3, 7*time.Millisecond).Burst(10)
	tests := []struct {
		name string
		p    algo.Policy
		d    time.Duration
		want int64
	}{
		{"zero length", p, 0, 10},
		{"negative length", p, -time.Second, 10},
		{"floored", p, 10 * time.Millisecond, 10 + 4},       // 30/7 = 4.28
		{"exact", p, 7 * time.Second, 10 + 3000},            // 3 per 7 ms
		{"sub-µs ignored", p, 7*time.Millisecond + 999, 13}, // whole µs
		{"largest", algo.PerSecond(algo.MaxPerSecond).Burst(1), math.MaxInt64, 1 + 1000*(math.MaxInt64/1000)}, // no overflow
		{"quota", algo.Quota(100, algo.Day, 0), time.Hour, math.MaxInt64},
		{"invalid", algo.Policy{}, time.Hour, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := tt.p.Bound(tt.d); got != tt.want {
			t.Errorf("%s: %v.Bound(%v) = %d want %d", tt.name, tt.p, tt.d, got, tt.want)
		}
	}
}

// TestRoom checks each algorithm's room against what a Take can see: a
// request of ⌊room⌋ tokens is admitted and one of ⌊room⌋+1 is not.
func TestRoom(t *testing.T) {
	p := algo.PerSecond(4).Burst(10)
	type roomer interface {
		algo.Algorithm
		Room(algo.Policy, algo.State, int64) (float64, error)
	}
	for _, a := range []roomer{algo.TokenBucket{}, algo.FixedWindow{}, algo.SlidingWindow{}} {
		var s algo.State
		now := int64(5_000_000)
		for step := range 40 {
			room, err := a.Room(p, s, now)
			if err != nil {
				t.Fatalf("%s: Room: %v", a.Name(), err)
			}
			if room < 0 || room > float64(p.Capacity()) {
				t.Fatalf("%s step %d: room %v outside [0, %d]", a.Name(), step, room, p.Capacity())
			}
			whole := int64(math.Floor(room))
			if _, res, _ := a.Take(p, s, now, whole); whole > 0 && !res.Allowed {
				t.Errorf("%s step %d: room %v but %d denied", a.Name(), step, room, whole)
			}
			if whole < p.Capacity() {
				if _, res, _ := a.Take(p, s, now, whole+1); res.Allowed {
					t.Errorf("%s step %d: room %v but %d admitted", a.Name(), step, room, whole+1)
				}
			}
			s, _, _ = a.Take(p, s, now, int64(step%4))
			now += int64(step%5) * 90_000
		}
		if _, err := a.Room(p, s, -1); err == nil {
			t.Errorf("%s: Room at -1 µs: no error", a.Name())
		}
	}
}

// TestBatchBound pins the token-lease bound: the cap is the fleet's share
// of min(C, ⌊rate·L⌋), and the bound adds what the fleet may hold to the
// law's, never more than Capacity + ⌊rate·(d+L)⌋.
func TestBatchBound(t *testing.T) {
	p := algo.PerSecond(1000).Burst(300) // rate·L = 100 at L = 100ms
	tests := []struct {
		name      string
		p         algo.Policy
		d, l      time.Duration
		n         int
		cap, want int64
	}{
		{"rate bound", p, time.Second, 100 * time.Millisecond, 3, 33, 300 + 1000 + 99},
		{"capacity bound", p, time.Second, time.Second, 3, 100, 300 + 1000 + 300},
		{"one instance", p, 0, 100 * time.Millisecond, 1, 100, 400},
		{"n below 1", p, 0, 100 * time.Millisecond, 0, 100, 400},
		{"too many to lease", p, 0, time.Millisecond, 2, 0, 300},
		{"quota", algo.Quota(100, algo.Day, 0), time.Hour, time.Second, 1, 0, math.MaxInt64},
		{"largest", algo.PerSecond(algo.MaxPerSecond).Burst(1), math.MaxInt64, time.Second, 1, 1, 2 + 1000*(math.MaxInt64/1000)}, // no overflow
	}
	for _, tt := range tests {
		if got := tt.p.BatchCap(tt.l, tt.n); got != tt.cap {
			t.Errorf("%s: BatchCap(%v, %d) = %d want %d", tt.name, tt.l, tt.n, got, tt.cap)
		}
		got := tt.p.BatchBound(tt.d, tt.l, tt.n)
		if got != tt.want {
			t.Errorf("%s: BatchBound(%v, %v, %d) = %d want %d", tt.name, tt.d, tt.l, tt.n, got, tt.want)
		}
		if whole := tt.p.Bound(tt.d + tt.l); tt.d < time.Hour && got > whole {
			t.Errorf("%s: bound %d exceeds Capacity + rate·(d+L) = %d", tt.name, got, whole)
		}
	}
}
