package sim

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Timeline follows one bucket, the scenario's focus key, through a run,
// request by request: the drawing data of [Timeline.WriteSVG] and of the
// playground's JSON API, computed once, here, from the algorithm's own
// state. Times are offsets from the start of the run; its JSON form has
// durations in nanoseconds.
//
// The level is exact: every Take at the key is replayed on a shadow of
// the store's state (the algorithm is a pure function, so the shadow and
// the store agree bit for bit; [Timeline.Exact] says whether they did), and
// the level is read off the shadow at every breakpoint. Between two
// consecutive points of a [Level] the level is the straight line joining
// them.
type Timeline struct {
	// Title names the run.
	Title string `json:"title"`
	// Key is the bucket followed.
	Key string `json:"key"`
	// Algorithm is the algorithm's Name.
	Algorithm string `json:"algorithm"`
	// Policy is the key's policy; Capacity and Rate spell it out for JSON.
	Policy   algo.Policy `json:"-"`
	Capacity int64       `json:"capacity"`
	Rate     string      `json:"rate"`
	// Duration is the virtual time the run covered.
	Duration time.Duration `json:"duration"`
	// Clients names the clients that sent requests to Key, such as
	// "attacker 0"; [Request.Client] indexes it.
	Clients []string `json:"clients"`
	// Requests is every request made at Key, in time order.
	Requests []Request `json:"requests"`
	// Admitted and Denied count Requests.
	Admitted int64 `json:"admitted"`
	Denied   int64 `json:"denied"`
	// Levels holds the room left in Key's bucket over the whole run: one
	// Level for a shared store, one per instance that saw Key when each
	// keeps its own. A [Leased] run has the shared store's, drawn from the
	// batches taken from it and given back, and then one per instance
	// that leased Key: the tokens left in its batch. Room is what a request could take at that instant:
	// the tokens in a token bucket, capacity minus the count of a fixed
	// window, capacity minus the weighted estimate of a sliding window.
	Levels []Level `json:"levels"`
	// Exact reports whether the shadow agreed with the store on every
	// request. It is false only when a Config.Wrap wrapper answered some
	// requests itself; Levels is then empty.
	Exact bool `json:"exact"`
	// Window is the window length of a windowed algorithm (the policy's
	// fill time), zero for the token bucket. WindowStart is the first
	// window boundary at or after the run's start: windows are aligned to
	// multiples of Window since the Unix epoch, on the run's clock (an
	// instance's own store with a skewed clock has its own: see
	// [Level.WindowStart]).
	Window      time.Duration `json:"window,omitempty"`
	WindowStart time.Duration `json:"window_start,omitempty"`
	// Windows lists each window of the run with the cost admitted at Key
	// in it (by request time), when there are at most 5000.
	Windows []Interval `json:"windows,omitempty"`
	// Law is the never-exceed law checked on Key's admissions: the worst
	// interval when broken, the tightest when it holds.
	Law Law `json:"law"`
	// Peaks is the most admitted at Key in any interval of each width,
	// from 1 ms up to the run's length in steps of 1, 2 and 5, with its
	// bound capacity + rate·(width + the law's slack): the law as a curve.
	Peaks []Window `json:"peaks"`
	// Zoom is the span worth a closer look: Law's interval with a margin
	// of half its length, at least 500 ms, on either side.
	Zoom Interval `json:"zoom"`
	// Instant reports that the run is about an instant, so a chart should
	// zoom on Zoom: the scenario is (the boundary spike), or the law
	// breaks in an interval shorter than a twentieth of the run.
	Instant bool `json:"instant"`
}

