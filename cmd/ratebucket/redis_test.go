package main

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestDemoRedis runs the demo on a real Redis: three instances, each with
// its own client, share one bucket, and every request costs at most one
// script call (fewer when the takes of one pipeline share a call).
func TestDemoRedis(t *testing.T) {
	srv := redistest.Start(t)
	r := runDemoJSON(t, "--redis", srv.Addr, "-n", "200", "-c", "20", "--capacity", "20", "--rate", "2")
	checkLaw(t, r, 200, 20, 2)
	if r.Stores != 1 || !strings.HasPrefix(r.Store, "redisstore on "+srv.Addr) {
		t.Fatalf("store %q, %d stores; want one redisstore", r.Store, r.Stores)
	}
	rr := r.Redis
	if rr == nil {
		t.Fatal("no Redis report")
	}
	// At most one EVALSHA per request (one for all the takes of a
	// pipeline), no EVAL (the demo loaded the script before the run), and
	// nothing else but connection set-up, in at most one round trip per
	// command (fewer when redisstore pipelines them). checkLaw has each
	// request's decision.
	for cmd, n := range rr.Sent {
		if cmd == "evalsha" && (n < 1 || n > 200) || cmd != "evalsha" && cmd != "hello" && cmd != "client" {
			t.Fatalf("sent %v: want 1 to 200 EVALSHA for 200 requests and only connection set-up besides", rr.Sent)
		}
	}
	if rr.RoundTrips < 1 || rr.RoundTrips > rr.SentTotal || rr.PerRequest != float64(rr.RoundTrips)/200 {
		t.Fatalf("%d round trips for %d commands (%v per request)", rr.RoundTrips, rr.SentTotal, rr.PerRequest)
	}
	if rr.Server["evalsha"] != rr.Sent["evalsha"] || rr.Server["eval"] != rr.Sent["eval"] {
		t.Fatalf("server ran %v, clients sent %v: want the same script calls", rr.Server, rr.Sent)
	}
	// httplimit's compact layout: the demo's bucket, whose Redis key is
	// rb:demo:<run>:h:default:user{test-user} (42 bytes), costs 88 bytes
	// (104 with the layout before, http:default:*:user:{test-user}).
	want := "h:default:user{test-user}"
	if len(rr.Keys) != 1 || rr.Keys[0] != want || rr.BytesPerKey <= 0 || rr.BytesPerKey > 88 {
		t.Fatalf("keys %v, %d bytes per key; want [%s] and at most 88 bytes", rr.Keys, rr.BytesPerKey, want)
	}
	// The key --serve prints for inspect is the one httplimit uses, for a
	// user and for an anonymous client keyed by IP.
	p := algo.PerSecond(2).Burst(20)
	if got, err := demoKey(&demoConfig{policy: p, user: "test-user"}); got != want || err != nil {
		t.Fatalf("demoKey = %q, %v; httplimit used %q", got, err, want)
	}
	anon := runDemoJSON(t, "--redis", srv.Addr, "-n", "20", "-c", "2", "--capacity", "5", "--rate", "1", "--user", "")
	if got, err := demoKey(&demoConfig{policy: p}); anon.Redis == nil || len(anon.Redis.Keys) != 1 || anon.Redis.Keys[0] != got || err != nil {
		t.Fatalf("anonymous run used keys %v, demoKey says %q, %v", anon.Redis, got, err)
	}
}

func TestDemoRedisText(t *testing.T) {
	srv := redistest.Start(t)
	stdout, stderr, code := runCLI(t, "demo", "--redis", srv.Addr, "-n", "40", "-c", "4", "--capacity", "10", "--rate", "1")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	wantText(t, stdout, "store: redisstore on "+srv.Addr+", shared", "200: 10  429: 30", " EVALSHA for 40 requests in ", "bytes per key (MEMORY USAGE)")
	// As many script calls as requests, or fewer and the note that says why.
	m := regexp.MustCompile(`(\d+) EVALSHA for 40 requests in `).FindStringSubmatch(stdout)
	if m == nil || m[1] != "40" && !strings.Contains(strings.Join(strings.Fields(stdout), " "), "the takes that leave in one pipeline share one script call") {
		t.Errorf("script calls %v without the note that explains them:\n%s", m, stdout)
	}
}

