package main

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// histogram records durations in log-linear buckets, as HdrHistogram does:
// exact below 128ns, then 64 buckets per power of two, so a reported
// quantile is within 1/128 (0.8%) of a recorded value. It takes constant
// memory however many values it records, which a benchmark of millions of
// calls needs. The zero value is empty and ready; it is not safe for
// simultaneous use: give each goroutine its own and merge them.
type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	min, max time.Duration
	sum      time.Duration
}

const (
	histSub     = 7 // values below 2^histSub are exact
	histHalf    = 1 << (histSub - 1)
	histBuckets = (63-histSub)*histHalf + 1<<histSub
)

// histIndex returns the bucket of v ≥ 0.
func histIndex(v int64) int {
	if v < 1<<histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - histSub
	return shift*histHalf + int(v>>shift)
}

// histRange returns the smallest and largest value of bucket i.
func histRange(i int) (lo, hi int64) {
	if i < 1<<histSub {
		return int64(i), int64(i)
	}
	shift := i/histHalf - 1
	m := int64(i - shift*histHalf)
	return m << shift, (m+1)<<shift - 1
}

// record adds one duration; negative ones count as zero.
func (h *histogram) record(d time.Duration) {
	d = max(d, 0)
	h.counts[histIndex(int64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
	h.sum += d
}

// merge adds all of o's values to h.
func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// count returns how many values were recorded.
func (h *histogram) count() uint64 { return h.n }

// mean returns the average, or 0 when empty.
func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// quantile returns the value at quantile q in [0, 1]: the smallest recorded
// value v such that at least q of the values are ≤ v, to within the bucket
// width (the bucket's midpoint, clamped to the recorded min and max). It
// returns 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, hi := histRange(i)
			mid := time.Duration(lo + (hi-lo)/2)
			return min(max(mid, h.min), h.max)
		}
	}
	return h.max
}

// fmtDur formats a latency for a table: 3 significant digits and a unit
// chosen for the size (850ns, 12.3µs, 4.56ms, 1.20s).
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + "µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + "ms"
	default:
		return sig3(d.Seconds()) + "s"
	}
}

// sig3 formats x ≥ 0 with three significant digits.
func sig3(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}
