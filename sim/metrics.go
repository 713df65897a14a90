package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// widths are the interval lengths of [Report.Windows].
var widths = []time.Duration{time.Second, 10 * time.Second, time.Minute}

// recorder builds a run's clients and collects what happens to them.
type recorder struct {
	length  time.Duration
	classes []class
	clients []*client
	keys    map[string]*bucketLog
	focus   string // the key the timeline follows
	instant bool   // the scenario is about an instant
	debt    bool   // the scenario settles into debt: windows bound by SettleBound
	cost    int64  // Config.Cost: every request's cost, or 0 for its own
	trace   *tracer
	layout  layout // the law's bound is its
}

// bucketLog is every admission at one key, across all instances.
type bucketLog struct {
	policy algo.Policy
	adm    []admission
}

// newRecorder builds the clients of scenario sc under its main policy
// base, scale times as many as the scenario has, for a run of length; seed
// draws their traffic. The focus key is traced on the stores of l.
func newRecorder(sc Scenario, base algo.Policy, length time.Duration, scale int, seed uint64, l layout) *recorder {
	r := &recorder{length: length, instant: sc.Instant, layout: l, debt: sc.debt,
		classes: sc.classes(base), keys: map[string]*bucketLog{}}
	for ci, cl := range r.classes {
		for i := range cl.count * scale {
			entitled := cl.entitled
			if entitled == (algo.Policy{}) {
				entitled = cl.policy
			}
			pair := rand.New(rand.NewPCG(seed^0x9a1e5eed, uint64(i)))
			name := cl.name // a class of one is named by the class alone
			if cl.count*scale > 1 {
				name = fmt.Sprintf("%s %d", cl.name, i)
			}
			c := &client{class: ci, name: name, key: cl.key(i), policy: cl.policy,
				entitled: entitled, gen: cl.gen(i, pair), rng: rand.New(rand.NewPCG(seed, streamID(cl.name, i)))}
			r.clients = append(r.clients, c)
			if r.focus == "" && cl.name == sc.Focus {
				r.focus = c.key
				r.trace = newTracer(l, c.policy)
				r.trace.key = c.key
			}
		}
	}
	if r.trace == nil {
		r.trace = newTracer(l, base)
	}
	return r
}

// setCost makes every request cost c when c > 0 (Config.Cost), and tells
// the clients whose traffic reads its answers in tokens (the boundary
// spike's attacker sizes its bursts by the capacity).
func (r *recorder) setCost(c int64) {
	if c <= 0 {
		return
	}
	r.cost = c
	for _, cl := range r.clients {
		if g, ok := cl.gen.(interface{ setCost(int64) }); ok {
			g.setCost(c)
		}
	}
}

// streamID gives each client its own random stream, independent of how
// many clients other classes have.
func streamID(class string, i int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(class))
	return h.Sum64() ^ uint64(i)*0x9e3779b97f4a7c15
}

// record notes the answer out to client c's request e, which instance i
// served. The law is checked on what stays charged, when it proceeds.
func (r *recorder) record(c *client, e event, i int, out served) {
	c.requests++
	c.offered += e.cost
	if c.key == r.focus {
		r.trace.add(c, e, i, out.res, r.classes[c.class].op)
	}
	if !out.res.Allowed {
		return
	}
	c.admitted++
	c.admittedCost += e.cost
	if out.charged == 0 {
		return
	}
	b := r.keys[c.key]
	if b == nil {
		b = &bucketLog{policy: c.policy}
		r.keys[c.key] = b
	}
	b.adm = append(b.adm, admission{At: dur(out.at), Cost: out.charged})
}

// legit reports whether c stayed within its entitlement's long-run rate:
// what it asked for over the run, cost-weighted, is at most rate·duration.
func (r *recorder) legit(c *client) bool {
	p := c.entitled
	return p.Bound(r.length)-p.Capacity() >= c.offered
}

// report completes head, the description of the finished run, with what
// it measured: calls is the backend calls made, and slack the law's.
func (r *recorder) report(head Report, calls int64, slack time.Duration) (*Report, error) {
	rep := &head
	rep.BackendCalls = calls
	rep.Timeline = &Timeline{Title: rep.Title(), Key: r.focus, Instant: r.instant}
	if err := r.trace.timeline(rep.Timeline, r.length, slack); err != nil {
		return nil, err
	}
	for range r.classes {
		rep.Classes = append(rep.Classes, Stats{})
	}
	for _, c := range r.clients {
		s := &rep.Classes[c.class]
		s.Clients++
		s.Requests += c.requests
		s.Admitted += c.admitted
		s.AdmittedCost += c.admittedCost
		s.BackendCalls += c.calls
		if r.legit(c) {
			s.Legit++
			s.LegitRequests += c.requests
			s.LegitDenied += c.requests - c.admitted
		}
	}
	rep.Total.Class = "all"
	for i := range rep.Classes {
		s := &rep.Classes[i]
		s.Class = r.classes[i].name
		s.Denied = s.Requests - s.Admitted
		rep.Total.add(*s)
	}
	keys := sortedKeys(r.keys)
	for _, w := range widths {
		best := Window{Width: w}
		for _, k := range keys {
			b := r.keys[k]
			peak, from := peakIn(b.adm, w)
			bound := r.layout.bound(b.policy, w)
			if r.debt { // SettleBound: one bucket of debt more
				bound += min(b.policy.MaxDebt(), math.MaxInt64-bound)
			}
			if best.Key == "" || peak*best.Bound > best.Peak*bound {
				best = Window{Width: w, Key: k, From: from, Peak: peak, Bound: bound}
			}
		}
		rep.Windows = append(rep.Windows, best)
	}
	rep.Law = Law{Holds: true, Slack: slack}
	first := true
	for _, k := range keys {
		b := r.keys[k]
		law, err := r.layout.law(b.policy, b.adm, slack)
		if err != nil {
			return nil, err
		}
		law.Key = k
		if first || law.excess > rep.Law.excess {
			rep.Law, first = law, false
		}
	}
	return rep, nil
}