// TestInspectReset charges a real key through redisstore, reads it back
// with inspect, clears it with reset, and does the same for a key holding
// garbage, the case reset is documented for.
func TestInspectReset(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	rdb := srv.Client()
	rs, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	p := algo.PerMinute(1).Burst(10) // slow, so the numbers hold however slow the machine
	ctx := context.Background()
	if _, err := rs.Take(ctx, store.Request{Key: "user:42", Policy: p, Cost: 3}); err != nil {
		t.Fatal(err)
	}
	policy := []string{"--redis", srv.Addr, "--prefix", prefix, "--capacity", "10", "--rate", "1/m"}

	stdout, stderr, code := runCLI(t, append([]string{"inspect", "--json", "user:42", "user:absent"}, policy...)...)
	if code != exitOK {
		t.Fatalf("inspect exited %d: %s", code, stderr)
	}
	rows := decodeInspect(t, stdout) // strictly: the fields inspectJSON names, none twice
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2", len(rows))
	}
	// 3 of 10 taken a moment ago at 1 per minute: 7 left, full again in
	// at most 3 minutes, with a TTL to match, in milliseconds; the
	// times in RFC 3339.
	got := rows[0]
	const minute = int64(time.Minute / time.Millisecond)
	if !got.Exists || got.Tokens != 7 || got.Capacity != 10 || got.FullInMS <= 2*minute || got.FullInMS > 3*minute ||
		got.TTLMS == nil || *got.TTLMS <= 2*minute || *got.TTLMS > 3*minute || got.Key != "user:42" ||
		got.RedisKey != prefix+"user:42" || got.DeficitUnits <= 0 {
		t.Fatalf("inspect user:42 = %+v", got)
	}
	for _, at := range []string{got.EvaluatedAt, got.UpdatedAt} {
		if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
			t.Fatalf("inspect user:42: %v in %+v", err, got)
		}
	}
	if a := rows[1]; a.Exists || a.Tokens != 10 || a.FullInMS != 0 || a.UpdatedAt != "" || a.TTLMS == nil || *a.TTLMS != 0 {
		t.Fatalf("inspect of an absent key = %+v, want a full bucket", a)
	}
	for _, name := range []string{`"key"`, `"redis_key"`, `"exists"`, `"evaluated_at"`, `"tokens"`, `"capacity"`,
		`"full_in_ms"`, `"deficit_units"`, `"updated_at"`, `"ttl_ms"`} {
		if !strings.Contains(stdout, name+":") {
			t.Fatalf("inspect --json has no %s:\n%s", name, stdout)
		}
	}

	stdout, _, code = runCLI(t, append([]string{"inspect", "user:42"}, policy...)...)
	if code != exitOK || !strings.Contains(stdout, "TOKENS") || !strings.Contains(stdout, prefix+"user:42") {
		t.Fatalf("inspect table (exit %d):\n%s", code, stdout)
	}

	stdout, stderr, code = runCLI(t, "reset", "--redis", srv.Addr, "--prefix", prefix, "user:42")
	if code != exitOK || !strings.Contains(stdout, "reset user:42 ("+prefix+"user:42)") {
		t.Fatalf("reset exited %d: %s %s", code, stdout, stderr)
	}
	if n, err := rdb.Exists(ctx, prefix+"user:42").Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after reset: %d %v", n, err)
	}

	// Garbage in a bucket's key: inspect reports it and fails; reset
	// clears it; the bucket then reads as full.
	if err := rdb.HSet(ctx, prefix+"bad", "tokens", "lots").Err(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runCLI(t, append([]string{"inspect", "bad"}, policy...)...)
	if code != exitFailure || !strings.Contains(stdout, "corrupt") {
		t.Fatalf("inspect of garbage exited %d:\n%s", code, stdout)
	}
	wantOneLine(t, stderr, "ratebucket reset")
	if _, _, code = runCLI(t, "reset", "--redis", srv.Addr, "--prefix", prefix, "bad"); code != exitOK {
		t.Fatalf("reset of garbage exited %d", code)
	}
	if b, err := rs.Inspect(ctx, "bad", p); err != nil || b.Exists || b.Tokens != 10 {
		t.Fatalf("after reset: %+v, %v", b, err)
	}
}

