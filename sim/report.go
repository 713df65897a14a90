package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is what one run measured. Its JSON form (see [Report.JSON]) has
// durations in nanoseconds and leaves out the Timeline.
type Report struct {
	// Scenario is the scenario's name.
	Scenario string `json:"scenario"`
	// Algorithm is the algorithm's Name, such as "tokenbucket".
	Algorithm string `json:"algorithm"`
	// Topology, Instances and Skew are the run's store layout.
	Topology  Topology        `json:"topology"`
	Instances int             `json:"instances"`
	Skew      []time.Duration `json:"skew,omitempty"`
	// Backend names the stores: "memstore", or Config.Backend.
	Backend string `json:"backend"`
	// Seed is the seed the traffic was drawn with.
	Seed uint64 `json:"seed"`
	// Duration is the virtual time simulated.
	Duration time.Duration `json:"duration"`
	// Policy is the scenario's main policy, as "burst 100, 2/1s".
	Policy string `json:"policy"`
	// Cost is Config.Cost: every request's cost, or 0 when each request
	// kept its own.
	Cost int64 `json:"cost,omitempty"`
	// Total sums the classes.
	Total   Stats   `json:"total"`
	Classes []Stats `json:"classes"`
	// Windows holds, for each of 1 s, 10 s and 60 s, the most admitted
	// in any interval of that length at the key where it is highest
	// against the bound Capacity + rate·width.
	Windows []Window `json:"windows"`
	// Law is the never-exceed law over every interval at every key: the
	// worst violation, or the tightest interval when it holds.
	Law Law `json:"law"`
	// BackendCalls counts the calls that reached the store(s).
	BackendCalls int64 `json:"backend_calls"`
	// ShardCalls counts them per shard, in slot order, when the scenario
	// spreads its keys over the masters of a Cluster ("fleet"); it is
	// empty otherwise.
	ShardCalls []int64 `json:"shard_calls,omitempty"`
	// Timeline follows the scenario's focus key second by second.
	Timeline *Timeline `json:"-"`
}

// Stats counts one class of clients' requests (or all of them).
type Stats struct {
	// Class names the class ("all" for the total).
	Class string `json:"class"`
	// Clients counts the class's clients.
	Clients int `json:"clients"`
	// Legit counts the clients that stayed within their policy's long-run
	// rate: over the run they asked for at most rate·duration tokens.
	Legit int `json:"legit"`
	// Requests, Admitted and Denied count requests (Admitted + Denied =
	// Requests); AdmittedCost sums the admitted requests' costs.
	Requests     int64 `json:"requests"`
	Admitted     int64 `json:"admitted"`
	Denied       int64 `json:"denied"`
	AdmittedCost int64 `json:"admitted_cost"`
	// LegitRequests and LegitDenied count the legitimate clients'
	// requests and denials: every such denial is a false 429.
	LegitRequests int64 `json:"legit_requests"`
	LegitDenied   int64 `json:"legit_denied"`
	// BackendCalls counts the calls this class's requests caused at the
	// backend store(s); fewer than Requests when a [Config.Wrap] wrapper
	// answers some itself.
	BackendCalls int64 `json:"backend_calls"`
}

// False429 returns the share of legitimate clients' requests that were
// denied, between 0 and 1 (0 when there were none).
func (s Stats) False429() float64 {
	if s.LegitRequests == 0 {
		return 0
	}
	return float64(s.LegitDenied) / float64(s.LegitRequests)
}

func (s *Stats) add(o Stats) {
	s.Clients += o.Clients
	s.Legit += o.Legit
	s.Requests += o.Requests
	s.Admitted += o.Admitted
	s.Denied += o.Denied
	s.AdmittedCost += o.AdmittedCost
	s.LegitRequests += o.LegitRequests
	s.LegitDenied += o.LegitDenied
	s.BackendCalls += o.BackendCalls
}

// Class returns the stats of the named class, and whether there is one.
func (r *Report) Class(name string) (Stats, bool) {
	for _, s := range r.Classes {
		if s.Class == name {
			return s, true
		}
	}
	return Stats{}, false
}

// Setup describes the run's store layout in a few characters, such as
// "shared×3", "per-inst×3" or "leased×3", with "+skew" when clocks are skewed; shared
// stores other than memstore are named by their Backend without a "store"
// suffix, as "redis×3" for redisstore.
func (r *Report) Setup() string {
	s := "shared"
	if r.Backend != "memstore" {
		s = strings.TrimSuffix(r.Backend, "store")
	}
	switch r.Topology {
	case PerInstance:
		s = "per-inst"
	case Leased:
		s = "leased"
	}
	s += fmt.Sprintf("×%d", r.Instances)
	for _, k := range r.Skew {
		if k != 0 {
			return s + "+skew"
		}
	}
	return s
}

