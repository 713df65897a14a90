package playtest

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestCountsMatchSimulator: the numbers on the page are the simulator's.
// The summary table shows each algorithm's admitted and denied requests as
// /api/run reports them, and zoomed on the boundary spike, where every
// request has its own mark, the page draws one ▲ per admitted request and
// one ✕ per denied one in view.
func TestCountsMatchSimulator(t *testing.T) {
	ctx := tab(t)
	const view = "?scenario=boundary-spike&from=59&to=61"
	open(t, ctx, view)
	shot(t, ctx, "boundary-spike-zoomed")
	api := apiRun(t, "?scenario=boundary-spike")
	rows := summary(t, ctx)
	if len(rows) != len(api.Runs) || len(rows) != 3 {
		t.Fatalf("%d rows on the page, %d runs in the API", len(rows), len(api.Runs))
	}
	for i, r := range api.Runs {
		if want := wantRow(api, i); rows[i] != want {
			t.Errorf("summary row %d: page %+v, simulator %+v", i, rows[i], want)
		}
		adm, den := marksIn(api, i, 59*time.Second, 61*time.Second)
		drawn := eval[[]int](t, ctx, fmt.Sprintf(`[".mark.admitted", ".mark.denied"].map(s =>
			document.querySelectorAll('.chart[data-algo=%q] ' + s).length)`, r.Short))
		if len(drawn) != 2 || drawn[0] != adm || drawn[1] != den {
			t.Errorf("%s in [59s, 61s): page draws %v admitted and denied marks, simulator has %d and %d", r.Short, drawn, adm, den)
		}
		if r.Short == "fixed" && adm != 199 {
			t.Errorf("fixed window admitted %d in [59s, 61s), want the spike's 199", adm)
		}
	}
	// Every mark says what happened to its request.
	title := eval[string](t, ctx, `document.querySelector('.chart[data-algo="fixed"] .mark.denied title').textContent`)
	if !strings.Contains(title, "denied, retry after") {
		t.Errorf("a denied mark's title is %q", title)
	}
}

