package sim

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/ratebucket/ratebucket/algo"
)

// Traffic models. Each client owns a generator that, given the answer to
// its last request, says when it sends the next and at what cost. All
// randomness is integer (uniform draws from a seeded PCG), so a run is the
// same bit for bit on every platform: no floating-point distributions.

// Time units in µs.
const (
	ms  = int64(1_000)
	sec = int64(1_000_000)
	mn  = 60 * sec
)

// req is one request: when (µs since the run began) and at what cost.
type req struct{ at, cost int64 }

// generator produces a client's requests one at a time. next is called
// first with res == nil; afterwards with the answer to the request just
// made at now. It returns ok false when the client is done.
type generator interface {
	next(r *rand.Rand, now int64, res *algo.Result) (q req, ok bool)
}

// between returns a uniform integer in [lo, hi] (lo when hi < lo).
func between(r *rand.Rand, lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + r.Int64N(hi-lo+1)
}

// byTime orders requests by time.
func byTime(a, b req) int { return cmp.Compare(a.at, b.at) }

// spread appends n requests of cost evenly spaced over [from, to].
func spread(dst []req, from, to, n, cost int64) []req {
	for k := range n {
		at := from
		if n > 1 && to > from {
			at += (to - from) * k / (n - 1)
		}
		dst = append(dst, req{at, cost})
	}
	return dst
}

// sessions emits planned sessions of requests separated by quiet gaps.
// Session starts come from their own random stream, so two generators
// seeded alike (the phone and the laptop of one person) share them.
type sessions struct {
	starts         *rand.Rand // nil: use the client's stream
	first          int64      // first session starts in [0, first]
	gapMin, gapMax int64      // from one session start to the next
	plan           func(r *rand.Rand, start int64) []req

	start int64
	begun bool
	buf   []req
	i     int
}

func (s *sessions) next(r *rand.Rand, now int64, _ *algo.Result) (req, bool) {
	src := s.starts
	if src == nil {
		src = r
	}
	for s.i >= len(s.buf) {
		if s.begun {
			s.start += between(src, s.gapMin, s.gapMax)
		} else {
			s.start, s.begun = between(src, 0, s.first), true
		}
		s.buf, s.i = s.plan(r, s.start), 0
	}
	q := s.buf[s.i]
	s.i++
	q.at = max(q.at, now)
	return q, true
}

// feedOpen is the article's mobile app: a burst of 12 requests to load the
// feed, then 3 refreshes of 12 at random moments within the next minute.
func feedOpen(r *rand.Rand, start int64) []req {
	q := spread(nil, start, start+11*80*ms, 12, 1)
	refresh := []int64{between(r, 5*sec, mn), between(r, 5*sec, mn), between(r, 5*sec, mn)}
	slices.Sort(refresh)
	for _, at := range refresh {
		q = spread(q, start+at, start+at+11*80*ms, 12, 1)
	}
	slices.SortFunc(q, byTime)
	return q
}

// webSession is the same person's browser on the same IP: 64 requests in
// 8 s, starting 20 to 45 s after the phone opened the feed.
func webSession(r *rand.Rand, start int64) []req {
	at := start + between(r, 20*sec, 45*sec)
	return spread(nil, at, at+63*125*ms, 64, 1)
}

// pageViews returns a plan of one page view: lo to hi requests of cost 1,
// 50 ms apart. With sessions' gaps as think time, it models browsing.
func pageViews(lo, hi int64) func(r *rand.Rand, start int64) []req {
	return func(r *rand.Rand, start int64) []req {
		n := between(r, lo, hi)
		return spread(nil, start, start+(n-1)*50*ms, n, 1)
	}
}

// uploadBatch is a user posting 10 photos (cost 10 each, 200 ms apart),
// then reading 20 cheap pages over the next minute.
func uploadBatch(r *rand.Rand, start int64) []req {
	q := spread(nil, start, start+9*200*ms, 10, 10)
	for range 20 {
		q = append(q, req{start + 2*sec + between(r, 0, mn), 1})
	}
	slices.SortFunc(q[10:], byTime)
	return q
}

// steady sends one request every period, from a random phase: a sensor.
type steady struct {
	period, at int64
	begun      bool
}

func (s *steady) next(r *rand.Rand, _ int64, _ *algo.Result) (req, bool) {
	if s.begun {
		s.at += s.period
	} else {
		s.at, s.begun = between(r, 0, s.period-1), true
	}
	return req{s.at, 1}, true
}

// flood sends requests with uniform gaps of mean `mean` µs (18,000 a minute
// is a mean of 3,333 µs), never slowing down when denied: an abuser.
type flood struct{ mean, at int64 }

func (f *flood) next(r *rand.Rand, _ int64, _ *algo.Result) (req, bool) {
	f.at += between(r, 1, 2*f.mean-1)
	return req{f.at, 1}, true
}

// spiker is the boundary-spike attacker. It probes with one request and
// reads ResetAfter (the X-RateLimit-Reset a real API sends) to learn when
// the current window ends. When the probe found a fresh window (all but
// one token left) it fires a full limit in the last half second before the
// end and another full limit in the half second after it, then probes
// again; otherwise it probes again just after the reset.
type spiker struct {
	capacity int64
	cost     int64 // Config.Cost, or 0: every request costs 1
	probing  bool
	probeAt  int64
	buf      []req
	i        int
}

// setCost tells the spiker every request costs c (Config.Cost): a full
// limit is then capacity/c requests, and a fresh window's probe leaves
// capacity-c.
func (s *spiker) setCost(c int64) { s.cost = c }

func (s *spiker) next(r *rand.Rand, now int64, res *algo.Result) (req, bool) {
	switch {
	case res == nil:
		s.probing = true
		return req{between(r, 0, 10*sec), 1}, true
	case s.probing:
		s.probing = false
		end := now + res.ResetAfter.Microseconds()
		s.buf, s.i = s.buf[:0], 0
		cost := max(s.cost, 1)
		if n := s.capacity / cost; res.Allowed && res.Remaining >= s.capacity-cost {
			s.buf = spread(s.buf, max(now+ms, end-500*ms), max(now+ms, end-10*ms), n, 1)
			s.buf = spread(s.buf, end+10*ms, end+500*ms, n, 1)
			s.probeAt = end + 600*ms
		} else {
			s.probeAt = end + sec
		}
	}
	if s.i < len(s.buf) {
		s.i++
		return s.buf[s.i-1], true
	}
	s.probing = true
	return req{max(s.probeAt, now), 1}, true
}
