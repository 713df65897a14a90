package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/observe/promtext"
)

// metrics GETs base/metrics and returns its lines.
func metrics(t *testing.T, base string) []string {
	t.Helper()
	resp, body := call(t, http.MethodGet, base+"/metrics")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != promtext.ContentType {
		t.Fatalf("GET /metrics: %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return strings.Split(body, "\n")
}

// wantLines fails unless every line in want is one of lines.
func wantLines(t *testing.T, lines []string, want ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, l := range lines {
		have[l] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("no line %s in\n%s", w, strings.Join(lines, "\n"))
		}
	}
}

// TestDemoMetrics: demo --serve exposes the decisions of every instance
// at /metrics, labelled with the route pattern and the limit.
func TestDemoMetrics(t *testing.T) {
	base, stop := serveDemo(t, "-n", "0", "--instances", "2", "--capacity", "3", "--rate", "1/h")
	for range 3 {
		call(t, http.MethodGet, base+"/api/feed")
	}
	call(t, http.MethodPost, base+"/api/login") // the same bucket, empty
	wantLines(t, metrics(t, base),
		"# TYPE ratebucket_decisions_total counter",
		`ratebucket_decisions_total{policy="default",result="allowed",route="GET /api/feed",store="memory"} 3`,
		`ratebucket_decisions_total{policy="default",result="denied",route="GET /api/feed",store="memory"} 0`,
		`ratebucket_decisions_total{policy="default",result="denied",route="POST /api/login",store="memory"} 1`,
		"# TYPE ratebucket_store_latency_seconds histogram",
	)
	stop()
}

// TestDemoMetricsRedis: on Redis, every call is timed and the pipeline
// batches add up to the calls.
func TestDemoMetricsRedis(t *testing.T) {
	srv := redistest.Start(t)
	base, stop := serveDemo(t, "--redis", srv.Addr, "-n", "0", "--instances", "1", "--capacity", "3", "--rate", "1/h")
	for range 4 {
		call(t, http.MethodGet, base+"/api/feed")
	}
	wantLines(t, metrics(t, base),
		`ratebucket_decisions_total{policy="default",result="allowed",route="GET /api/feed",store="redis"} 3`,
		`ratebucket_decisions_total{policy="default",result="denied",route="GET /api/feed",store="redis"} 1`,
		`ratebucket_store_latency_seconds_count{store="redis"} 4`,
		`ratebucket_pipeline_batch_size_sum{store="redis"} 4`,
	)
	stop()
}
