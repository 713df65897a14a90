package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
)

// demoReport is what the demo measured; --json prints it as it is.
type demoReport struct {
	Store       string   `json:"store"`
	Instances   int      `json:"instances"`
	Stores      int      `json:"stores"` // 1 shared, or one per instance
	URLs        []string `json:"urls"`
	Capacity    int64    `json:"capacity"`
	Rate        string   `json:"rate"`
	Requests    int      `json:"requests"`
	Concurrency int      `json:"concurrency"`
	User        string   `json:"user,omitempty"`
	UserHeader  string   `json:"user_header,omitempty"`

	Status     map[int]int    `json:"status"`   // responses per HTTP status
	Outcomes   map[string]int `json:"outcomes"` // the middleware's outcomes
	Errors     int            `json:"errors"`   // requests with no response
	FirstError string         `json:"first_error,omitempty"`
	StoreError string         `json:"store_error,omitempty"`

	// Admitted is what the limiter allowed: FromBurst came from the full
	// bucket(s), Refilled from refill during the run.
	Admitted  int64 `json:"admitted"`
	FromBurst int64 `json:"from_burst"`
	Refilled  int64 `json:"refilled"`
	// ElapsedUS spans the run, from the first request sent to the last
	// response read, in µs; every decision happened inside it.
	ElapsedUS int64 `json:"elapsed_us"`
	// Bound is the law, capacity + ⌊rate·elapsed⌋, which per-instance
	// stores break.
	Bound       int64 `json:"bound"`
	BoundRefill int64 `json:"bound_refill"` // ⌊rate·elapsed⌋
	LawHolds    bool  `json:"law_holds"`

	Limiter latencyReport `json:"limiter_latency"` // the store call in the middleware
	Request latencyReport `json:"request_latency"` // whole requests, client side

	Redis *redisReport `json:"redis,omitempty"`
}

// latencyReport holds quantiles in nanoseconds.
type latencyReport struct {
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

func newLatencyReport(h *histogram) latencyReport {
	return latencyReport{h.quantile(0.5), h.quantile(0.99), h.quantile(0.999), h.max}
}

// redisReport is what Redis did for the run.
type redisReport struct {
	// Sent counts the commands the instances' clients sent during the
	// run, per command: the round trips the application paid for.
	Sent      map[string]int64 `json:"sent"`
	SentTotal int64            `json:"sent_total"`
	// RoundTrips counts the client's network exchanges: one per command
	// sent alone, one per pipeline.
	RoundTrips int64   `json:"round_trips"`
	PerRequest float64 `json:"round_trips_per_request"`
	// Server is the INFO commandstats delta: what Redis executed,
	// including the calls the Lua script makes inside Redis and the
	// handshakes of new connections.
	Server map[string]int64 `json:"server"`
	Prefix string           `json:"prefix"`
	Keys   []string         `json:"keys"`
	// Inspect is the ratebucket inspect command line that reads the
	// load generator's bucket: the run's --prefix, --redis and policy.
	Inspect      string   `json:"inspect"`
	inspectWords []string // Inspect's words, for the text report to wrap
	// BytesPerKey is the mean MEMORY USAGE of the run's keys.
	BytesPerKey int64 `json:"bytes_per_key"`
}

// runDemo starts the fleet, runs the load, reports, and serves on when
// asked.
func runDemo(ctx context.Context, e *env, cfg *demoConfig) error {
	f, err := startFleet(ctx, e, cfg)
	if err != nil {
		return err
	}
	defer f.stop()
	r := &demoReport{
		Store: f.backends[0].desc, Instances: cfg.instances, Stores: f.stores(), URLs: f.urls,
		Capacity: cfg.policy.Capacity(), Rate: cfg.policy.Rate().String(), Requests: cfg.n, Concurrency: cfg.c,
		User: cfg.user, UserHeader: cfg.userHeader,
	}
	if cfg.n > 0 {
		if err := f.load(ctx, e, cfg, r); err != nil {
			return err
		}
		if cfg.json {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(r); err != nil {
				return err
			}
		} else {
			r.print(e.stdout)
		}
	}
	if !cfg.serve {
		return nil
	}
	// The inspect command first, where it is seen: the text report
	// already ended with it.
	onRedis := f.backends[0].onRedis()
	if onRedis && (cfg.n == 0 || cfg.json) {
		words, err := inspectWords(cfg, f.prefix)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "inspect the bucket, once requests have come:\n%s\n", wrapCommand(words, "  ", 80))
	}
	fmt.Fprintf(e.stdout, "\nserving until interrupted (Ctrl-C):\n")
	for _, u := range f.urls {
		fmt.Fprintf(e.stdout, "  %s/api/feed\n", u)
	}
	hdr := ""
	if cfg.userHeader != "" {
		hdr = fmt.Sprintf(" -H '%s: test-user'", cfg.userHeader)
	}
	feedFails := "served"
	if cfg.fail == "closed" {
		feedFails = "503"
	}
	fmt.Fprintf(e.stdout, "routes: GET /api/feed fail-%s (%s while the store fails),\n", cfg.fail, feedFails)
	fmt.Fprintf(e.stdout, "        POST /api/login fail-closed (503 while the store fails)\n")
	fmt.Fprintf(e.stdout, "try: curl -i%s %s/api/feed\n", hdr, f.urls[0])
	fmt.Fprintf(e.stdout, " or: ab -n 1000 -c 200%s %s/api/feed\n", hdr, f.urls[0])
	fmt.Fprintf(e.stdout, "metrics (Prometheus text, the whole process): curl %s/metrics\n", f.urls[0])
	if onRedis {
		fmt.Fprintf(e.stdout, "then stop Redis and: curl -i%s %s/api/feed\n", hdr, f.urls[0])
		fmt.Fprintf(e.stdout, "                and: curl -i -X POST%s %s/api/login\n", hdr, f.urls[0])
	}
	<-ctx.Done()
	return nil
}

