package play

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/cmd/ratebucket/internal/choices"
	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/ratebucket/ratebucket/sim"
)

// TestMain fails the package if a goroutine outlives the tests: the
// server's runs must end with their requests.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func get(t *testing.T, srv *httptest.Server, path string) (int, string, []byte) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// TestPageAndAssets: the page and its script and style are served from the
// binary, and nothing in them reaches another origin.
func TestPageAndAssets(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for path, typ := range map[string]string{"/": "text/html", "/play.js": "javascript", "/play.css": "text/css"} {
		code, ct, body := get(t, srv, path)
		if code != http.StatusOK || !strings.Contains(ct, typ) || len(body) < 500 {
			t.Fatalf("GET %s: %d %s, %d bytes", path, code, ct, len(body))
		}
		for _, remote := range []string{"http://", "https://", "//cdn"} {
			if strings.Contains(string(body), remote) && !strings.Contains(string(body), `"http://www.w3.org/2000/svg"`) {
				t.Errorf("%s refers to %s", path, remote)
			}
		}
	}
}

// TestRunMatchesSimulator: /api/run answers what sim.Run gives for the same
// configuration, one run per algorithm, timeline included.
func TestRunMatchesSimulator(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	code, _, body := get(t, srv, "/api/run?scenario=boundary-spike&algos=fixed,token&instances=3&seed=1")
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	var res struct {
		Scenario string
		Runs     []struct {
			Short    string
			Report   sim.Report
			Timeline sim.Timeline
		}
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 || res.Runs[0].Short != "fixed" || res.Runs[1].Short != "token" {
		t.Fatalf("runs %+v", res.Runs)
	}
	for _, r := range res.Runs {
		reps, err := sim.Run(context.Background(), sim.Config{Scenario: "boundary-spike",
			Algorithms: []algo.Algorithm{choices.Algorithm(r.Short)}, Instances: 3, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := reps[0]
		got := r.Timeline
		if r.Report.Total != want.Total || got.Admitted != want.Timeline.Admitted || len(got.Requests) != len(want.Timeline.Requests) ||
			got.Law.Holds != want.Timeline.Law.Holds || got.Law.Admitted != want.Timeline.Law.Admitted || got.Zoom != want.Timeline.Zoom ||
			len(got.Levels) != 1 || len(got.Levels[0].Points) != len(want.Timeline.Levels[0].Points) {
			t.Errorf("%s: the API's run differs from sim.Run's", r.Short)
		}
	}
	if res.Runs[0].Timeline.Law.Holds || !res.Runs[1].Timeline.Law.Holds {
		t.Errorf("fixed window law holds %v, token bucket %v", res.Runs[0].Timeline.Law.Holds, res.Runs[1].Timeline.Law.Holds)
	}
}

func TestParseView(t *testing.T) {
	q := url.Values{"scenario": {"custom"}, "client": {"100 at 59.5s over 490ms", "every 2s, cost 3", ""}, "cost": {"2"},
		"algos": {"sliding"}, "topology": {"per-instance"}, "instances": {"2"}, "skew": {"0,400ms"},
		"capacity": {"50"}, "rate": {"10/s"}, "seed": {"7"}, "duration": {"90s"}, "from": {"3"}}
	b, err := ParseView(q)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Traffic) != 2 || b.Traffic[0].Cost != 2 || b.Traffic[1].Cost != 3 ||
		len(b.Algorithms) != 1 || b.Algorithms[0].Name() != "slidingwindow" || len(b.Topologies) != 1 || b.Topologies[0] != sim.PerInstance ||
		b.Instances != 2 || len(b.Skew) != 2 || b.Policy.Capacity() != 50 || b.Policy.Rate().String() != "10/1s" ||
		b.Seed != 7 || b.Duration != 90*time.Second || b.Cost != 0 {
		t.Fatalf("ParseView = %+v", b)
	}
	// Token leases run the token bucket alone unless algos says otherwise
	// (and sim refuses a window with them: a 400).
	if v, err := ParseView(url.Values{"scenario": {"leases"}, "topology": {"leased"}}); err != nil ||
		len(v.Algorithms) != 1 || v.Algorithms[0].Name() != "tokenbucket" || v.Topologies[0] != sim.Leased {
		t.Fatalf("ParseView(scenario=leases&topology=leased) = %+v, %v", v, err)
	}
	// On a named scenario, cost is every request's: sim.Config.Cost.
	if v, err := ParseView(url.Values{"scenario": {"sensor"}, "cost": {"3"}}); err != nil || v.Cost != 3 || len(v.Traffic) != 0 {
		t.Fatalf("ParseView(scenario=sensor&cost=3) = %+v, %v", v, err)
	}
	for _, bad := range []string{"scenario=nope", "scenario=custom", "algos=leaky", "instances=11", "topology=mesh",
		"seed=-1", "duration=2h", "skew=soon", "capacity=0", "rate=fast", "rate=5/soon", "scenario=custom&client=at+5s",
		"scenario=sensor&cost=0", "scenario=sensor&cost=two"} {
		q, _ := url.ParseQuery(bad)
		if _, err := ParseView(q); !errors.Is(err, ErrBadQuery) {
			t.Errorf("ParseView(%s) error = %v", bad, err)
		}
	}
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, path := range []string{"/api/run?scenario=nope", "/api/run?scenario=cost&capacity=5",
		"/api/run?scenario=leases&topology=leased&algos=fixed",
		"/api/run?scenario=sensor&capacity=3&cost=4"} {
		code, _, body := get(t, srv, path)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s, want 400 with an error", path, code, body)
		}
	}
	code, _, body := get(t, srv, "/api/scenarios")
	var list []ScenarioInfo
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list) != len(sim.Scenarios()) || list[1].Name != "boundary-spike" {
		t.Errorf("GET /api/scenarios: %d %s", code, body)
	}
}

// TestRunDrawsDebt: the llm-gateway scenario's focus bucket, whose calls
// settle above their estimates, goes into debt, and the API's levels reach
// below zero for the page to draw (its scale then starts at the deepest
// debt, with a line at zero).
func TestRunDrawsDebt(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	code, _, body := get(t, srv, "/api/run?scenario=llm-gateway&algos=token&instances=1&seed=1")
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	var res struct {
		Runs []struct{ Timeline sim.Timeline }
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	low := 0.0
	for _, lv := range res.Runs[0].Timeline.Levels {
		for _, p := range lv.Points {
			low = min(low, p.Tokens)
		}
	}
	if low >= 0 {
		t.Fatalf("the lowest level drawn is %v, want debt below zero", low)
	}
}
