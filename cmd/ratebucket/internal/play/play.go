// Package play is the web UI of `ratebucket play`, the playground: a page
// in which a learner runs the simulator's scenarios, or traffic drawn by
// hand, through the token bucket, the fixed window and the sliding window
// side by side, and sees every request, the room left in each bucket as a
// continuous line, the windows, and where the never-exceed law breaks.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary (no
// build step, nothing fetched from the network). It draws and does no
// rate-limit arithmetic: every number and every point of every line comes
// from the Go simulator through a small JSON API of this server, the same
// [sim.Timeline] that [sim.Timeline.WriteSVG] draws.
//
//	GET /                  the page; its query string is the view (see below)
//	GET /api/scenarios     the named scenarios: name, summary, policy, duration
//	GET /api/run?QUERY     one run per algorithm: each a sim.Report and its sim.Timeline
//
// With a store per instance, each instance's store cuts its windows on its
// own skewed clock: the page draws each instance's boundaries at the
// [sim.Level] WindowStart the API gives for it.
//
// The query string of the page and of /api/run is the same, so a view's
// URL reproduces it (runs are deterministic):
//
//	scenario   a name from /api/scenarios, or "custom" (default boundary-spike)
//	client     custom traffic, one parameter per client, a sim.Pattern as
//	           text: "100 at 59.5s over 490ms, every 5s"
//	cost       the cost of every request of a named scenario (default each
//	           request's own); of each custom request that does not set its own
//	algos      comma-separated token, fixed, sliding (default all three)
//	topology   shared, per-instance or leased (default shared): leased
//	           puts token leases in every instance (the token bucket
//	           only, unless algos says otherwise), and draws the shared
//	           bucket's line and each instance's batch
//	instances  app instances behind the load balancer, 1 to 10 (default 3)
//	capacity   the bucket's capacity; with rate, replaces the scenario's policy
//	rate       tokens per period: 2/s, 100/m, 5/10s
//	skew       comma-separated clock offsets of the instances: 0,400ms,-1s
//	seed       the traffic's seed (default 1)
//	duration   virtual time covered (default the scenario's; at most 1h)
//	from, to   the page's zoom, in seconds; the API ignores them
//
// It is the command's own, not an API: cmd/ratebucket's play subcommand
// serves [Handler] on 127.0.0.1, and playtest drives that binary in real
// browsers.
package play

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/cmd/ratebucket/internal/choices"
	"github.com/ratebucket/ratebucket/sim"
)

//go:embed assets
var assets embed.FS

// Limits on what one API call may run: the page is for looking, and two
// cores serve it.
const (
	// MaxInstances is the most instances a view may have.
	MaxInstances = 10
	// MaxDuration is the longest run a view may ask for.
	MaxDuration = time.Hour
)

// custom is the scenario of the query string that stands for traffic
// drawn by hand, one client parameter per client.
const custom = "custom"

// ErrBadQuery is wrapped by every error in a view's query string; the API
// answers it with 400 and the message.
var ErrBadQuery = errors.New("play: bad query")

// Handler returns the playground: the page and its assets at /, the API
// under /api/. At most two runs go on at once; others wait for their turn
// or for their request to be cancelled.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	turn := make(chan struct{}, 2)
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(sub))
	mux.HandleFunc("GET /api/scenarios", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, scenarios())
	})
	mux.HandleFunc("GET /api/run", func(w http.ResponseWriter, r *http.Request) {
		cfg, err := ParseView(r.URL.Query())
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		select {
		case turn <- struct{}{}:
			defer func() { <-turn }()
		case <-r.Context().Done():
			return
		}
		res, err := run(r.Context(), cfg)
		switch {
		case errors.Is(err, sim.ErrInvalidConfig) || errors.Is(err, algo.ErrCostExceedsCapacity) || errors.Is(err, algo.ErrInvalidPolicy):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusOK, res)
		}
	})
	return securityHeaders(mux)
}

