package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// admission is one admitted request: when (since the run began) and its
// cost.
type admission struct {
	// At is the admission's offset from the start of the run.
	At time.Duration
	// Cost is the tokens it took.
	Cost int64
}

// Law is the outcome of checking the never-exceed law on one bucket's
// admissions: in every interval [From, To] of the run,
//
//	admitted ≤ Capacity + ⌊rate·(To − From + Slack)⌋
//
// A token bucket obeys it exactly with Slack 0 when its store is shared
// and keeps one clock; a fixed window breaks it at its boundaries (up to
// twice the limit in a moment), and so do per-instance stores (N times the
// limit). Clock skew between instances that send their own time lets a
// shared bucket refill early by up to the spread of the skews, which is why
// the simulator checks skewed runs with that spread as Slack.
//
// When the law holds, the fields describe the tightest interval (the one
// closest to the bound); when it is broken, the worst violation.
type Law struct {
	// Holds reports whether no interval exceeds the bound.
	Holds bool `json:"holds"`
	// Key is the bucket of the reported interval.
	Key string `json:"key"`
	// From and To bound the interval, as offsets from the run's start.
	From time.Duration `json:"from"`
	To   time.Duration `json:"to"`
	// Admitted is the cost admitted in [From, To].
	Admitted int64 `json:"admitted"`
	// Bound is Capacity + ⌊rate·(To − From + Slack)⌋.
	Bound int64 `json:"bound"`
	// Slack is the allowance added to every interval's length.
	Slack time.Duration `json:"slack"`

	excess float64 // (Admitted − Bound)/Capacity, to compare keys
}

// String describes the law's outcome in one line.
func (l Law) String() string {
	verdict := "holds"
	if !l.Holds {
		verdict = "BROKEN"
	}
	at := ""
	if l.Key != "" {
		at = " at " + l.Key
	}
	return fmt.Sprintf("%s: %d admitted in [%v, %v]%s, bound %d", verdict, l.Admitted, ms3(l.From), ms3(l.To), at, l.Bound)
}

// checkLaw checks the never-exceed law for the admissions of one bucket
// under policy p, over every interval between two admissions, in time
// linear in their number (plus a sort when they are not in time order). With a
// prefix sum S over admissions in time order, the law for [t_i, t_j] is
// (S_j − S_(i−1) − C)·Unit ≤ Refill·(t_j − t_i + slack), so it suffices to
// track, for each j, the smallest S_(i−1)·Unit − Refill·t_i seen so far. All
// arithmetic is exact integers; checkLaw reports an error wrapping
// [ErrInvalidConfig] when the run is too long or admits too much for it.
func checkLaw(p algo.Policy, adm []admission, slack time.Duration) (Law, error) {
	if err := p.Validate(); err != nil {
		return Law{}, err
	}
	if !slices.IsSortedFunc(adm, byAt) {
		adm = slices.SortedFunc(slices.Values(adm), byAt)
	}
	law := Law{Holds: true, Slack: slack, excess: math.Inf(-1)}
	if len(adm) == 0 {
		return law, nil
	}
	u, r, c := p.Unit(), p.Refill(), p.Capacity()
	var total int64
	for _, a := range adm {
		total += a.Cost
	}
	span := (adm[len(adm)-1].At + slack).Microseconds()
	const lim = math.MaxInt64 / 4
	if total > lim/u || span > lim/r || adm[0].At < 0 || slack < 0 {
		return law, fmt.Errorf("%w: %d admitted over %v is too much to check exactly", ErrInvalidConfig, total, span)
	}
	best := int64(math.MinInt64)
	var bi, bj int
	var sum int64 // S_(j-1), then S_j
	var low int64 // min over i ≤ j of S_(i-1)·u − r·t_i
	var lowAt int // its i
	for j, a := range adm {
		t := a.At.Microseconds()
		if v := sum*u - r*t; j == 0 || v < low {
			low, lowAt = v, j
		}
		sum += a.Cost
		if v := sum*u - r*t - low; v > best {
			best, bi, bj = v, lowAt, j
		}
	}
	from, to := adm[bi].At, adm[bj].At
	var got int64
	for _, a := range adm[bi : bj+1] {
		got += a.Cost
	}
	law.From, law.To, law.Admitted = from, to, got
	law.Bound = p.Bound(to - from + slack)
	law.Holds = law.Admitted <= law.Bound
	law.excess = float64(law.Admitted-law.Bound) / float64(c)
	return law, nil
}

func byAt(a, b admission) int { return cmp.Compare(a.At, b.At) }

// Window is the most a bucket admitted in any interval of length Width,
// next to the law's bound for that length.
type Window struct {
	// Width is the interval length: 1 s, 10 s or 60 s in reports.
	Width time.Duration `json:"width"`
	// Key is the bucket where Peak/Bound is highest.
	Key string `json:"key"`
	// From is where that interval starts, as an offset from the run's
	// start.
	From time.Duration `json:"from"`
	// Peak is the cost admitted in [From, From+Width].
	Peak int64 `json:"peak"`
	// Bound is Capacity + ⌊rate·Width⌋.
	Bound int64 `json:"bound"`
}

// peakIn returns the most cost admitted in any closed interval of length w
// (an exact sliding maximum over the admissions, in time order), with the
// start of the first such interval.
func peakIn(adm []admission, w time.Duration) (peak int64, from time.Duration) {
	if !slices.IsSortedFunc(adm, byAt) {
		adm = slices.SortedFunc(slices.Values(adm), byAt)
	}
	var sum int64
	j := 0
	for i, a := range adm {
		for j < len(adm) && adm[j].At <= a.At+w {
			sum += adm[j].Cost
			j++
		}
		if sum > peak {
			peak, from = sum, a.At
		}
		sum -= adm[i].Cost
	}
	return peak, from
}
