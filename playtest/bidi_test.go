package playtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// firefox is one headless Firefox driven over WebDriver BiDi, the W3C
// protocol Firefox speaks on --remote-debugging-port: just enough of it to
// navigate, evaluate JavaScript, send real key and pointer input (Firefox
// dispatches them as a person's) and take screenshots. Commands are sent
// one at a time; events are read and dropped.
type firefox struct {
	t       *testing.T
	cmd     *exec.Cmd
	ws      *websocket.Conn
	next    int
	context string // the browsing context (tab) of the page
}

// bidiURL watches Firefox's stderr for the address of its BiDi server.
type bidiURL struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
	url  chan string
}

var listening = regexp.MustCompile(`WebDriver BiDi listening on (ws://\S+)`)

func (b *bidiURL) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if m := listening.FindSubmatch(b.buf.Bytes()); m != nil && !b.sent {
		b.sent = true
		b.url <- string(m[1])
	}
	return len(p), nil
}

func (b *bidiURL) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startFirefox starts a headless Firefox with a new profile that reaches
// nothing beyond loopback (noNetwork), opens a BiDi session on it, and
// ends both when the test ends. It skips the test when no Firefox is
// installed.
func startFirefox(t *testing.T) *firefox {
	t.Helper()
	bin := lookPath(firefoxes)
	if bin == "" {
		t.Skip("no Firefox on PATH (tried " + strings.Join(firefoxes, ", ") + "): apt-get install firefox-esr, as .ci/run does")
	}
	profile := t.TempDir()
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(noNetwork), 0o644); err != nil {
		t.Fatal(err)
	}
	const origin = "http://127.0.0.1"
	out := &bidiURL{url: make(chan string, 1)}
	cmd := exec.Command(bin, "--headless", "--no-remote", "--profile", profile,
		"--remote-debugging-port=0", "--remote-allow-origins="+origin, "about:blank")
	cmd.Env = append(os.Environ(), "MOZ_HEADLESS=1", "HOME="+profile)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &firefox{t: t, cmd: cmd}
	t.Cleanup(f.close)
	var addr string
	select {
	case addr = <-out.url:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s printed no BiDi address in 60 s:\n%s", bin, out)
	}
	ws, err := websocket.Dial(addr+"/session", "", origin)
	if err != nil {
		t.Fatalf("BiDi at %s: %v\n%s", addr, err, out)
	}
	f.ws = ws
	f.call("session.new", map[string]any{"capabilities": map[string]any{}}, nil)
	var tree struct{ Contexts []struct{ Context string } }
	f.call("browsingContext.getTree", map[string]any{}, &tree)
	if len(tree.Contexts) == 0 {
		t.Fatal("Firefox has no browsing context")
	}
	f.context = tree.Contexts[0].Context
	f.call("browsingContext.setViewport", map[string]any{"context": f.context,
		"viewport": map[string]int{"width": 1400, "height": 1000}}, nil)
	return f
}

// close asks Firefox to quit, and kills it if it does not.
func (f *firefox) close() {
	if f.ws != nil {
		_ = f.ws.SetDeadline(time.Now().Add(10 * time.Second))
		_ = websocket.JSON.Send(f.ws, map[string]any{"id": f.next + 1, "method": "browser.close", "params": map[string]any{}})
		var ignored json.RawMessage
		_ = websocket.JSON.Receive(f.ws, &ignored)
		f.ws.Close()
	}
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = f.cmd.Process.Kill()
		<-done
	}
}

// call sends one command and decodes its result into result (if not nil),
// failing the test on an error answer.
func (f *firefox) call(method string, params any, result any) {
	f.t.Helper()
	f.next++
	id := f.next
	if err := f.ws.SetDeadline(time.Now().Add(90 * time.Second)); err != nil {
		f.t.Fatal(err)
	}
	if err := websocket.JSON.Send(f.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		f.t.Fatalf("BiDi %s: %v", method, err)
	}
	for {
		var msg struct {
			Type, Error, Message string
			ID                   int
			Result               json.RawMessage
		}
		if err := websocket.JSON.Receive(f.ws, &msg); err != nil {
			f.t.Fatalf("BiDi %s: %v", method, err)
		}
		if msg.Type == "event" || msg.ID != id {
			continue
		}
		if msg.Type != "success" {
			f.t.Fatalf("BiDi %s: %s: %s", method, msg.Error, msg.Message)
		}
		if result != nil {
			if err := json.Unmarshal(msg.Result, result); err != nil {
				f.t.Fatalf("BiDi %s: %v in %s", method, err, msg.Result)
			}
		}
		return
	}
}