// securityHeaders keeps the page to its own origin: no script, style or
// connection elsewhere, no framing.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// ScenarioInfo describes a named scenario for the page's menu.
type ScenarioInfo struct {
	Name     string        `json:"name"`
	Summary  string        `json:"summary"`
	Policy   string        `json:"policy"`
	Capacity int64         `json:"capacity"`
	Rate     string        `json:"rate"`
	Duration time.Duration `json:"duration"`
}

func scenarios() []ScenarioInfo {
	var out []ScenarioInfo
	for _, s := range sim.Scenarios() {
		out = append(out, ScenarioInfo{Name: s.Name, Summary: s.Summary, Policy: s.Policy.String(),
			Capacity: s.Policy.Capacity(), Rate: s.Policy.Rate().String(), Duration: s.Duration})
	}
	return out
}

// ParseView reads a view's query string (see the package documentation)
// into the Config of its runs, one per algorithm, in the page's order.
// Errors wrap [ErrBadQuery].
func ParseView(q url.Values) (sim.Config, error) {
	bad := func(format string, a ...any) (sim.Config, error) {
		return sim.Config{}, fmt.Errorf("%w: "+format, append([]any{ErrBadQuery}, a...)...)
	}
	cfg := sim.Config{Scenario: "boundary-spike", Instances: 3, Seed: 1}
	if s := q.Get("scenario"); s != "" {
		cfg.Scenario = s
	}
	var cost int64
	if s := q.Get("cost"); s != "" {
		c, err := strconv.ParseInt(s, 10, 64)
		if err != nil || c < 1 {
			return bad("cost %q: want a whole number of tokens, at least 1", s)
		}
		cost = c
	}
	if cfg.Scenario == custom {
		cost = max(cost, 1)
		for _, line := range q["client"] {
			if strings.TrimSpace(line) == "" {
				continue
			}
			var p sim.Pattern
			if err := p.UnmarshalText([]byte(line)); err != nil {
				return bad("%v", err)
			}
			if p.Cost == 0 {
				p.Cost = cost
			}
			cfg.Traffic = append(cfg.Traffic, p)
		}
		if len(cfg.Traffic) == 0 {
			return bad("custom traffic needs at least one client, such as client=100 at 59.5s")
		}
		cfg.Scenario = ""
	} else if _, err := choices.Scenario(cfg.Scenario); err != nil {
		return bad("%v", err)
	} else {
		cfg.Cost = cost // sim checks it against the capacity
	}
	cfg.Algorithms = choices.Algorithms()
	if s := q.Get("algos"); s != "" {
		cfg.Algorithms = nil
		for _, name := range strings.Split(s, ",") {
			a := choices.Algorithm(strings.TrimSpace(name))
			if a == nil {
				return bad("algorithm %q: want token, fixed or sliding", name)
			}
			cfg.Algorithms = append(cfg.Algorithms, a)
		}
	}
	if s := q.Get("topology"); s != "" {
		var t sim.Topology
		if err := t.UnmarshalText([]byte(s)); err != nil {
			return bad("%v", err)
		}
		cfg.Topologies = []sim.Topology{t}
		if t == sim.Leased && q.Get("algos") == "" { // token leases are the token bucket's
			cfg.Algorithms = cfg.Algorithms[:0]
			cfg.Algorithms = append(cfg.Algorithms, algo.TokenBucket{})
		}
	}
	if s := q.Get("instances"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxInstances {
			return bad("instances %q: want 1 to %d", s, MaxInstances)
		}
		cfg.Instances = n
	}
	if s := q.Get("seed"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return bad("seed %q: want a whole number", s)
		}
		cfg.Seed = n
	}
	if s := q.Get("duration"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > MaxDuration {
			return bad("duration %q: want up to %v, such as 2m", s, MaxDuration)
		}
		cfg.Duration = d.Truncate(time.Microsecond)
	}
	if s := q.Get("skew"); s != "" {
		for _, part := range strings.Split(s, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(part))
			if err != nil {
				return bad("skew %q: want comma-separated durations such as 0,400ms,-1s", s)
			}
			cfg.Skew = append(cfg.Skew, d)
		}
	}
	if c, r := q.Get("capacity"), q.Get("rate"); c != "" || r != "" {
		p, err := policy(c, r, cfg)
		if err != nil {
			return bad("%v", err)
		}
		cfg.Policy = p
	}
	return cfg, nil
}

