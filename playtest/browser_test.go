package playtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The one server and the one browser of this test binary.
var (
	baseURL   string
	browser   context.Context // nil when no browser could be found
	noBrowser string          // why, for t.Skip
)

// browsers are the names Chromium goes by, Debian's first.
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the server and the browser, runs the tests, and stops both;
// a server that does not stop cleanly fails the run.
func run(m *testing.M) (code int) {
	srv, url, err := startPlay()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	baseURL = url
	defer func() {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}()

	path := lookPath(browsers)
	if path == "" {
		noBrowser = "no Chromium on PATH (tried " + strings.Join(browsers, ", ") + "): apt-get install chromium, as .ci/run does"
		return m.Run()
	}
	profile, err := os.MkdirTemp("", "playtest-profile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(profile)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		noBrowser = fmt.Sprintf("%s did not start: %v", path, err)
		return m.Run()
	}
	browser = bctx
	return m.Run()
}

// lookPath returns the path of the first of names on PATH, or "".
func lookPath(names []string) string {
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// tab opens a new tab in the shared browser, or skips the test when there
// is none. The tab closes when the test ends.
func tab(t *testing.T) context.Context {
	t.Helper()
	if browser == nil {
		t.Skip(noBrowser)
	}
	ctx, cancel := chromedp.NewContext(browser)
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTime(); cancel() })
	return ctx
}

// do runs steps in the tab, failing the test on error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs one action in the tab and returns its value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ready waits until the page has drawn at least n times: it sets
// data-state and data-renders on <body> after each drawing.
func ready(n int) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](fmt.Sprintf(`document.body.dataset.state === "ready" && +document.body.dataset.renders >= %d`, n),
		chromedp.WithPollingTimeout(60*time.Second))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, t)
		return chromedp.Void{}, err
	}
}

// open loads the page at query and waits for its first drawing.
func open(t *testing.T, ctx context.Context, query string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(baseURL+"/"+query), ready(1))
}

// shot keeps a screenshot of the whole page as testdata/artifacts/name.png
// (quality 100 makes a PNG).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := get(t, ctx, chromedp.FullScreenshot(100))
	path := artifact(t, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// artifact returns the absolute path of testdata/artifacts/name, creating
// the directory.
func artifact(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join("testdata", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// eval evaluates a JavaScript expression in the page and decodes its
// value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[T](expr))
}

// apiRun fetches /api/run for a query from Go: what the page was given.
func apiRun(t *testing.T, query string) apiResult {
	t.Helper()
	resp, err := http.Get(baseURL + "/api/run" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res apiResult
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/run%s: %s", query, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// apiResult is the part of /api/run's answer the tests read.
type apiResult struct {
	Runs []struct {
		Short  string
		Report struct {
			Total struct{ Admitted, Denied int64 }
		}
		Timeline struct {
			Admitted, Denied int64
			Duration         int64
			Clients          []string
			Window           int64
			WindowStart      int64 `json:"window_start"`
			Requests         []struct {
				At               int64
				Instance, Client int
				Cost, Remaining  int64
				Allowed          bool
				RetryAfter       int64 `json:"retry_after"`
			}
			Levels []struct {
				Instance    int
				Skew        int64
				WindowStart int64 `json:"window_start"`
			}
			Law struct {
				Holds              bool
				From, To, Admitted int64
				Bound              int64
			}
			Zoom struct{ From, To int64 }
		}
	}
}

// wantRow is the summary row the page should draw for run i of api.
func wantRow(api apiResult, i int) row {
	r := api.Runs[i]
	tl := r.Timeline
	return row{Algo: r.Short, Admitted: fmt.Sprint(tl.Admitted), Denied: fmt.Sprint(tl.Denied),
		Law: map[bool]string{true: "holds", false: "BROKEN"}[tl.Law.Holds], Bound: fmt.Sprint(tl.Law.Bound),
		In: fmt.Sprint(tl.Law.Admitted), Total: fmt.Sprintf("%d / %d", r.Report.Total.Admitted, r.Report.Total.Denied)}
}

// marksIn counts run i's admitted and denied requests in [from, to): the
// marks the page draws when zoomed there.
func marksIn(api apiResult, i int, from, to time.Duration) (adm, den int) {
	for _, q := range api.Runs[i].Timeline.Requests {
		if q.At >= int64(from) && q.At < int64(to) {
			if q.Allowed {
				adm++
			} else {
				den++
			}
		}
	}
	return adm, den
}

// row is a line of the page's summary table.
type row struct {
	Algo                             string
	Admitted, Denied, Law, Bound, In string
	Total                            string
}

// summaryJS reads the summary table as drawn, as a []row.
const summaryJS = `[...document.querySelectorAll("#summary tbody tr")].map(tr => {
	const c = (k) => tr.querySelector('td[data-k="' + k + '"]').textContent;
	return {Algo: tr.dataset.algo, Admitted: c("admitted"), Denied: c("denied"), Law: c("law"),
		Bound: c("bound"), In: c("in-interval"), Total: c("total")};
})`

// summary reads the summary table as drawn.
func summary(t *testing.T, ctx context.Context) []row {
	t.Helper()
	return eval[[]row](t, ctx, summaryJS)
}
