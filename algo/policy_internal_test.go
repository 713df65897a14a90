package algo

import (
	"errors"
	"math"
	"testing"
)

// TestValidateNotBuilt reaches the one Validate path users cannot: a
// capacity in bounds but no rate, as in a Policy built without Rate.Burst.
// Take must refuse it rather than divide by zero.
func TestValidateNotBuilt(t *testing.T) {
	p := mkPolicy(5, 0, 0)
	if err := p.Validate(); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Validate() = %v want ErrInvalidPolicy", err)
	}
	for _, a := range []Algorithm{TokenBucket{}, FixedWindow{}, SlidingWindow{}} {
		if _, res, err := a.Take(p, State{}, 1, 1); !errors.Is(err, ErrInvalidPolicy) || res.Allowed {
			t.Errorf("%s.Take = %+v, %v want ErrInvalidPolicy", a.Name(), res, err)
		}
		if got := a.IdleAt(p, State{Level: 3, Stamp: 7}); got != 7 {
			t.Errorf("%s.IdleAt = %d want the stamp 7", a.Name(), got)
		}
	}
	if p.FillTime() != 0 {
		t.Errorf("FillTime() = %v want 0", p.FillTime())
	}
}

// TestMulDiv pins the 128-bit helpers at the sizes the window math reaches
// (capacity·W up to 2^40·2^52).
func TestMulDiv(t *testing.T) {
	const big = 1 << 52
	tests := []struct {
		name           string
		a, b, c, limit int64
		floor, ceil    int64
		ceilOK         bool // b ≤ c, so the ceiling fits
	}{
		{"small exact", 6, 2, 3, 100, 4, 4, true},
		{"small rounded", 7, 3, 4, 100, 5, 6, true},
		{"limited", 7, 4, 3, 5, 5, 0, false},
		{"128-bit product", MaxCapacity, big - 1, big, MaxCapacity, MaxCapacity - 1, MaxCapacity, true},
		{"quotient above 64 bits", MaxCapacity, big, 1, big, big, 0, false},
		{"zero", 0, big, big, 9, 0, 0, true},
	}
	for _, tt := range tests {
		if got := mulDiv(tt.a, tt.b, tt.c, false, tt.limit); got != tt.floor {
			t.Errorf("%s: mulDiv(%d, %d, %d, floor, %d) = %d want %d", tt.name, tt.a, tt.b, tt.c, tt.limit, got, tt.floor)
		}
		if tt.ceilOK {
			if got := mulDiv(tt.a, tt.b, tt.c, true, math.MaxInt64); got != tt.ceil {
				t.Errorf("%s: mulDiv(%d, %d, %d, ceil) = %d want %d", tt.name, tt.a, tt.b, tt.c, got, tt.ceil)
			}
		}
	}
}
