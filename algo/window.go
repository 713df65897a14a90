package algo

// FixedWindow is the naive window counter, kept to show why the token bucket
// wins. Its zero value is ready to use; it has no fields.
//
// Time is cut into windows of W = [Policy.FillTime] (capacity/rate, rounded
// up to the µs), aligned to multiples of W since the epoch. Each window admits
// up to Capacity tokens' worth of requests; the count resets to zero at the
// next boundary. W and the limit are chosen so that all three algorithms have
// the same burst and the same long-run rate, and can be compared fairly.
//
// State: Level is the count admitted in the current window, Stamp the
// window's start; Prev is unused (always zero).
//
// How it fails: the boundary spike. A client that spends the whole limit in
// the last microsecond of one window and again in the first microsecond of
// the next gets 2×Capacity in two microseconds, which breaks the
// never-exceed law Capacity + rate·t that [TokenBucket] keeps. It also
// denies an honest client for the rest of a window after one burst, however
// long the window.
type FixedWindow struct{}

// SlidingWindow is the weighted two-window counter popularised by
// Cloudflare, kept to compare with the token bucket. Its zero value is ready
// to use; it has no fields.
//
// Windows are those of [FixedWindow]. At elapsed time e into the current
// window, the number of tokens spent "in the last W" is estimated as
//
//	estimate = prev·(W−e)/W + curr
//
// where prev and curr are the counts of the previous and current windows,
// and a request of cost n is admitted when estimate + n ≤ Capacity. The
// comparison is done exactly in integers: no rounding in the caller's favour.
//
// State: Level is curr, Prev is prev, Stamp is the current window's start.
//
// How it fails: it approximates. The estimate assumes the previous window's
// requests were spread evenly over it. When they were bunched at its start,
// the estimate overcounts and denies a client that a true sliding log would
// admit; when they were bunched at its end, it undercounts and admits what
// the log would deny. It keeps the never-exceed law (at most
// Capacity + rate·t in any interval of length t), so there is no boundary
// spike, but below that bound what it admits depends on where, inside past
// windows, earlier requests fell: a client cannot predict it from its own
// recent rate as it can with a bucket. Its state is also half again the
// size of the token bucket's.
type SlidingWindow struct{}

var (
	_ Algorithm = FixedWindow{}
	_ Algorithm = SlidingWindow{}
)

// Name returns "fixedwindow".
func (FixedWindow) Name() string { return "fixedwindow" }

// Name returns "slidingwindow".
func (SlidingWindow) Name() string { return "slidingwindow" }

// Take applies a request of cost tokens at time now (µs) to the window in
// state s under policy p. A clock behind the stored window is evaluated in
// the stored window: it never opens a new one.
func (FixedWindow) Take(p Policy, s State, now, cost int64) (State, Result, error) {
	if err := checkTake(p, s, now, cost); err != nil {
		return s, Result{}, err
	}
	w, limit := p.window(), p.shape().capacity
	f := roll(s, now, w, limit)
	var res Result
	if f.curr+cost <= limit {
		res.Allowed = true
		f.curr += cost
	} else {
		// The count only resets at the next boundary, where cost ≤ limit
		// is admitted; until then the count stays above limit−cost.
		res.RetryAfter = Micros(f.start + w - now)
	}
	res.Remaining = limit - f.curr
	if f.curr > 0 {
		res.ResetAfter = Micros(f.start + w - now)
	}
	return State{Level: f.curr, Stamp: f.stamp}, res, nil
}

// IdleAt returns the end of the window in state s, or its stamp when the
// window is empty.
func (FixedWindow) IdleAt(p Policy, s State) int64 {
	if p.shape().unit <= 0 || s.Level <= 0 {
		return s.Stamp
	}
	w := p.window()
	return s.Stamp - s.Stamp%w + w
}

