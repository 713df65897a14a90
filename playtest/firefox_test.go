package playtest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Firefox cannot be driven by chromedp, and its headless mode has no
// DevTools protocol to poll with. So the page has a test mode (see the end
// of play.js's drawing code): given ?report=PATH it POSTs what it drew,
// once, to PATH on its own origin, and holds its load event until then.
// firefox --headless --screenshot shoots at the load event, so one run of
// Firefox both reports and leaves a screenshot of the drawn page.

// reportPath is where the test server receives the page's reports, next to
// the playground on the same origin (the page's CSP allows no other).
const reportPath = "/playtest/report/"

// reports receives them.
var reports = &reportBox{byID: map[string]*report{}}

// drawn is what the page posts: its summary table and, per chart, the
// marks, worst-interval highlights and level lines in it, measured by the
// browser's own layout (getBBox, getTotalLength).
type drawn struct {
	Error     string
	UserAgent string
	Rows      []map[string]string
	Charts    []struct {
		Algo                       string
		AdmittedMarks, DeniedMarks int
		Worst                      []float64 // each highlight's width in px
		Levels                     []float64 // each level line's length in px
		Label                      string
	}
	From, To float64
}

// report is one expected post.
type report struct {
	posted chan struct{} // closed when got is set
	got    drawn
}

// reportBox serves reportPath: POST ID stores a report, GET ID?hold
// answers once it has been stored (the page's load event waits for it).
type reportBox struct {
	mu   sync.Mutex
	byID map[string]*report
}

func (b *reportBox) expect(id string) *report {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := &report{posted: make(chan struct{})}
	b.byID[id] = r
	return r
}

func (b *reportBox) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b.mu.Lock()
	r := b.byID[strings.TrimPrefix(req.URL.Path, reportPath)]
	b.mu.Unlock()
	if r == nil {
		http.NotFound(w, req)
		return
	}
	switch req.Method {
	case http.MethodPost:
		select {
		case <-r.posted:
			http.Error(w, "posted twice", http.StatusConflict)
			return
		default:
		}
		if err := json.NewDecoder(req.Body).Decode(&r.got); err != nil {
			r.got.Error = "the test could not decode the report: " + err.Error()
		}
		close(r.posted)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		select {
		case <-r.posted:
		case <-req.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent) // an image that fails to load ends the wait as well
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

// firefoxes are the names Firefox goes by, Debian's first.
var firefoxes = []string{"firefox-esr", "firefox"}

// noNetwork is the profile's user.js: no telemetry, updates or safe
// browsing, and every request beyond the loopback interface sent to a
// proxy that does not exist, so the browser reaches nothing but the test
// server.
const noNetwork = `user_pref("network.proxy.type", 1);
user_pref("network.proxy.http", "127.0.0.1");
user_pref("network.proxy.http_port", 9);
user_pref("network.proxy.ssl", "127.0.0.1");
user_pref("network.proxy.ssl_port", 9);
user_pref("network.proxy.no_proxies_on", "127.0.0.1");
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
user_pref("app.update.enabled", false);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.safebrowsing.malware.enabled", false);
user_pref("browser.safebrowsing.phishing.enabled", false);
user_pref("browser.safebrowsing.downloads.enabled", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("datareporting.healthreport.uploadEnabled", false);
user_pref("toolkit.telemetry.enabled", false);
user_pref("extensions.update.enabled", false);
`

// inFirefox loads the page at query in a new headless Firefox, keeps its
// screenshot as testdata/artifacts/firefox-NAME.png and returns what the
// page drew. It skips the test when no Firefox is installed.
func inFirefox(t *testing.T, name, query string) drawn {
	t.Helper()
	bin := lookPath(firefoxes)
	if bin == "" {
		t.Skip("no Firefox on PATH (tried " + strings.Join(firefoxes, ", ") + "): apt-get install firefox-esr, as .ci/run does")
	}
	profile := t.TempDir()
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(noNetwork), 0o644); err != nil {
		t.Fatal(err)
	}
	r := reports.expect(name)
	q, err := url.ParseQuery(strings.TrimPrefix(query, "?"))
	if err != nil {
		t.Fatal(err)
	}
	q.Set("report", reportPath+name)
	png := artifact(t, "firefox-"+name+".png")
	_ = os.Remove(png)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-remote", "--profile", profile,
		"--window-size=1400,1700", "--screenshot", png, baseURL+"/?"+q.Encode())
	cmd.Env = append(os.Environ(), "MOZ_HEADLESS=1", "HOME="+profile)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	select {
	case <-r.posted:
	default:
		t.Fatalf("%s exited (%v) and the page posted nothing:\n%s", bin, err, out)
	}
	if err != nil {
		t.Errorf("%s: %v\n%s", bin, err, out)
	}
	if r.got.Error != "" {
		t.Fatalf("the page in Firefox: %s", r.got.Error)
	}
	if !strings.Contains(r.got.UserAgent, "Firefox/") {
		t.Errorf("the page ran in %q, not Firefox", r.got.UserAgent)
	}
	if _, err := os.Stat(png); err != nil {
		t.Errorf("no screenshot: %v", err)
	} else {
		t.Logf("screenshot: %s", png)
	}
	return r.got
}

