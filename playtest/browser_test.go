package playtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratebucket/ratebucket/sim/play"
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

func run(m *testing.M) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: play.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	baseURL = "http://" + ln.Addr().String()

	path := ""
	for _, name := range browsers {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
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
	dir := filepath.Join("testdata", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot: %s", abs)
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
			Requests         []struct {
				At      int64
				Allowed bool
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

// row is a line of the page's summary table.
type row struct {
	Algo                             string
	Admitted, Denied, Law, Bound, In string
	Total                            string
}

// summary reads the summary table as drawn.
func summary(t *testing.T, ctx context.Context) []row {
	t.Helper()
	return eval[[]row](t, ctx, `[...document.querySelectorAll("#summary tbody tr")].map(tr => {
		const c = (k) => tr.querySelector('td[data-k="' + k + '"]').textContent;
		return {Algo: tr.dataset.algo, Admitted: c("admitted"), Denied: c("denied"), Law: c("law"),
			Bound: c("bound"), In: c("in-interval"), Total: c("total")};
	})`)
}