// Title names the run in one line.
func (r *Report) Title() string {
	policy := r.Policy
	if r.Cost > 0 {
		policy += fmt.Sprintf(" · cost %d", r.Cost)
	}
	return fmt.Sprintf("%s · %s · %s · %s · %v · seed %d", r.Scenario, r.Algorithm, r.Setup(), policy, r.Duration, r.Seed)
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// pct formats a share as a percentage with two decimals.
func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// Markdown renders the run as a heading, a table with a row per class and
// the peak windows and law underneath, all within 80 columns.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s · %s · %s\n\n", r.Scenario, r.Algorithm, r.Setup())
	fmt.Fprintf(&b, "%s · %v · seed %d · %d requests · %d backend calls\n\n",
		r.Policy, r.Duration, r.Seed, r.Total.Requests, r.BackendCalls)
	t := table{head: []string{"class", "clients", "legit", "requests", "admitted", "denied", "false 429"},
		right: []bool{false, true, true, true, true, true, true}}
	for _, s := range append(append([]Stats(nil), r.Classes...), r.Total) {
		f := "—"
		if s.Legit > 0 {
			f = pct(s.False429())
		}
		t.add(s.Class, s.Clients, s.Legit, s.Requests, s.Admitted, s.Denied, f)
	}
	t.write(&b)
	b.WriteString("\nmost admitted in any window (worst key), against capacity + rate·w:\n")
	for _, w := range r.Windows {
		fmt.Fprintf(&b, "- %v: %d of %d at %s from %v\n", w.Width, w.Peak, w.Bound, w.Key, ms3(w.From))
	}
	l := r.Law
	verdict, which := "holds", "tightest"
	if !l.Holds {
		verdict, which = "BROKEN", "worst"
	}
	fmt.Fprintf(&b, "\nnever-exceed law over every interval: %s\n", verdict)
	fmt.Fprintf(&b, "- %s interval: [%v, %v] at %s\n", which, ms3(l.From), ms3(l.To), l.Key)
	held := ""
	if r.Topology == Leased {
		held = " + leased batches"
	}
	fmt.Fprintf(&b, "- admitted %d, bound capacity + rate·(length + %v)%s = %d\n", l.Admitted, l.Slack, held, l.Bound)
	if len(r.ShardCalls) > 0 {
		b.WriteString("\nbackend calls per second, per shard:")
		for i, n := range r.ShardCalls {
			fmt.Fprintf(&b, " %d: %s", i, r.perSecond(n))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Reports are the reports of one [Run], in the order of its runs.
type Reports []*Report

// Table renders one row per report, to compare runs of a scenario: the
// algorithm ("token", "fixed", "sliding"), the store layout (see
// [Report.Setup]), admitted and denied requests, the false-429 rate of
// legitimate clients, the peak admitted in any 1 s, 10 s and 60 s window
// as a multiple of its bound capacity + rate·w (above 1 breaks the law),
// and the law's verdict over every interval: "ok", or the worst interval's
// admitted/bound followed by "!". It is a Markdown table that fits in 80
// columns. When a run is [Leased] or its scenario sharded ("fleet"), a
// second table follows, a row per run in the same order: the backend calls
// per second, in all and, sharded, on each shard.
func (rs Reports) Table() string {
	t := table{head: []string{"algo", "store", "admit", "deny", "false429", "peak 1s 10s 60s", "law"},
		right: []bool{false, false, true, true, true, true, true}}
	calls := table{head: []string{"store", "calls/s"}, right: []bool{false, true}}
	shards := 0
	for _, r := range rs {
		if r.Topology == Leased || len(r.ShardCalls) > 0 {
			calls.right = append(calls.right, true) // a row to add
		}
		shards = max(shards, len(r.ShardCalls))
	}
	for i := range shards {
		calls.head = append(calls.head, fmt.Sprintf("s%d", i))
		calls.right = append(calls.right, true)
	}
	for _, r := range rs {
		peaks := make([]string, len(r.Windows))
		for i, win := range r.Windows {
			peaks[i] = strings.TrimSuffix(ratio(win.Peak, win.Bound), "×")
		}
		law := "ok"
		if !r.Law.Holds {
			law = ratio(r.Law.Admitted, r.Law.Bound) + "!"
		}
		t.add(shortName(r.Algorithm), r.Setup(), r.Total.Admitted, r.Total.Denied,
			pct(r.Total.False429()), strings.Join(peaks, " "), law)
		row := []any{r.Setup(), r.perSecond(r.BackendCalls)}
		for i := range shards {
			n := "—"
			if i < len(r.ShardCalls) {
				n = r.perSecond(r.ShardCalls[i])
			}
			row = append(row, n)
		}
		calls.add(row...)
	}
	var b strings.Builder
	t.write(&b)
	if len(calls.right) > 2+shards {
		calls.right = calls.right[:2+shards]
		b.WriteString("\nbackend calls per second:\n\n")
		calls.write(&b)
	}
	return b.String()
}

// perSecond formats n over the run's Duration as a whole rate, "8720".
func (r *Report) perSecond(n int64) string {
	if r.Duration <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", float64(n)/r.Duration.Seconds())
}

// shortName returns an algorithm's name without its "bucket" or "window"
// suffix: "token", "fixed", "sliding".
func shortName(name string) string {
	return strings.TrimSuffix(strings.TrimSuffix(name, "bucket"), "window")
}

// ms3 rounds d to the millisecond for display.
func ms3(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// ratio formats a/b as "1.02×".
func ratio(a, b int64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

// table is a Markdown table whose columns are padded to their widest cell,
// right-aligned where right says so.
type table struct {
	head  []string
	right []bool
	rows  [][]string
}

func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = fmt.Sprint(c)
	}
	t.rows = append(t.rows, row)
}

func (t *table) write(b io.Writer) {
	width := make([]int, len(t.head))
	for _, row := range append([][]string{t.head}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(row []string) {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if t.right[i] {
				c = pad + c
			} else {
				c += pad
			}
			fmt.Fprintf(b, "| %s ", c)
		}
		fmt.Fprintln(b, "|")
	}
	line(t.head)
	for i, w := range width {
		if t.right[i] {
			fmt.Fprintf(b, "|%s:", strings.Repeat("-", w+1))
		} else {
			fmt.Fprintf(b, "|%s", strings.Repeat("-", w+2))
		}
	}
	fmt.Fprintln(b, "|")
	for _, row := range t.rows {
		line(row)
	}
}