func TestInspectUsage(t *testing.T) {
	srv := redistest.Start(t) // for the checks made once connected
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"inspect without redis", []string{"inspect", "--capacity", "1", "--rate", "1", "k"}, "--redis URL is required"},
		{"inspect without policy", []string{"inspect", "--redis", "127.0.0.1:1", "k"}, "--capacity N --rate R"},
		{"inspect without rate", []string{"inspect", "--redis", "127.0.0.1:1", "--capacity", "5", "k"}, "--capacity N --rate R"},
		{"inspect without keys", []string{"inspect", "--redis", "127.0.0.1:1", "--capacity", "5", "--rate", "1"}, "no KEY given"},
		{"reset without keys", []string{"reset", "--redis", "127.0.0.1:1"}, "no KEY given"},
		{"reset with an empty key", []string{"reset", "--redis", "127.0.0.1:1", ""}, "empty KEY"},
		{"reset without redis", []string{"reset", "k"}, "--redis URL is required"},
		{"prefix with a hash tag", []string{"reset", "--redis", "REDIS", "--prefix", "{app}:", "k"}, "prefix contains a brace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := slices.Clone(tt.args)
			if i := slices.Index(args, "REDIS"); i >= 0 {
				args[i] = srv.Addr
			}
			_, stderr, code := runCLI(t, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d: %s", code, exitUsage, stderr)
			}
			wantOneLine(t, stderr, tt.want)
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUnreachableRedis: every subcommand that takes --redis fails with one
// line and exit code 1 when nothing answers.
func TestUnreachableRedis(t *testing.T) {
	addr := closedPort(t)
	for _, args := range [][]string{
		{"demo", "-n", "10"},
		{"bench", "--duration", "10ms"},
		{"inspect", "--capacity", "1", "--rate", "1", "k"},
		{"reset", "k"},
	} {
		t.Run(args[0], func(t *testing.T) {
			stdout, stderr, code := runCLI(t, append(args, "--redis", "redis://"+addr)...)
			if code != exitFailure {
				t.Fatalf("exit %d, want %d: %s", code, exitFailure, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q", stdout)
			}
			wantOneLine(t, stderr, "ratebucket "+args[0]+": cannot reach Redis at "+addr)
		})
	}
}

func TestBenchRedis(t *testing.T) {
	srv := redistest.Start(t)
	stdout, stderr, code := runCLI(t, "bench", "--redis", srv.Addr, "--duration", "50ms", "--concurrency", "1,8", "--keys", "50")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rows := benchRows(t, stdout)
	if len(rows) != 2 || !strings.Contains(stdout, "redisstore on "+srv.Addr+", policy") {
		t.Fatalf("bench on Redis:\n%s", stdout)
	}
	stdout, _, code = runCLI(t, "bench", "--redis", srv.Addr, "--duration", "30ms", "--concurrency", "4", "--pipeline=false")
	if code != exitOK || len(benchRows(t, stdout)) != 1 || !strings.Contains(stdout, "(no pipelining)") {
		t.Fatalf("bench --pipeline=false:\n%s", stdout)
	}
	// The benchmark cleans up after itself.
	if n, err := srv.Client().DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys left in Redis after bench (%v)", n, err)
	}
}

// TestCluster runs bench, inspect and reset against a local Redis Cluster
// through --cluster: keys spread over the three masters.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	url := "redis://" + cl.Addrs[0] + "?addr=" + cl.Addrs[1] // go-redis finds the third itself
	stdout, stderr, code := runCLI(t, "bench", "--cluster", "--redis", url, "--duration", "30ms", "--concurrency", "4", "--keys", "30")
	if code != exitOK || !strings.Contains(stdout, "redisstore on cluster ") {
		t.Fatalf("bench on the cluster exited %d: %s%s", code, stdout, stderr)
	}
	prefix := redistest.Prefix(t)
	rs, err := redisstore.New(cl.Client(), redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	p := algo.PerHour(60).Burst(5)
	keys := []string{"user:1", "user:2", "user:3", "user:4"}
	for _, k := range keys {
		if _, err := rs.Take(context.Background(), store.Request{Key: k, Policy: p, Cost: 2}); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"inspect", "--cluster", "--redis", url, "--prefix", prefix, "--capacity", "5", "--rate", "60/h", "--json"}, keys...)
	stdout, stderr, code = runCLI(t, args...)
	if code != exitOK {
		t.Fatalf("inspect on the cluster exited %d: %s%s", code, stdout, stderr)
	}
	rows := decodeInspect(t, stdout)
	if len(rows) != 4 {
		t.Fatalf("inspect on the cluster: %d rows, want 4:\n%s", len(rows), stdout)
	}
	for _, r := range rows {
		if !r.Exists || r.Tokens != 3 {
			t.Fatalf("inspect %s = %+v, want 3 tokens left", r.Key, r)
		}
	}
	if _, stderr, code = runCLI(t, append([]string{"reset", "--cluster", "--redis", url, "--prefix", prefix}, keys...)...); code != exitOK {
		t.Fatalf("reset on the cluster exited %d: %s", code, stderr)
	}
	for _, k := range keys {
		if b, err := rs.Inspect(context.Background(), k, p); err != nil || b.Exists {
			t.Fatalf("%s after reset: %+v %v", k, b, err)
		}
	}
}