// policy builds the policy of capacity c and rate r, either of which may
// be empty to keep the scenario's.
func policy(c, r string, base sim.Config) (algo.Policy, error) {
	def := sim.Scenario{}
	if len(base.Traffic) == 0 {
		def, _ = choices.Scenario(base.Scenario)
	} else {
		def.Policy = algo.PerMinute(100).Burst(100)
	}
	capacity, rate := def.Policy.Capacity(), def.Policy.Rate()
	if c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n < 1 {
			return algo.Policy{}, fmt.Errorf("capacity %q: want a whole number of tokens, at least 1", c)
		}
		capacity = n
	}
	if r != "" {
		var err error
		if rate, err = parseRate(r); err != nil {
			return algo.Policy{}, err
		}
	}
	return algo.NewPolicy(capacity, rate)
}

// parseRate reads "N/s", "N/m", "N/h" or "N/DURATION" (N whole tokens), or
// a bare N per second.
func parseRate(s string) (algo.Rate, error) {
	num, per, _ := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	period := time.Second
	switch per = strings.TrimSpace(per); per {
	case "", "s":
	case "m":
		period = time.Minute
	case "h":
		period = time.Hour
	default:
		var perr error
		if period, perr = time.ParseDuration(per); perr != nil || per[0] < '0' || per[0] > '9' {
			err = errors.Join(err, fmt.Errorf("period %q", per))
		}
	}
	if err != nil || n < 1 || period <= 0 {
		return algo.Rate{}, fmt.Errorf("rate %q: want whole tokens per period, such as 2/s, 100/m or 5/10s", s)
	}
	return algo.Per(n, period), nil
}

// Result is what /api/run answers: the view's scenario and one run per
// algorithm.
type Result struct {
	// Scenario and Summary name the traffic; Traffic lists custom
	// traffic's clients as text.
	Scenario string   `json:"scenario"`
	Summary  string   `json:"summary"`
	Traffic  []string `json:"traffic,omitempty"`
	// Policy is the policy of the followed key.
	Policy string `json:"policy"`
	// Runs holds one run per algorithm, in the view's order.
	Runs []Run `json:"runs"`
}

// Run is one algorithm's run: its report (the whole run, all clients) and
// its timeline (the followed key, request by request).
type Run struct {
	// Short is "token", "fixed" or "sliding".
	Short    string        `json:"short"`
	Report   *sim.Report   `json:"report"`
	Timeline *sim.Timeline `json:"timeline"`
}

// run makes the runs of cfg, a view's Config, one per algorithm, in
// order; ctx bounds them.
func run(ctx context.Context, cfg sim.Config) (*Result, error) {
	res := &Result{}
	for _, p := range cfg.Traffic {
		res.Traffic = append(res.Traffic, p.String())
	}
	reps, err := sim.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for _, rep := range reps {
		res.Scenario, res.Policy = rep.Scenario, rep.Timeline.Policy.String()
		res.Runs = append(res.Runs, Run{Short: choices.Short(rep.Algorithm), Report: rep, Timeline: rep.Timeline})
	}
	if len(cfg.Traffic) == 0 {
		sc, _ := choices.Scenario(cfg.Scenario)
		res.Summary = sc.Summary
	} else {
		res.Summary = "your traffic: " + strings.Join(res.Traffic, "; ")
	}
	return res, nil
}