// TestFirefox: the page works in Firefox as in Chromium. Loaded by a real
// headless Firefox from the real server, it draws the simulator's numbers
// in its table and, zoomed on the boundary spike, one mark per request in
// view; a level line per store; and the worst-interval highlight exactly
// when the law breaks, in both directions (the fixed window breaks it and
// the token bucket does not on the same traffic; the token bucket breaks it
// when each instance keeps its own store, and not on a shared one).
func TestFirefox(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		zoomed      bool
		holds       map[string]bool // the law at the followed key, by algorithm
	}{
		{"boundary-spike", "?scenario=boundary-spike&from=59&to=61", true,
			map[string]bool{"token": true, "fixed": false, "sliding": true}},
		{"abuser-shared", "?scenario=abuser&algos=token", false, map[string]bool{"token": true}},
		{"abuser-per-instance", "?scenario=abuser&topology=per-instance&algos=token", false, map[string]bool{"token": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := inFirefox(t, tc.name, tc.query)
			api := apiRun(t, tc.query)
			if len(d.Rows) != len(api.Runs) || len(d.Charts) != len(api.Runs) || len(api.Runs) != len(tc.holds) {
				t.Fatalf("Firefox drew %d rows and %d charts; the simulator made %d runs", len(d.Rows), len(d.Charts), len(api.Runs))
			}
			for i, run := range api.Runs {
				m := d.Rows[i]
				got := row{Algo: m["algo"], Admitted: m["admitted"], Denied: m["denied"], Law: m["law"],
					Bound: m["bound"], In: m["in-interval"], Total: m["total"]}
				if want := wantRow(api, i); got != want {
					t.Errorf("summary row %d in Firefox: %+v, simulator %+v", i, got, want)
				}
				c := d.Charts[i]
				if c.Algo != run.Short || run.Timeline.Law.Holds != tc.holds[run.Short] {
					t.Fatalf("chart %d is %s; the simulator's run %d is %s with law holds %v, want %v",
						i, c.Algo, i, run.Short, run.Timeline.Law.Holds, tc.holds[run.Short])
				}
				if want := map[bool]int{true: 0, false: 1}[run.Timeline.Law.Holds]; len(c.Worst) != want {
					t.Errorf("%s: %d worst-interval highlights in Firefox, want %d", c.Algo, len(c.Worst), want)
				}
				if len(c.Levels) == 0 || c.Levels[0] < 100 {
					t.Errorf("%s: level lines of lengths %v px", c.Algo, c.Levels)
				}
				if tc.zoomed {
					adm, den := marksIn(api, i, 59*time.Second, 61*time.Second)
					if c.AdmittedMarks != adm || c.DeniedMarks != den {
						t.Errorf("%s in [59s, 61s): Firefox draws %d admitted and %d denied marks, simulator has %d and %d",
							c.Algo, c.AdmittedMarks, c.DeniedMarks, adm, den)
					}
					if c.Algo == "fixed" && (adm != 199 || c.Worst[0] < 200) {
						t.Errorf("fixed window: %d admitted in [59s, 61s), highlight %v px wide", adm, c.Worst)
					}
				}
			}
			if tc.zoomed && (d.From != 59 || d.To != 61) {
				t.Errorf("Firefox drew [%vs, %vs], want the URL's [59s, 61s]", d.From, d.To)
			}
		})
	}
}
