package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// runDemoJSON runs the demo with --json and decodes its report.
func runDemoJSON(t *testing.T, args ...string) demoReport {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{"demo", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("demo exited %d: %s", code, stderr)
	}
	var r demoReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, stdout)
	}
	return r
}

// checkLaw asserts the token bucket's law on a demo run of a shared store:
// capacity ≤ admitted ≤ capacity + ⌊rate·elapsed⌋, with the bound computed
// here from the measured elapsed time, and every response accounted for.
func checkLaw(t *testing.T, r demoReport, requests int, capacity, perSecond int64) {
	t.Helper()
	if got := r.Status[200] + r.Status[429]; got != requests || r.Errors != 0 {
		t.Fatalf("status %v, %d errors (%s): want %d answers, all 200 or 429", r.Status, r.Errors, r.FirstError, requests)
	}
	if int64(r.Status[200]) != r.Admitted || r.Outcomes["denied"] != r.Status[429] {
		t.Fatalf("200s %d, 429s %d, but the middleware saw %v", r.Status[200], r.Status[429], r.Outcomes)
	}
	bound := capacity + r.ElapsedUS*perSecond/1_000_000
	if r.Admitted < capacity || r.Admitted > bound {
		t.Fatalf("admitted %d in %dµs, want between capacity %d and capacity + ⌊rate·elapsed⌋ = %d", r.Admitted, r.ElapsedUS, capacity, bound)
	}
	if r.Bound != bound || !r.LawHolds {
		t.Fatalf("report says bound %d holds=%v, want %d true", r.Bound, r.LawHolds, bound)
	}
	if r.FromBurst != capacity || r.Refilled != r.Admitted-capacity {
		t.Fatalf("from burst %d + refilled %d, want %d + %d", r.FromBurst, r.Refilled, capacity, r.Admitted-capacity)
	}
	if r.Limiter.P50 <= 0 || r.Request.P50 <= 0 || r.Request.P999 < r.Request.P50 {
		t.Fatalf("latencies %+v %+v", r.Limiter, r.Request)
	}
}

func TestDemoMemstore(t *testing.T) {
	r := runDemoJSON(t, "-n", "200", "-c", "20", "--capacity", "20", "--rate", "2")
	checkLaw(t, r, 200, 20, 2)
	if r.Instances != 3 || r.Stores != 1 || r.Redis != nil {
		t.Fatalf("instances %d stores %d redis %v: want 3 instances on one memstore", r.Instances, r.Stores, r.Redis)
	}
}

// TestDemoRefill paces the load so that refill shows: 200 requests over
// about half a second against 20 per second.
func TestDemoRefill(t *testing.T) {
	r := runDemoJSON(t, "-n", "200", "-c", "4", "--qps", "400", "--capacity", "5", "--rate", "20/s")
	checkLaw(t, r, 200, 5, 20)
	if r.ElapsedUS < 450_000 {
		t.Fatalf("paced run took %dµs, want about 500ms", r.ElapsedUS)
	}
	if r.Refilled < 1 {
		t.Fatalf("nothing admitted by refill in %dµs at 20/s", r.ElapsedUS)
	}
}

func TestDemoAnonymousIsKeyedByIP(t *testing.T) {
	r := runDemoJSON(t, "-n", "60", "-c", "6", "--capacity", "10", "--rate", "1", "--user", "")
	checkLaw(t, r, 60, 10, 1)
}

// TestDemoPerInstance shows the broken setup: three memstores admit three
// times the limit, and the report says the law is violated.
func TestDemoPerInstance(t *testing.T) {
	r := runDemoJSON(t, "--per-instance", "--instances", "3", "-n", "150", "-c", "6", "--capacity", "10", "--rate", "1")
	if r.Stores != 3 || r.Admitted < 30 || r.LawHolds {
		t.Fatalf("per-instance run: %d stores admitted %d (bound %d, holds %v); want 3 stores admitting ≥ 30, law broken",
			r.Stores, r.Admitted, r.Bound, r.LawHolds)
	}
}

func TestDemoText(t *testing.T) {
	stdout, stderr, code := runCLI(t, "demo", "-n", "50", "-c", "5", "--capacity", "10", "--rate", "2")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	wantText(t, stdout,
		"store: memstore (in-process), shared by all instances",
		"per user (x-user-id header, demo only), else per IP",
		"responses  200: 10  429: 40",
		"admitted   10 = 10 from the full bucket + 0 refilled",
		": holds",
		"limiter", "request",
	)
}

// serveDemo runs demo --serve with args through runContext, as a user
// would from the shell, and returns the base URL of the first instance
// (http://127.0.0.1:PORT) and a stop that interrupts the demo as Ctrl-C
// does and checks that it exits cleanly. stop also runs at cleanup.
func serveDemo(t *testing.T, args ...string) (base string, stop func()) {
	t.Helper()
	base, _, stop = serveDemoHead(t, args...)
	return base, stop
}

// serveDemoHead is serveDemo, also returning the lines the demo printed
// up to its first URL.
func serveDemoHead(t *testing.T, args ...string) (base string, head []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr strings.Builder
	done := make(chan int)
	go func() {
		code := runContext(ctx, append([]string{"demo", "--serve"}, args...), pw, &stderr)
		pw.Close()
		done <- code
	}()
	url := ""
	sc := bufio.NewScanner(pr)
	for url == "" && sc.Scan() {
		head = append(head, sc.Text())
		if f := strings.Fields(sc.Text()); len(f) == 1 && strings.HasSuffix(f[0], "/api/feed") {
			url = f[0]
		}
	}
	go io.Copy(io.Discard, pr) // the rest of the output
	if url == "" {
		cancel()
		code := <-done
		t.Fatalf("demo --serve exited %d without printing a URL: %s", code, stderr.String())
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != exitOK {
				t.Errorf("demo --serve exited %d after interrupt: %s", code, stderr.String())
			}
		})
	}
	t.Cleanup(stop)
	return strings.TrimSuffix(url, "/api/feed"), head, stop
}

// call sends one request as the demo's user and returns the response with
// its body read.
func call(t *testing.T, method, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("x-user-id", "serve-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, strings.TrimSpace(string(body))
}

// TestDemoServe runs --serve, sends requests of its own to the routes the
// demo serves, and stops the demo the way Ctrl-C does.
func TestDemoServe(t *testing.T) {
	base, stop := serveDemo(t, "-n", "0", "--instances", "2")
	for _, c := range []struct{ method, path, remaining string }{
		{http.MethodGet, "/api/feed", "99"},
		{http.MethodPost, "/api/login", "98"}, // the same bucket
	} {
		resp, body := call(t, c.method, base+c.path)
		if resp.StatusCode != 200 || body != `{"ok":true}` || resp.Header.Get("X-RateLimit-Limit") != "100" ||
			resp.Header.Get("X-RateLimit-Remaining") != c.remaining {
			t.Fatalf("%s %s: %d %q, X-RateLimit-Limit %q, Remaining %q; want 200, 100, %s", c.method, c.path, resp.StatusCode, body,
				resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"), c.remaining)
		}
	}
	stop()
}

// TestInterrupted: Ctrl-C stops a subcommand and says so in one line.
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{{"demo", "-n", "100"}, {"bench", "--duration", "1s"}, {"sim"}} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := runContext(ctx, args, &stdout, &stderr); code != exitFailure {
				t.Fatalf("exit %d, stdout %q", code, stdout.String())
			}
			wantOneLine(t, stderr.String(), "ratebucket "+args[0]+": interrupted")
		})
	}
}