// Request is one request at the followed key.
type Request struct {
	// At is when it was made, as an offset from the run's start.
	At time.Duration `json:"at"`
	// Client indexes [Timeline.Clients]; Instance is the app instance the
	// load balancer sent it to.
	Client   int `json:"client"`
	Instance int `json:"instance"`
	// Cost is the tokens it asked for.
	Cost int64 `json:"cost"`
	// Allowed, RetryAfter and Remaining are the store's answer.
	Allowed    bool          `json:"allowed"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	Remaining  int64         `json:"remaining"`
}

// Level is the room left in one store's bucket for the key, as a
// piecewise-linear function of time: a point at the run's start, two at
// every request (just before and just after it), one where the refill
// reaches capacity, two at every window boundary it crosses (the last µs
// of the old window and the first of the new), and one at the run's end.
type Level struct {
	// Instance is the instance whose own store (or, in a [Leased] run,
	// whose batch) this is, or -1 for the shared store.
	Instance int `json:"instance"`
	// Points are in time order. A shared store with skewed clocks is
	// drawn on the clock of the caller that set each point (the time the
	// store saw); a per-instance store on the run's time.
	Points []Point `json:"points"`
	// Skew is the offset of the instance's clock (zero for the shared
	// store).
	Skew time.Duration `json:"skew"`
	// WindowStart is, for a windowed algorithm, this store's first window
	// boundary at or after the run's start, on the time its Points are
	// drawn on; its boundaries follow every [Timeline.Window]. The shared
	// store's are the Timeline's WindowStart; an instance's own store cuts
	// windows on its own clock, so with a skew its boundaries fall Skew
	// earlier on the run's time (modulo Window). Zero for the token bucket.
	WindowStart time.Duration `json:"window_start"`
}

// Point is the room left at one instant, in tokens (fractional for a
// token bucket that is refilling, or a sliding window's weighted count).
type Point struct {
	At     time.Duration `json:"at"`
	Tokens float64       `json:"tokens"`
}

// Interval is a span of the run and the cost admitted at the key in it
// (From included, To excluded).
type Interval struct {
	From     time.Duration `json:"from"`
	To       time.Duration `json:"to"`
	Admitted int64         `json:"admitted"`
}

// maxWindows is the most windows Timeline.Windows lists; a run cut into
// more (a tiny window over a long run) lists none, and a chart draws the
// boundaries from Window and WindowStart.
const maxWindows = 5000

// replayer is an op whose effect on a bucket the tracer replays itself (a
// hold and its settlement), instead of a Take of the request's cost.
type replayer interface {
	replay(alg algo.Algorithm, p algo.Policy, s algo.State, now int64, e event) (algo.State, algo.Result, error)
}

// tracer replays the followed key's requests on a shadow of each store's
// state and keeps what the Timeline needs.
type tracer struct {
	alg      algo.Algorithm
	p        algo.Policy
	window   int64   // µs, 0 for the token bucket
	start    int64   // the run's start in µs since the epoch
	skews    []int64 // µs, per instance
	shared   bool
	exact    bool
	clients  map[*client]int
	names    []string
	requests []Request
	stores   map[int]*shadow // by store: 0 when shared, else the instance
	// In a Leased run: the key followed, each instance's batch of it, and
	// whether the request being served called the shared store's Take.
	key     string
	layout  layout // its bound is the law's
	leased  bool
	batches map[int]*batch
	direct  bool
}

// batch is the tokens an instance holds in its leased batch of the key,
// as Level points on the run's time.
type batch struct {
	left int64
	pts  []Point
}

// move changes b by n tokens at µs at since the run's start.
func (b *batch) move(at, n int64) {
	if len(b.pts) == 0 {
		b.pts = append(b.pts, Point{})
	}
	if p := (Point{At: dur(at), Tokens: float64(b.left)}); b.pts[len(b.pts)-1] != p {
		b.pts = append(b.pts, p)
	}
	b.left += n
	b.pts = append(b.pts, Point{At: dur(at), Tokens: float64(b.left)})
}

// shadow is one store's state for the key and the takes it saw.
type shadow struct {
	s     algo.State
	takes []take
}

// take is one request as a store saw it: when (µs since the epoch, on the
// caller's clock), the room just before and after, and the state after.
type take struct {
	at            int64
	before, after float64
	s             algo.State
}

func newTracer(l layout, p algo.Policy) *tracer {
	t := &tracer{alg: l.alg, p: p, start: runStart.UnixMicro(), skews: l.skews, shared: l.topology != PerInstance,
		exact: true, clients: map[*client]int{}, stores: map[int]*shadow{},
		layout: l, leased: l.topology == Leased, batches: map[int]*batch{}}
	switch l.alg.(type) {
	case algo.FixedWindow, algo.SlidingWindow:
		t.window = p.FillTime().Microseconds()
	}
	return t
}

// add records client c's request e, sent to instance i, and the store's
// answer res, and replays it on the shadow: a Take of its cost, or what
// the class's op o does when it is a replayer.
func (t *tracer) add(c *client, e event, i int, res algo.Result, o op) {
	ci, ok := t.clients[c]
	if !ok {
		ci = len(t.names)
		t.clients[c] = ci
		t.names = append(t.names, c.name)
	}
	t.requests = append(t.requests, Request{At: dur(e.at), Client: ci, Instance: i, Cost: e.cost,
		Allowed: res.Allowed, RetryAfter: res.RetryAfter, Remaining: res.Remaining})
	if t.leased { // the shared store's calls were replayed as they came (backend)
		if res.Allowed && !t.direct {
			t.batch(i).move(e.at, -e.cost)
		}
		t.direct = false
		return
	}
	if !t.exact {
		return
	}
	id := 0
	if !t.shared {
		id = i
	}
	sh := t.stores[id]
	if sh == nil {
		sh = &shadow{}
		t.stores[id] = sh
	}
	now := t.start + e.at + t.skews[i]
	before := t.room(sh.s, now)
	var s algo.State
	var got algo.Result
	var err error
	if r, ok := o.(replayer); ok {
		s, got, err = r.replay(t.alg, t.p, sh.s, now, e)
	} else {
		s, got, err = t.alg.Take(t.p, sh.s, now, e.cost)
	}
	if err != nil || got != res {
		t.exact = false // a wrapper answered, or the store is not this algorithm
		return
	}
	sh.s = s
	sh.takes = append(sh.takes, take{at: now, before: before, after: t.room(s, now), s: s})
}

// batch returns instance i's batch.
func (t *tracer) batch(i int) *batch {
	b := t.batches[i]
	if b == nil {
		b = &batch{}
		t.batches[i] = b
	}
	return b
}

// backend replays on the shared store's shadow a call instance inst's
// Leases made to it at the followed key (the fleet's tap): a Take (the
// request is then answered by the store, not a batch), a TakeAtMost that
// granted granted tokens into the batch, or a Refund of what the batch
// had left.
func (t *tracer) backend(inst int, r store.Request, at time.Time, op backendOp, granted int64) {
	if r.Key != t.key || !t.exact {
		return
	}
	tb, ok := t.alg.(algo.TokenBucket)
	if !ok {
		t.exact = false
		return
	}
	sh := t.stores[0]
	if sh == nil {
		sh = &shadow{}
		t.stores[0] = sh
	}
	now := at.UnixMicro()
	before := t.room(sh.s, now)
	var s algo.State
	var err error
	switch op {
	case opTake:
		s, _, err = tb.Take(t.p, sh.s, now, r.Cost)
		t.direct = true
	case opTakeAtMost:
		var got int64
		s, got, _, err = tb.TakeAtMost(t.p, sh.s, now, r.Cost)
		if got != granted {
			t.exact = false
			return
		}
		t.batch(inst).move(now-t.start, granted)
	case opRefund:
		s, _, err = tb.Refund(t.p, sh.s, now, r.Cost)
		t.batch(inst).move(now-t.start, -r.Cost)
	}
	if err != nil {
		t.exact = false
		return
	}
	sh.s = s
	sh.takes = append(sh.takes, take{at: now, before: before, after: t.room(s, now), s: s})
}

// room returns what a request could take from state s at µs now, in
// tokens: the algorithm's own Room (algo's three have one), or else the
// whole tokens a peek (cost 0, which charges nothing) reports.
func (t *tracer) room(s algo.State, now int64) float64 {
	if a, ok := t.alg.(interface {
		Room(algo.Policy, algo.State, int64) (float64, error)
	}); ok {
		v, err := a.Room(t.p, s, now)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	_, res, err := t.alg.Take(t.p, s, now, 0)
	if err != nil {
		return math.NaN()
	}
	return float64(res.Remaining) // an algorithm we cannot see into
}

// levels draws each store's room over [0, length) from its takes.
func (t *tracer) levels(length time.Duration) []Level {
	if !t.exact {
		return nil
	}
	ids := make([]int, 0, len(t.stores))
	for id := range t.stores {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]Level, 0, len(ids))
	for _, id := range ids {
		shift, inst := int64(0), -1
		if !t.shared {
			shift, inst = t.skews[id], id
		}
		lv := Level{Instance: inst, Skew: dur(shift), Points: t.points(t.stores[id], shift, length)}
		if w := t.window; w > 0 {
			lv.WindowStart = dur(firstBoundary(t.start+shift, w))
		}
		out = append(out, lv)
	}
	for _, i := range sortedKeys(t.batches) {
		b := t.batches[i]
		pts := append(slices.Clip(b.pts), Point{At: length, Tokens: float64(b.left)})
		out = append(out, Level{Instance: i, Points: pts})
	}
	return out
}

// points returns one store's Level points; shift is its clock's skew, so
// that its points land on the run's time.
func (t *tracer) points(sh *shadow, shift int64, length time.Duration) []Point {
	var pts []Point
	add := func(at int64, v float64) {
		p := Point{At: dur(at - t.start - shift), Tokens: v}
		if n := len(pts); math.IsNaN(v) || n > 0 && pts[n-1] == p {
			return
		}
		pts = append(pts, p)
	}
	begin, end := t.start+shift, t.start+shift+length.Microseconds()
	add(begin, t.room(algo.State{}, begin))
	for k, tk := range sh.takes {
		add(tk.at, tk.before)
		add(tk.at, tk.after)
		next := end
		if k+1 < len(sh.takes) {
			next = sh.takes[k+1].at
		}
		for _, c := range t.breaks(tk.s, tk.at, next) {
			if c-1 > tk.at {
				add(c-1, t.room(tk.s, c-1))
			}
			if c < next {
				add(c, t.room(tk.s, c))
			}
		}
	}
	if len(sh.takes) == 0 || sh.takes[len(sh.takes)-1].at < end {
		var s algo.State
		if n := len(sh.takes); n > 0 {
			s = sh.takes[n-1].s
		}
		add(end, t.room(s, end))
	}
	return pts
}

// breaks returns the instants in (from, to] where the room left in state
// s stops being one straight line: where a token bucket is full again,
// and the next two window boundaries of a windowed algorithm (a fixed
// window resets at the first; a sliding window's previous count stops
// weighing at the second).
func (t *tracer) breaks(s algo.State, from, to int64) []int64 {
	cs := []int64{t.alg.IdleAt(t.p, s)}
	if w := t.window; w > 0 {
		st := s.Stamp - s.Stamp%w
		cs = append(cs, st+w, st+2*w)
	}
	slices.Sort(cs)
	cs = slices.Compact(cs)
	return slices.DeleteFunc(cs, func(c int64) bool { return c <= from || c > to })
}

// timeline completes tl (title, key and the scenario's Instant set) with the traced data; slack is
// the law's.
func (t *tracer) timeline(tl *Timeline, length, slack time.Duration) error {
	tl.Algorithm, tl.Policy, tl.Capacity, tl.Rate = t.alg.Name(), t.p, t.p.Capacity(), t.p.Rate().String()
	tl.Duration, tl.Clients, tl.Requests, tl.Exact = length, t.names, t.requests, t.exact
	tl.Levels = t.levels(length)
	var adm []admission
	for _, q := range t.requests {
		if q.Allowed {
			tl.Admitted++
			adm = append(adm, admission{At: q.At, Cost: q.Cost})
		} else {
			tl.Denied++
		}
	}
	if w := t.window; w > 0 {
		tl.Window = dur(w)
		tl.WindowStart = dur(firstBoundary(t.start, w))
		if n := (length - tl.WindowStart + tl.Window - 1) / tl.Window; n+1 <= maxWindows {
			tl.Windows = t.windows(tl.WindowStart, tl.Window, length)
		}
	}
	if t.p.Validate() != nil {
		return nil // no request reached the key: nothing to check
	}
	law, err := t.layout.law(t.p, adm, slack)
	if err != nil {
		return err
	}
	law.Key = tl.Key
	tl.Law = law
	for w := time.Millisecond; w <= length; w = nextWidth(w) {
		peak, from := peakIn(adm, w)
		tl.Peaks = append(tl.Peaks, Window{Width: w, Key: tl.Key, From: from, Peak: peak, Bound: t.layout.bound(t.p, w+slack)})
	}
	if len(adm) > 0 {
		pad := max((law.To-law.From)/2, 500*time.Millisecond)
		tl.Zoom = t.interval(max(law.From-pad, 0), min(law.To+pad, length))
		tl.Instant = tl.Instant || !law.Holds && law.To-law.From <= length/20
	} else {
		tl.Zoom = Interval{To: length}
	}
	return nil
}

// firstBoundary returns how long after µs at (since the epoch) the first
// window boundary at or after it falls, windows of w µs being aligned to
// the epoch.
func firstBoundary(at, w int64) int64 {
	return ((w-at%w)%w + w) % w
}

// nextWidth steps 1, 2, 5, 10, 20, 50 … times a power of ten.
func nextWidth(w time.Duration) time.Duration {
	switch p := w; {
	case isPow10(p):
		return 2 * w
	case isPow10(p / 2):
		return w / 2 * 5
	}
	return w * 2
}

func isPow10(d time.Duration) bool {
	for d >= 10 && d%10 == 0 {
		d /= 10
	}
	return d == 1
}

// windows cuts [0, length) at the window boundaries first, first+w, …
func (t *tracer) windows(first, w, length time.Duration) []Interval {
	var out []Interval
	from := time.Duration(0)
	for to := first; from < length; to += w {
		if to > from {
			out = append(out, t.interval(from, min(to, length)))
			from = to
		}
	}
	return out
}

// interval returns [from, to) with the cost admitted in it.
func (t *tracer) interval(from, to time.Duration) Interval {
	iv := Interval{From: from, To: to}
	lo, _ := slices.BinarySearchFunc(t.requests, from, func(q Request, at time.Duration) int { return cmp.Compare(q.At, at) })
	for _, q := range t.requests[lo:] {
		if q.At >= to {
			break
		}
		if q.Allowed {
			iv.Admitted += q.Cost
		}
	}
	return iv
}
