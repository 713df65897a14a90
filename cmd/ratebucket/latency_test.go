package main

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestHistogramQuantile checks every quantile the CLI prints against the
// exact value from a sorted copy: within the bucket width (1/128).
func TestHistogramQuantile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOfN(rapid.Int64Range(0, int64(10*time.Second)), 1, 500).Draw(t, "vals")
		var h histogram
		for _, v := range vals {
			h.record(time.Duration(v))
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
			rank := max(1, int(float64(len(vals))*q+0.999999999))
			exact := vals[min(rank, len(vals))-1]
			got := int64(h.quantile(q))
			if diff := got - exact; diff < -exact/128-1 || diff > exact/128+1 {
				t.Fatalf("quantile(%v) = %d, exact %d: off by more than 1/128", q, got, exact)
			}
		}
		if h.count() != uint64(len(vals)) {
			t.Fatalf("count = %d, want %d", h.count(), len(vals))
		}
	})
}

func TestHistogramBuckets(t *testing.T) {
	// Every value falls in a bucket whose range contains it, and buckets
	// are contiguous and increasing up to the largest int64.
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.Int64Min(0).Draw(t, "v")
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d out of [0, %d)", v, i, histBuckets)
		}
		lo, hi := histRange(i)
		if v < lo || v > hi {
			t.Fatalf("%d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
	})
	for i := 1; i < histBuckets; i++ {
		_, prevHi := histRange(i - 1)
		lo, _ := histRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, lo, prevHi)
		}
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		all.record(d)
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	a.merge(&b)
	if a != all {
		t.Fatalf("merged histogram differs: p50 %v vs %v, n %d vs %d", a.quantile(.5), all.quantile(.5), a.n, all.n)
	}
	var empty histogram
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Fatal("empty histogram reports a value")
	}
}

func TestFmtDur(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want string
	}{
		{"nanoseconds", 850, "850ns"},
		{"microseconds", 12345, "12.3µs"},
		{"hundreds of µs", 123456, "123µs"},
		{"milliseconds", 4_560_000, "4.56ms"},
		{"seconds", 1_200_000_000, "1.20s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmtDur(tt.in); got != tt.want {
				t.Fatalf("fmtDur(%d) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