// TestWorstIntervalHighlight: the hatched worst interval is drawn exactly
// when the simulator says the law broke: for the fixed window on the
// boundary spike and for token buckets kept per instance, never for the
// token bucket on a shared store. One click zooms on it.
func TestWorstIntervalHighlight(t *testing.T) {
	ctx := tab(t)
	for _, query := range []string{"?scenario=boundary-spike", "?scenario=abuser&topology=per-instance&algos=token"} {
		open(t, ctx, query)
		api := apiRun(t, query)
		for _, r := range api.Runs {
			n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('.chart[data-algo=%q] rect.worst').length`, r.Short))
			if want := map[bool]int{true: 0, false: 1}[r.Timeline.Law.Holds]; n != want {
				t.Errorf("%s %s: %d worst-interval highlights, want %d (law holds: %v)", query, r.Short, n, want, r.Timeline.Law.Holds)
			}
		}
		if query == "?scenario=boundary-spike" {
			if api.Runs[0].Short != "token" || !api.Runs[0].Timeline.Law.Holds || api.Runs[1].Short != "fixed" || api.Runs[1].Timeline.Law.Holds {
				t.Fatalf("the boundary spike should break the law under the fixed window only: %+v", api.Runs)
			}
		}
	}
	// Back to the landing view, then one click on the worst interval.
	open(t, ctx, "")
	loc := get(t, ctx, chromedp.Location())
	if !strings.Contains(loc, "scenario=boundary-spike") {
		t.Errorf("landing view is %s", loc)
	}
	do(t, ctx, chromedp.Click(chromedp.ID("zoom-worst")), ready(2))
	loc = get(t, ctx, chromedp.Location())
	fixed := apiRun(t, "?scenario=boundary-spike").Runs[1].Timeline
	u, _ := url.Parse(loc)
	from, _ := strconv.ParseFloat(u.Query().Get("from"), 64)
	to, _ := strconv.ParseFloat(u.Query().Get("to"), 64)
	if time.Duration(from*1e9) != time.Duration(fixed.Zoom.From) || time.Duration(to*1e9) != time.Duration(fixed.Zoom.To) {
		t.Errorf("zoomed to %s, want the fixed window's zoom [%v, %v]", loc, time.Duration(fixed.Zoom.From), time.Duration(fixed.Zoom.To))
	}
	width := eval[float64](t, ctx, `document.querySelector('.chart[data-algo="fixed"] rect.worst').getBBox().width`)
	if width < 200 {
		t.Errorf("zoomed, the worst interval is %.0f px wide", width)
	}
	shot(t, ctx, "zoom-on-worst")
}

// TestControlsMakeASharedURL: a learner draws traffic of their own with
// the keyboard and the mouse, and the address bar then reproduces the view
// in a fresh tab: the same table, the same charts.
func TestControlsMakeASharedURL(t *testing.T) {
	ctx := tab(t)
	open(t, ctx, "")
	// Every control has a label.
	unlabelled := eval[[]string](t, ctx, `[...document.querySelectorAll("#controls input, #controls select, #controls textarea, #zoom input")]
		.filter(e => !(e.labels && e.labels.length) && !e.getAttribute("aria-label")).map(e => e.outerHTML)`)
	if len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}
	do(t, ctx,
		chromedp.SetValue(chromedp.ID("scenario"), "custom"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#scenario").dispatchEvent(new Event("change", {bubbles: true}))`),
		ready(2),
		chromedp.WaitVisible(chromedp.ID("clients")),
		chromedp.Clear(chromedp.ID("clients")),
		chromedp.SendKeys(chromedp.ID("clients"), "50 at 29.8s over 150ms\n50 at 30.05s over 150ms\nevery 3s"),
		chromedp.SendKeys(chromedp.ID("clients"), kb.Tab), // leaving the field runs it
		ready(3),
		chromedp.Clear(chromedp.ID("capacity")),
		chromedp.SendKeys(chromedp.ID("capacity"), "50"+kb.Tab),
		ready(4),
		chromedp.Clear(chromedp.ID("rate")),
		chromedp.SendKeys(chromedp.ID("rate"), "50/m"+kb.Tab),
		ready(5),
		chromedp.Click(chromedp.CSS(`input[name=topology][value="per-instance"]`)),
		ready(6),
	)
	loc := get(t, ctx, chromedp.Location())
	for _, want := range []string{"scenario=custom", "client=50+at+29.8s", "capacity=50", "rate=50%2Fm", "topology=per-instance"} {
		if !strings.Contains(loc, want) {
			t.Errorf("URL %s lacks %s", loc, want)
		}
	}
	rows := summary(t, ctx)
	api := apiRun(t, "?"+strings.SplitN(loc, "?", 2)[1])
	if len(rows) != 3 || rows[1].Algo != "fixed" || rows[1].Law != "BROKEN" || rows[1].Admitted != fmt.Sprint(api.Runs[1].Timeline.Admitted) {
		t.Errorf("custom spike across the 60 s window's boundary: %+v", rows)
	}
	// A store per instance: a level line each, and a key saying whose.
	for i, r := range api.Runs {
		lines := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('.chart[data-algo=%q] svg[role=img] path.level').length`, r.Short))
		key := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('.chart[data-algo=%q] .level-key')?.textContent ?? ""`, r.Short))
		if lines != len(r.Timeline.Levels) || lines != 3 {
			t.Errorf("run %d (%s): %d level lines, the simulator has %d stores", i, r.Short, lines, len(r.Timeline.Levels))
		}
		for _, lv := range r.Timeline.Levels {
			if !strings.Contains(key, fmt.Sprintf("instance %d's own store", lv.Instance)) {
				t.Errorf("%s: the key %q does not name instance %d", r.Short, key, lv.Instance)
			}
		}
	}
	labels := eval[[]string](t, ctx, `[...document.querySelectorAll("#charts .chart svg[role=img]")].map(s => s.getAttribute("aria-label"))`)
	shot(t, ctx, "custom-traffic")

	// The same URL in a fresh tab: the same view.
	other := tab(t)
	open(t, other, strings.TrimPrefix(loc, baseURL+"/"))
	if again := summary(t, other); fmt.Sprint(again) != fmt.Sprint(rows) {
		t.Errorf("the shared URL shows %+v, the original %+v", again, rows)
	}
	labels2 := eval[[]string](t, other, `[...document.querySelectorAll("#charts .chart svg[role=img]")].map(s => s.getAttribute("aria-label"))`)
	if fmt.Sprint(labels2) != fmt.Sprint(labels) || len(labels) != 3 {
		t.Errorf("charts differ:\n%v\n%v", labels, labels2)
	}
}

// TestRequestTableByKeyboard: what a mark tells on hover, a keyboard user
// reads in a table. Zoomed on the boundary spike, the fixed window's
// "requests in view" opens with Enter and lists every request in view,
// each denied one with the simulator's retry-after.
func TestRequestTableByKeyboard(t *testing.T) {
	ctx := tab(t)
	const view = "?scenario=boundary-spike&from=59&to=61"
	open(t, ctx, view)
	sel := `.chart[data-algo="fixed"] details.requests summary`
	do(t, ctx, chromedp.Focus(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`.chart[data-algo="fixed"] details.requests table`)))
	type cells struct{ Answer, Retry string }
	rows := eval[[]cells](t, ctx, `[...document.querySelectorAll('.chart[data-algo="fixed"] details.requests tbody tr')]
		.map(tr => ({Answer: tr.cells[4].textContent, Retry: tr.cells[5].textContent}))`)
	api := apiRun(t, view)
	var want []cells
	var retries []time.Duration
	for _, q := range api.Runs[1].Timeline.Requests {
		if q.At >= int64(59*time.Second) && q.At < int64(61*time.Second) {
			c := cells{Answer: map[bool]string{true: "admitted", false: "denied"}[q.Allowed]}
			want = append(want, c)
			retries = append(retries, time.Duration(q.RetryAfter))
		}
	}
	if len(rows) != len(want) || len(want) != 201 {
		t.Fatalf("the table lists %d requests, the simulator has %d in [59s, 61s) (want 199 admitted + 2 denied)", len(rows), len(want))
	}
	denied := 0
	for i, r := range rows {
		if r.Answer != want[i].Answer {
			t.Errorf("row %d: %q, simulator %q", i, r.Answer, want[i].Answer)
		}
		if r.Answer != "denied" {
			continue
		}
		denied++
		got, err := time.ParseDuration(r.Retry)
		// The page shows 3 decimals of the largest unit: within 1 ms here.
		if d := got - retries[i]; err != nil || d > time.Millisecond || d < -time.Millisecond {
			t.Errorf("row %d: retry after %q (%v), simulator %v", i, r.Retry, err, retries[i])
		}
	}
	if denied != 2 {
		t.Errorf("%d denied rows, want the spike's 2", denied)
	}
	shot(t, ctx, "request-table")
}

// TestClickDrawsABurst: in custom traffic, a click on a chart adds a burst
// at the time under the pointer to the last client; the simulator then
// runs it (the URL carries it, and the table shows the simulator's counts).
func TestClickDrawsABurst(t *testing.T) {
	ctx := tab(t)
	const view = "?scenario=custom&client=every+2s&from=0&to=120"
	open(t, ctx, view)
	tl := apiRun(t, view).Runs[0].Timeline
	before := tl.Admitted + tl.Denied
	// The token bucket's plot spans x from its left margin to its right one,
	// [0s, 120s]: its middle is 60 s.
	box := eval[[]float64](t, ctx, `(() => { const s = document.querySelector('.chart[data-algo="token"] svg[role=img]');
		const r = s.getBoundingClientRect(); const W = +s.getAttribute("width");
		return [r.left + (48 + (W - 48 - 28) / 2) * r.width / W, r.top + 60]; })()`)
	do(t, ctx,
		chromedp.Clear(chromedp.ID("burst-n")), chromedp.SendKeys(chromedp.ID("burst-n"), "80"+kb.Tab),
		chromedp.MouseClickXY(box[0], box[1]), ready(2))
	clients := get(t, ctx, chromedp.Value(chromedp.ID("clients")))
	var at float64
	if _, err := fmt.Sscanf(clients, "every 2s, 80 at %gs over 200ms", &at); err != nil || at < 59.5 || at > 60.5 {
		t.Fatalf("after a click at 60 s the traffic is %q", clients)
	}
	loc := get(t, ctx, chromedp.Location())
	api := apiRun(t, "?"+strings.SplitN(loc, "?", 2)[1])
	tl = api.Runs[0].Timeline
	if tl.Admitted+tl.Denied != before+80 {
		t.Errorf("the key saw %d requests after the click, %d before: want 80 more", tl.Admitted+tl.Denied, before)
	}
	if rows := summary(t, ctx); rows[0] != wantRow(api, 0) {
		t.Errorf("after the click the page shows %+v, the simulator %+v", rows[0], wantRow(api, 0))
	}
	shot(t, ctx, "click-drawn-burst")
}

// TestInsetShowsTheSpike: on the landing view (2.5 minutes), the fixed
// window's worst second would be a sliver, so an inset under its chart
// draws the simulator's zoom on it: every request in it a mark of its own
// and the worst interval hundreds of pixels wide. A run whose law holds,
// or breaks over a wide interval, gets none.
func TestInsetShowsTheSpike(t *testing.T) {
	ctx := tab(t)
	open(t, ctx, "")
	insets := eval[[]string](t, ctx, `[...document.querySelectorAll("#charts .inset")].map(f => f.dataset.algo)`)
	if len(insets) != 1 || insets[0] != "fixed" {
		t.Fatalf("insets on the landing view: %v, want the fixed window's only", insets)
	}
	api := apiRun(t, "?scenario=boundary-spike")
	z := api.Runs[1].Timeline.Zoom
	adm, den := marksIn(api, 1, time.Duration(z.From), time.Duration(z.To))
	drawn := eval[[]float64](t, ctx, `(() => { const f = document.querySelector("#charts .inset");
		return [f.querySelectorAll(".mark.admitted").length, f.querySelectorAll(".mark.denied").length,
			f.querySelector("rect.worst").getBBox().width]; })()`)
	if int(drawn[0]) != adm || int(drawn[1]) != den || adm < 199 || drawn[2] < 200 {
		t.Errorf("the inset draws %v admitted and denied marks and a %v px worst interval; the simulator has %d and %d in [%v, %v]",
			drawn[0:2], drawn[2], adm, den, time.Duration(z.From), time.Duration(z.To))
	}
	shot(t, ctx, "landing-inset")
	open(t, ctx, "?scenario=boundary-spike&algos=token,sliding&from=0&to=150")
	if n := eval[int](t, ctx, `document.querySelectorAll("#charts .inset").length`); n != 0 {
		t.Errorf("%d insets where the law holds", n)
	}
}

// TestKeyboardOnly: the page is usable without a mouse. Tab moves from the
// first control through the form, the zoom buttons and each chart's table
// of requests, and Enter on "Zoom on worst interval" zooms as a click does.
func TestKeyboardOnly(t *testing.T) {
	ctx := tab(t)
	open(t, ctx, "")
	do(t, ctx, chromedp.Focus(chromedp.ID("scenario")))
	var reached []string
	for i := 0; i < 60; i++ {
		do(t, ctx, chromedp.KeyEvent(kb.Tab))
		id := eval[string](t, ctx, `(() => { const e = document.activeElement;
			return e.id || (e.tagName === "SUMMARY" ? "summary:" + e.closest("figure").dataset.algo : e.tagName); })()`)
		reached = append(reached, id)
	}
	all := strings.Join(reached, " ")
	for _, want := range []string{"duration", "capacity", "rate", "cost", "instances", "skew", "seed", "run", "zoom-all", "zoom-worst",
		"zoom-in", "zoom-out", "pan-left", "pan-right", "from", "to", "summary:token", "summary:fixed", "summary:sliding"} {
		if !strings.Contains(" "+all+" ", " "+want+" ") {
			t.Errorf("Tab never reaches #%s; it went %s", want, all)
		}
	}
	do(t, ctx, chromedp.Focus(chromedp.ID("zoom-worst")), chromedp.KeyEvent(kb.Enter), ready(2))
	fixed := apiRun(t, "?scenario=boundary-spike").Runs[1].Timeline
	want := fmt.Sprintf("from=%g&to=%g", float64(fixed.Zoom.From)/1e9, float64(fixed.Zoom.To)/1e9)
	if loc := get(t, ctx, chromedp.Location()); !strings.Contains(loc, want) {
		t.Errorf("after Enter on the zoom button the view is %s, want %s", loc, want)
	}
}