// open loads the page at query and waits for its first drawing.
func (f *firefox) open(query string) {
	f.t.Helper()
	f.call("browsingContext.navigate", map[string]any{"context": f.context, "url": baseURL + "/" + query, "wait": "complete"}, nil)
	f.ready(1)
}

// ready waits, in the page, until it has drawn at least n times.
func (f *firefox) ready(n int) {
	f.t.Helper()
	ffEval[bool](f, fmt.Sprintf(`new Promise((ok, fail) => {
		const end = Date.now() + 60000;
		const check = () => {
			const b = document.body.dataset;
			if (b.state === "ready" && +b.renders >= %d) ok(true);
			else if (Date.now() > end) fail(new Error("not drawn %d times in 60 s: " + (b.state || "") + " " + document.querySelector("#error").textContent));
			else setTimeout(check, 20);
		};
		check();
	})`, n, n))
}

// ffEval evaluates a JavaScript expression (a promise is awaited) in the
// page and decodes its value.
func ffEval[T any](f *firefox, expr string) T {
	f.t.Helper()
	var res struct {
		Type   string
		Result struct {
			Type  string
			Value json.RawMessage
		}
		ExceptionDetails struct{ Text string }
	}
	f.call("script.evaluate", map[string]any{"expression": "(async () => JSON.stringify(await (" + expr + ")))()",
		"target": map[string]any{"context": f.context}, "awaitPromise": true, "resultOwnership": "none"}, &res)
	if res.Type != "success" {
		f.t.Fatalf("in Firefox: %s", res.ExceptionDetails.Text)
	}
	var s string
	if err := json.Unmarshal(res.Result.Value, &s); err != nil {
		f.t.Fatalf("in Firefox: %v: %s", err, res.Result.Value)
	}
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		f.t.Fatalf("in Firefox: %v: %s", err, s)
	}
	return v
}

// ffEnter is the Enter key as WebDriver spells it.
const ffEnter = "\uE007"

// keys types text into the focused element, one key press per rune.
func (f *firefox) keys(text string) {
	f.t.Helper()
	var acts []map[string]any
	for _, r := range text {
		acts = append(acts, map[string]any{"type": "keyDown", "value": string(r)}, map[string]any{"type": "keyUp", "value": string(r)})
	}
	f.call("input.performActions", map[string]any{"context": f.context,
		"actions": []any{map[string]any{"type": "key", "id": "keyboard", "actions": acts}}}, nil)
}

// click moves the mouse to the middle of the element at selector (scrolled
// into view) and clicks there.
func (f *firefox) click(selector string) {
	f.t.Helper()
	xy := ffEval[[]float64](f, fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.scrollIntoView({block: "center"});
		const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`, selector))
	f.clickXY(xy[0], xy[1])
}

// clickXY clicks at (x, y) in the viewport.
func (f *firefox) clickXY(x, y float64) {
	f.t.Helper()
	f.call("input.performActions", map[string]any{"context": f.context, "actions": []any{map[string]any{
		"type": "pointer", "id": "mouse", "parameters": map[string]string{"pointerType": "mouse"},
		"actions": []map[string]any{{"type": "pointerMove", "x": int(x), "y": int(y)},
			{"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0}}}}}, nil)
}

// shot keeps a screenshot of the whole page as
// testdata/artifacts/firefox-NAME.png.
func (f *firefox) shot(name string) {
	f.t.Helper()
	var res struct{ Data string }
	f.call("browsingContext.captureScreenshot", map[string]any{"context": f.context, "origin": "document"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		f.t.Fatal(err)
	}
	path := artifact(f.t, "firefox-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		f.t.Fatal(err)
	}
	f.t.Logf("screenshot: %s", path)
}

// location is the page's address.
func (f *firefox) location() string {
	f.t.Helper()
	return ffEval[string](f, "location.href")
}