// TestDemoFailModes: demo --serve on a real redis-server that the test
// first hangs (DEBUG SLEEP: connected, but no reply) and then kills. Up,
// both routes share the user's bucket. While Redis hangs longer than
// --timeout 150ms, and once it is dead, GET /api/feed is served without
// rate-limit headers (fail-open) and POST /api/login answers 503 with
// Retry-After: 1 (fail-closed); while it hangs, each answer comes after
// about the timeout, not redisstore's default of one second.
func TestDemoFailModes(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("hangs and kills the server: needs one of its own, not REDIS_URL")
	}
	base, stop := serveDemo(t, "--redis", srv.Addr, "-n", "0", "--instances", "1", "--timeout", "150ms",
		"--capacity", "5", "--rate", "1/m")
	feed, login := func() (*http.Response, string) { return call(t, http.MethodGet, base+"/api/feed") },
		func() (*http.Response, string) { return call(t, http.MethodPost, base+"/api/login") }
	check := func(step string, resp *http.Response, body string, status int, remaining, retryAfter string) {
		t.Helper()
		h := resp.Header
		if resp.StatusCode != status || h.Get("X-RateLimit-Remaining") != remaining || h.Get("Retry-After") != retryAfter {
			t.Errorf("%s: %d %q, X-RateLimit-Remaining %q, Retry-After %q; want %d, %q, %q",
				step, resp.StatusCode, body, h.Get("X-RateLimit-Remaining"), h.Get("Retry-After"), status, remaining, retryAfter)
		}
	}
	resp, body := feed()
	check("up: feed", resp, body, 200, "4", "")
	resp, body = login()
	check("up: login", resp, body, 200, "3", "")

	// Hang the server: one client's DEBUG SLEEP blocks it for everyone.
	// Wait for the event, a PING that gets no answer, not for a duration.
	sleeper := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second, MaxRetries: -1})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(context.Background(), "DEBUG", "SLEEP", "5").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer probe.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := probe.Ping(ctx).Err()
		cancel()
		if err != nil {
			break
		}
	}
	for _, c := range []struct {
		name   string
		do     func() (*http.Response, string)
		status int
		retry  string
	}{{"hung: feed is fail-open", feed, 200, ""}, {"hung: login is fail-closed", login, 503, "1"}} {
		start := time.Now()
		resp, body := c.do()
		if took := time.Since(start); took >= time.Second {
			t.Errorf("%s: answered after %v: --timeout 150ms was not applied", c.name, took)
		}
		check(c.name, resp, body, c.status, "", c.retry)
		if c.status == 503 && !strings.Contains(body, `"error":"rate_limiter_unavailable"`) {
			t.Errorf("%s: body %q", c.name, body)
		}
	}

	srv.Kill(t)
	if err := <-slept; err == nil {
		t.Error("DEBUG SLEEP answered: the server was not killed while it slept")
	}
	resp, body = feed()
	check("dead: feed is fail-open", resp, body, 200, "", "")
	resp, body = login()
	check("dead: login is fail-closed", resp, body, 503, "", "1")
	stop()
}
