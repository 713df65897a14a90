package playtest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// drawnJS reads what the page drew: its summary table and, per chart, the
// marks, worst-interval highlights and level lines in it, measured by the
// browser's own layout (getBBox, getTotalLength).
const drawnJS = `({
	rows: ` + summaryJS + `,
	charts: [...document.querySelectorAll("#charts .chart")].map((c) => ({
		algo: c.dataset.algo,
		admittedMarks: c.querySelectorAll(".mark.admitted").length,
		deniedMarks: c.querySelectorAll(".mark.denied").length,
		worst: [...c.querySelectorAll("rect.worst")].map((r) => r.getBBox().width),
		levels: [...c.querySelectorAll("svg[role=img] path.level")].map((p) => p.getTotalLength()),
	})),
	from: +document.querySelector("#from").value, to: +document.querySelector("#to").value,
})`

// drawn is what drawnJS reads.
type drawn struct {
	Rows   []row
	Charts []struct {
		Algo                       string
		AdmittedMarks, DeniedMarks int
		Worst                      []float64 // each highlight's width in px
		Levels                     []float64 // each level line's length in px
	}
	From, To float64
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

// TestFirefox: the page draws in Firefox as in Chromium. Loaded by a real
// headless Firefox (see startFirefox) from the real server, it draws the
// simulator's numbers in its table and, zoomed on the boundary spike, one
// mark per request in view; a level line per store; and the worst-interval
// highlight exactly when the law breaks, in both directions (the fixed window breaks it and
// the token bucket does not on the same traffic; the token bucket breaks it
// when each instance keeps its own store, and not on a shared one).
func TestFirefox(t *testing.T) {
	f := startFirefox(t)
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
			f.open(tc.query)
			d := ffEval[drawn](f, drawnJS)
			f.shot(tc.name)
			api := apiRun(t, tc.query)
			if len(d.Rows) != len(api.Runs) || len(d.Charts) != len(api.Runs) || len(api.Runs) != len(tc.holds) {
				t.Fatalf("Firefox drew %d rows and %d charts; the simulator made %d runs", len(d.Rows), len(d.Charts), len(api.Runs))
			}
			for i, run := range api.Runs {
				if want := wantRow(api, i); d.Rows[i] != want {
					t.Errorf("summary row %d in Firefox: %+v, simulator %+v", i, d.Rows[i], want)
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

// TestFirefoxControls: in a real Firefox, a learner's keys and clicks work
// as in Chromium. A typed capacity, a clicked radio button, a click on
// "Zoom on worst interval" and a click on a chart in custom traffic each
// rerun the simulator (or redraw), put the view in the URL, and leave the
// simulator's numbers in the table.
//
// A headless Firefox window is never the active one, and Firefox then
// fires no blur, so no change event, when Tab leaves a field
// (mozilla/geckodriver#1131), and does not activate a focused button on
// Enter or Space (the key events reach it; no click follows). So the
// capacity is committed with Enter, which fires change and submits the
// form as it does for a person, and the zoom button is clicked; keyboard
// use is tested in Chromium (TestKeyboardOnly).
func TestFirefoxControls(t *testing.T) {
	f := startFirefox(t)
	f.open("")
	if ua := ffEval[string](f, "navigator.userAgent"); !strings.Contains(ua, "Firefox/") {
		t.Fatalf("the page runs in %q", ua)
	}
	// step does act, waits for the drawing it causes, and compares the
	// table with the simulator's answer for the URL the page then shows.
	step := func(name string, act func()) apiResult {
		t.Helper()
		n := ffEval[int](f, "+document.body.dataset.renders")
		act()
		f.ready(n + 1)
		loc := f.location()
		api := apiRun(t, "?"+strings.SplitN(loc, "?", 2)[1])
		rows := ffEval[[]row](f, summaryJS)
		if len(rows) != len(api.Runs) {
			t.Fatalf("%s: %d rows in Firefox, %d runs", name, len(rows), len(api.Runs))
		}
		for i := range rows {
			if want := wantRow(api, i); rows[i] != want {
				t.Errorf("%s: row %d in Firefox %+v, simulator %+v", name, i, rows[i], want)
			}
		}
		return api
	}
	step("capacity typed", func() { f.click("#capacity"); f.keys("50" + ffEnter) })
	api := step("per-instance clicked", func() { f.click(`input[name=topology][value="per-instance"]`) })
	if loc := f.location(); !strings.Contains(loc, "capacity=50") || !strings.Contains(loc, "topology=per-instance") {
		t.Errorf("URL after typing and clicking: %s", loc)
	}
	step("zoom-worst clicked", func() { f.click("#zoom-worst") })
	for _, r := range api.Runs {
		if !r.Timeline.Law.Holds {
			want := fmt.Sprintf("from=%g&to=%g", float64(r.Timeline.Zoom.From)/1e9, float64(r.Timeline.Zoom.To)/1e9)
			if loc := f.location(); !strings.Contains(loc, want) {
				t.Errorf("the zoom button in Firefox: %s, want %s (the %s's worst interval)", loc, want, r.Short)
			}
			break
		}
	}
	f.shot("controls")

	f.open("?scenario=custom&client=every+2s&from=0&to=120")
	xy := ffEval[[]float64](f, `(() => { const s = document.querySelector('.chart[data-algo="token"] svg[role=img]');
		s.scrollIntoView({block: "center"});
		const r = s.getBoundingClientRect(), W = +s.getAttribute("width");
		return [r.left + (48 + (W - 48 - 28) / 2) * r.width / W, r.top + 60]; })()`)
	step("burst clicked", func() { f.clickXY(xy[0], xy[1]) })
	var at float64
	clients := ffEval[string](f, `document.querySelector("#clients").value`)
	if _, err := fmt.Sscanf(clients, "every 2s, 50 at %gs over 200ms", &at); err != nil || at < 59.5 || at > 60.5 {
		t.Errorf("after a click at 60 s in Firefox the traffic is %q", clients)
	}
	f.shot("burst-clicked")
}