// TestCostAndDurationOnAScenario: on a named scenario, a learner sets the
// cost of every request and the run's duration from the keyboard; the URL
// carries both, and the fixed window's table of requests in view is the
// simulator's for that URL, row by row, each request at cost 2: the
// attacker's full limit is then 50 requests either side of the boundary.
func TestCostAndDurationOnAScenario(t *testing.T) {
	ctx := tab(t)
	open(t, ctx, "?scenario=boundary-spike&from=59&to=61")
	do(t, ctx,
		chromedp.Focus(chromedp.ID("cost")), chromedp.SendKeys(chromedp.ID("cost"), "2"+kb.Tab), ready(2),
		chromedp.Focus(chromedp.ID("duration")), chromedp.SendKeys(chromedp.ID("duration"), "3m"+kb.Tab), ready(3))
	loc := get(t, ctx, chromedp.Location())
	for _, want := range []string{"scenario=boundary-spike", "cost=2", "duration=3m", "from=59", "to=61"} {
		if !strings.Contains(loc, want) {
			t.Errorf("URL %s lacks %s", loc, want)
		}
	}
	api := apiRun(t, "?"+strings.SplitN(loc, "?", 2)[1])
	fixed := api.Runs[1].Timeline
	if api.Runs[1].Short != "fixed" || time.Duration(fixed.Duration) != 3*time.Minute {
		t.Fatalf("run 1 is %s over %v, want the fixed window over 3m", api.Runs[1].Short, time.Duration(fixed.Duration))
	}
	if rows := summary(t, ctx); rows[1] != wantRow(api, 1) {
		t.Errorf("summary: page %+v, simulator %+v", rows[1], wantRow(api, 1))
	}
	sel := `.chart[data-algo="fixed"] details.requests summary`
	do(t, ctx, chromedp.Focus(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`.chart[data-algo="fixed"] details.requests table`)))
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll('.chart[data-algo="fixed"] details.requests tbody tr')]
		.map(tr => [...tr.cells].filter((_, i) => i !== 0 && i !== 5).map(c => c.textContent).join(" "))`)
	var want []string
	admitted := 0
	for _, q := range fixed.Requests {
		if q.At < int64(59*time.Second) || q.At >= int64(61*time.Second) {
			continue
		}
		if q.Cost != 2 {
			t.Fatalf("request at %v costs %d, want 2", time.Duration(q.At), q.Cost)
		}
		answer := map[bool]string{true: "admitted", false: "denied"}[q.Allowed]
		if q.Allowed {
			admitted++
		}
		want = append(want, fmt.Sprintf("%s %d %d %s %d", fixed.Clients[q.Client], q.Instance, q.Cost, answer, q.Remaining))
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("the table lists\n%v\nthe simulator has\n%v", rows, want)
	}
	// A full limit at cost 2 is 50 requests: 50 before the boundary, of
	// which the last finds the window full (the probe took 2 of its 100
	// tokens), and 50 after, then a probe that finds the next one full.
	if admitted != 99 || len(want) != 101 {
		t.Errorf("%d of %d requests at cost 2 admitted in [59s, 61s), want 99 of 101", admitted, len(want))
	}
	shot(t, ctx, "cost-on-a-scenario")
}

// TestInstanceWindowBoundaries: with a store per instance and clock skew,
// each instance's window boundaries are drawn at the times the simulator
// gives for its own clock, and the page says so.
func TestInstanceWindowBoundaries(t *testing.T) {
	ctx := tab(t)
	const view = "?scenario=boundary-spike&algos=fixed&topology=per-instance&skew=0,400ms,-1s&from=50&to=70"
	const from, to = int64(50 * time.Second), int64(70 * time.Second)
	open(t, ctx, view)
	tl := apiRun(t, view).Runs[0].Timeline
	if len(tl.Levels) != 3 || tl.Window != int64(time.Minute) {
		t.Fatalf("%d levels, window %v", len(tl.Levels), time.Duration(tl.Window))
	}
	starts := map[int64]bool{}
	for _, lv := range tl.Levels {
		var want []int64
		for at := lv.WindowStart; at <= to; at += tl.Window {
			if at >= from {
				want = append(want, at)
			}
		}
		got := eval[[]int64](t, ctx, fmt.Sprintf(`[...document.querySelectorAll('.chart[data-algo="fixed"] line.boundary[data-instance="%d"]')]
			.map(l => +l.dataset.at)`, lv.Instance))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("instance %d (skew %v): boundaries drawn at %v, simulator %v", lv.Instance, time.Duration(lv.Skew), got, want)
		}
		starts[lv.WindowStart] = true
	}
	if len(starts) != 3 {
		t.Errorf("three skews, window starts %v", starts)
	}
	// A second apart on a 20 s view: each boundary says whose it is.
	labels := eval[[]string](t, ctx, `[...document.querySelectorAll('.chart[data-algo="fixed"] text.boundary-label')].map(e => e.textContent)`)
	if len(labels) != 3 {
		t.Errorf("boundary labels %v, want one per instance", labels)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('.chart[data-algo="fixed"] line.boundary[data-instance="-1"]').length`); n != 0 {
		t.Errorf("%d boundaries on the run's clock drawn besides the instances' own", n)
	}
	if help := get(t, ctx, chromedp.Text(chromedp.ID("boundary-help"))); !strings.Contains(help, "its own clock") {
		t.Errorf("the page does not say whose boundaries are drawn: %q", help)
	}
	shot(t, ctx, "instance-boundaries")
}

// TestLeasedBatchesView: with token leases, the page draws the shared
// bucket's line and one line per instance for the tokens left in its
// leased batch, each as the simulator gives it, and its key says which is
// which.
func TestLeasedBatchesView(t *testing.T) {
	ctx := tab(t)
	const view = "?scenario=leases&topology=leased&instances=3&duration=1s&from=0&to=0.3"
	open(t, ctx, view)
	api := apiRun(t, view)
	if len(api.Runs) != 1 || api.Runs[0].Short != "token" {
		t.Fatalf("%d runs, want the token bucket's alone", len(api.Runs))
	}
	tl := api.Runs[0].Timeline
	if len(tl.Levels) != 4 || tl.Levels[0].Instance != -1 {
		t.Fatalf("%d levels, want the shared bucket's and 3 batches", len(tl.Levels))
	}
	for _, lv := range tl.Levels {
		n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('.chart[data-algo="token"] path.level[data-instance="%d"]').length`, lv.Instance))
		if n != 1 {
			t.Errorf("instance %d: %d lines drawn, want 1", lv.Instance, n)
		}
	}
	titles := eval[[]string](t, ctx, `[...document.querySelectorAll('.chart[data-algo="token"] path.level title')].map(e => e.textContent)`)
	if len(titles) != 4 || !strings.Contains(titles[0], "shared") || !strings.Contains(titles[3], "instance 2's leased batch") {
		t.Errorf("level titles %q", titles)
	}
	if key := eval[string](t, ctx, `document.querySelector('.chart[data-algo="token"] .level-key').textContent`); !strings.Contains(key, "the shared bucket") || !strings.Contains(key, "batch") {
		t.Errorf("the key under the chart says %q", key)
	}
	shot(t, ctx, "leased-batches")
}