// Take applies a request of cost tokens at time now (µs) to the windows in
// state s under policy p.
//
// With q = ⌈prev·(W−e)/W⌉, the tokens available are avail = Capacity − curr
// − q, and the request is admitted when cost ≤ avail: this is exactly
// prev·(W−e) + (curr+cost)·W ≤ Capacity·W, so the estimate is not rounded.
// The products reach Capacity·W ≤ 2^40·2^52, so they are formed in 128 bits
// (math/bits). A denied request can be admitted later in this window, once
// prev's weight has shrunk (curr+cost ≤ Capacity), or else in the next one,
// where prev is today's curr: RetryAfter is the first microsecond at which
// the inequality holds, solved in integers.
//
// A clock behind the stored window is evaluated at the window's start,
// where prev weighs most: an old clock never gets more than a current one.
func (SlidingWindow) Take(p Policy, s State, now, cost int64) (State, Result, error) {
	if err := checkTake(p, s, now, cost); err != nil {
		return s, Result{}, err
	}
	w, limit := p.window(), p.shape().capacity
	f := roll(s, now, w, limit)
	avail := limit - f.curr - mulDiv(f.prev, w-f.elapsed, w, true, limit)
	var res Result
	if cost == 0 || cost <= avail {
		res.Allowed = true
		f.curr += cost
		avail -= cost
	} else {
		res.RetryAfter = Micros(f.slidingRetry(limit, cost, w) - now)
	}
	res.Remaining = max(avail, 0)
	switch {
	case f.curr > 0: // curr becomes prev, whose weight ends a window later
		res.ResetAfter = Micros(f.start + 2*w - now)
	case f.prev > 0:
		res.ResetAfter = Micros(f.start + w - now)
	}
	return State{Level: f.curr, Prev: f.prev, Stamp: f.stamp}, res, nil
}

// IdleAt returns when neither window of s weighs anything any more: the end
// of the next window when the current one has a count, the end of the
// current one when only the previous one has, else the stamp.
func (SlidingWindow) IdleAt(p Policy, s State) int64 {
	if p.shape().unit <= 0 {
		return s.Stamp
	}
	w := p.window()
	start := s.Stamp - s.Stamp%w
	switch {
	case s.Level > 0:
		return start + 2*w
	case s.Prev > 0:
		return start + w
	}
	return s.Stamp
}

// window returns the window length W in µs: the fill time,
// ⌈Capacity·Unit/Refill⌉, at most 2^52. p must be valid.
func (p Policy) window() int64 {
	ps := p.shape()
	return ceilDiv(ps.capacity*ps.unit, ps.refill)
}

// frame is a window state evaluated at a time.
type frame struct {
	start   int64 // start of the current window, a multiple of W
	stamp   int64 // the Stamp to store: start, or the stored stamp
	elapsed int64 // µs into the current window, in [0, W)
	curr    int64 // count of the current window, ≤ limit
	prev    int64 // count of the previous window, ≤ limit
}

// roll moves state s to the window containing now. The stored window is the
// one containing s.Stamp (stamps are multiples of W unless the policy
// changed). A now before the stored window stays in it, at elapsed 0, so a
// stale clock neither opens a new window nor moves the stamp back. Counts
// above limit (the policy shrank) are read as limit: a full window.
func roll(s State, now, w, limit int64) frame {
	start := s.Stamp - s.Stamp%w
	curr, prev := min(s.Level, limit), min(s.Prev, limit)
	switch {
	case now < start+w:
		return frame{start: start, stamp: s.Stamp, elapsed: max(now-start, 0), curr: curr, prev: prev}
	case now < start+2*w:
		return frame{start: start + w, stamp: start + w, elapsed: now - start - w, prev: curr}
	}
	start = now - now%w
	return frame{start: start, stamp: start, elapsed: now - start}
}

// slidingRetry returns the earliest time at which a request of cost, denied
// in frame f, is admitted if nothing else happens. The caller guarantees
// cost ≤ limit and that the request was denied at f.elapsed.
func (f frame) slidingRetry(limit, cost, w int64) int64 {
	if f.curr+cost <= limit {
		// Admitted once prev·(W−e) ≤ k·W with k = limit−curr−cost ≥ 0,
		// that is e ≥ W − ⌊k·W/prev⌋; prev > 0, or it was not denied.
		// At e = W the next window starts with prev = curr, which admits.
		return f.start + w - mulDiv(limit-f.curr-cost, w, f.prev, false, w)
	}
	// Not in this window. In the next, prev = curr > limit−cost ≥ 0, and
	// it admits once curr·(W−e) ≤ (limit−cost)·W; at e = W (two windows
	// on) both counts are gone.
	return f.start + 2*w - mulDiv(limit-cost, w, f.curr, false, w)
}