// inspectWords is the ratebucket inspect command, each word quoted for
// a POSIX shell, that reads the bucket of the load generator's requests:
// the demo's Redis (--cluster when it is one), its run's --prefix, its
// policy as given, and demoKey.
func inspectWords(cfg *demoConfig, prefix string) ([]string, error) {
	key, err := demoKey(cfg)
	if err != nil {
		return nil, err
	}
	args := []string{"ratebucket", "inspect"}
	if cfg.redis.cluster {
		args = append(args, "--cluster")
	}
	args = append(args, "--redis", cfg.redis.url, "--prefix", prefix,
		"--capacity", strconv.FormatInt(cfg.policy.Capacity(), 10), "--rate", cfg.rate, key)
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return args, nil
}

// wrapCommand writes a command's shell words on lines of at most width
// columns where it can, each but the last ending in " \" (the shell's
// line continuation), the first indented by indent and the rest by four
// more spaces: one command to copy and paste.
func wrapCommand(words []string, indent string, width int) string {
	var b strings.Builder
	col := 0
	for i, w := range words {
		switch {
		case i == 0:
			b.WriteString(indent)
			col = len(indent)
		case col+1+len(w)+2 > width:
			b.WriteString(" \\\n" + indent + "    ")
			col = len(indent) + 4
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

// shellQuote returns s as one POSIX shell word: as it is when it holds
// only characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@,+=%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// demoKey is the bucket key httplimit gives the load generator's requests:
// its user's, else 127.0.0.1's.
func demoKey(cfg *demoConfig) (string, error) {
	mw, err := httplimit.New(demoLimits(cfg))
	if err != nil {
		return "", err
	}
	r, err := http.NewRequest(http.MethodGet, "/api/feed", nil)
	if err != nil {
		return "", err
	}
	r.RemoteAddr = "127.0.0.1:1"
	if cfg.user != "" {
		r = r.WithContext(httplimit.WithUser(r.Context(), cfg.user))
	}
	keys, err := mw.Keys(r)
	if err != nil {
		return "", err
	}
	return keys[0], nil
}

// load runs the load generator against the fleet and fills r.
func (f *demoFleet) load(ctx context.Context, e *env, cfg *demoConfig, r *demoReport) error {
	var before, sentBefore map[string]int64
	var tripsBefore int64
	be := f.backends[0]
	if be.onRedis() {
		if err := f.warm(ctx, cfg.redis.poolSize, cfg.policy); err != nil {
			return err
		}
		var err error
		if before, err = commandStats(ctx, be.rdb); err != nil {
			return fmt.Errorf("INFO commandstats: %w", err)
		}
		sentBefore, tripsBefore = f.sent()
	}
	l := load{n: cfg.n, c: cfg.c, qps: cfg.qps, header: http.Header{}}
	for _, u := range f.urls {
		l.targets = append(l.targets, u+"/api/feed")
	}
	if cfg.user != "" {
		l.header.Set(cfg.userHeader, cfg.user)
	}
	client := newLoadClient(cfg.c)
	defer client.CloseIdleConnections()
	prog := startProgress(e.stderr, int64(cfg.n), "requests")
	res := l.run(ctx, client, prog)
	prog.finish()
	if err := ctx.Err(); err != nil {
		return err
	}
	check, outcomes, storeErr := f.obs.snapshot()
	r.Status, r.Outcomes, r.Errors, r.FirstError = res.Status, outcomes, res.Errors, res.FirstError
	if storeErr != nil {
		r.StoreError = storeErr.Error()
	}
	r.ElapsedUS = (res.Elapsed + time.Microsecond - 1).Microseconds()
	r.Admitted = int64(outcomes["allowed"])
	burst := int64(f.stores()) * cfg.policy.Capacity()
	r.FromBurst = min(r.Admitted, burst)
	r.Refilled = r.Admitted - r.FromBurst
	r.BoundRefill = refillIn(cfg.policy.Rate(), r.ElapsedUS)
	r.Bound = cfg.policy.Capacity() + r.BoundRefill
	r.LawHolds = r.Admitted <= r.Bound
	r.Limiter, r.Request = newLatencyReport(&check), newLatencyReport(&res.request)
	if !be.onRedis() {
		return nil
	}
	after, err := commandStats(ctx, be.rdb)
	if err != nil {
		return fmt.Errorf("INFO commandstats: %w", err)
	}
	sentAfter, tripsAfter := f.sent()
	rr := &redisReport{Sent: statsDelta(sentBefore, sentAfter), Server: statsDelta(before, after), Prefix: f.prefix}
	for _, n := range rr.Sent {
		rr.SentTotal += n
	}
	rr.RoundTrips = tripsAfter - tripsBefore
	rr.PerRequest = float64(rr.RoundTrips) / float64(cfg.n)
	var bytes int64
	if rr.Keys, bytes, err = f.redisKeys(ctx); err != nil {
		return err
	}
	if len(rr.Keys) > 0 {
		rr.BytesPerKey = bytes / int64(len(rr.Keys))
	}
	words, err := inspectWords(cfg, f.prefix)
	if err != nil {
		return err
	}
	rr.Inspect, rr.inspectWords = strings.Join(words, " "), words
	r.Redis = rr
	return nil
}

// refillIn returns ⌊rate·us⌋: the whole tokens rate refills in us µs,
// computed in 128 bits so no product overflows.
func refillIn(rate algo.Rate, us int64) int64 {
	period := uint64(rate.Period.Microseconds())
	hi, lo := bits.Mul64(uint64(us), uint64(rate.Tokens))
	if hi >= period {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, period)
	return int64(min(q, 1<<63-1))
}

// print writes r for a reader, within 80 columns.
func (r *demoReport) print(w io.Writer) {
	fmt.Fprintf(w, "demo: %d instance(s) of GET /api/feed on 127.0.0.1\n", r.Instances)
	if r.Stores > 1 {
		fmt.Fprintf(w, "store: %d memstores, one per instance (the broken setup)\n", r.Stores)
	} else {
		fmt.Fprintf(w, "store: %s, shared by all instances\n", r.Store)
	}
	who := "per client IP"
	if r.UserHeader != "" {
		who = fmt.Sprintf("per user (%s header, demo only), else per IP", r.UserHeader)
	}
	fmt.Fprintf(w, "policy: burst %d, %s %s\n", r.Capacity, r.Rate, who)
	as := "anonymous"
	if r.User != "" {
		as = "as user " + r.User
	}
	elapsed := time.Duration(r.ElapsedUS) * time.Microsecond
	fmt.Fprintf(w, "load: %d requests, %d in flight, %s, round-robin, %s\n\n", r.Requests, r.Concurrency, as, fmtSeconds(elapsed))

	fmt.Fprintf(w, "responses  %s\n", fmtStatus(r.Status, r.Errors))
	bucket := "the full bucket"
	if r.Stores > 1 {
		bucket = fmt.Sprintf("%d full buckets", r.Stores)
	}
	fmt.Fprintf(w, "admitted   %d = %d from %s + %d refilled in %s\n", r.Admitted, r.FromBurst, bucket, r.Refilled, fmtSeconds(elapsed))
	verdict := "holds"
	if !r.LawHolds {
		verdict = "VIOLATED"
	}
	fmt.Fprintf(w, "law        %d admitted <= capacity + ⌊rate × elapsed⌋ = %d + %d = %d: %s\n",
		r.Admitted, r.Capacity, r.BoundRefill, r.Bound, verdict)
	if r.Stores > 1 && !r.LawHolds {
		fmt.Fprintf(w, "           (%d stores, one per instance: each admits the whole limit)\n", r.Stores)
	}
	if r.StoreError != "" {
		fmt.Fprintf(w, "store      errors: %d served fail-open, %d refused fail-closed; first: %s\n",
			r.Outcomes["failed_open"], r.Outcomes["failed_closed"], r.StoreError)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, "errors     first: %s\n", r.FirstError)
	}
	fmt.Fprintf(w, "\nlatency          p50      p99     p999      max\n")
	for _, row := range []struct {
		name, note string
		l          latencyReport
	}{{"limiter", "store call in the middleware", r.Limiter}, {"request", "whole request, client side", r.Request}} {
		fmt.Fprintf(w, "  %-8s %8s %8s %8s %8s  %s\n", row.name, fmtDur(row.l.P50), fmtDur(row.l.P99), fmtDur(row.l.P999), fmtDur(row.l.Max), row.note)
	}
	if rr := r.Redis; rr != nil {
		fmt.Fprintf(w, "\nredis      %d EVALSHA for %d requests in %d round trips (%.2f per request)\n",
			rr.Sent["evalsha"], r.Requests, rr.RoundTrips, rr.PerRequest)
		for _, text := range []string{
			"sent " + fmtCommands(rr.Sent) + sentNote(rr, r.Requests),
			"server ran " + fmtCommands(rr.Server) + " (with the calls the script makes inside Redis)",
		} {
			for i, line := range wrap(text, 80-13) {
				fmt.Fprintf(w, "%s%s\n", strings.Repeat(" ", 11+2*min(i, 1)), line)
			}
		}
		fmt.Fprintf(w, "           %d key(s) under %s, %d bytes per key (MEMORY USAGE)\n", len(rr.Keys), rr.Prefix, rr.BytesPerKey)
		fmt.Fprintf(w, "\ninspect the bucket:\n%s\n", wrapCommand(rr.inspectWords, "  ", 80))
	}
}

// sentNote explains the commands other than EVALSHA a run of requests
// may send, pipelining, and fewer script calls than requests.
func sentNote(rr *redisReport, requests int) string {
	var notes []string
	if rr.Sent["eval"] > 0 {
		notes = append(notes, "eval: loading the script after NOSCRIPT")
	}
	if rr.Sent["hello"] > 0 || rr.Sent["client"] > 0 {
		notes = append(notes, "hello, client: opening connections")
	}
	if rr.RoundTrips < rr.SentTotal {
		notes = append(notes, "redisstore pipelines concurrent calls")
	}
	if rr.Sent["evalsha"] < int64(requests) {
		notes = append(notes, "the takes that leave in one pipeline share one script call")
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}

// fmtStatus formats status counts as "200: 100  429: 900", in code order.
func fmtStatus(status map[int]int, errs int) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(status)) {
		parts = append(parts, fmt.Sprintf("%d: %d", code, status[code]))
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("no response: %d", errs))
	}
	return strings.Join(parts, "  ")
}

// fmtSeconds formats d as seconds with three decimals.
func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }
