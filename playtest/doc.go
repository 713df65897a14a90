// Package playtest tests the playground (`ratebucket play`, whose page and
// API are cmd/ratebucket/internal/play) the way a person uses it: TestMain
// builds cmd/ratebucket from this repository (with -race when the tests
// run with it) and starts `ratebucket play --port 0`, a real headless
// Chromium loads the page from that server, the tests type and click,
// then assert on what is drawn, and keep a screenshot of each view in
// testdata/artifacts (ignored by git). At the end the server is
// interrupted as Ctrl-C does, and must exit 0 with nothing on stderr. A real headless Firefox then does the same for a few views and
// steps (TestFirefox, TestFirefoxControls).
//
// It is a module of its own so that chromedp, which drives Chromium over
// the DevTools protocol, never enters the library's go.mod; it imports
// nothing of the library, whose binary it runs (a nested module could not
// import the command's internal package anyway). It needs
// Debian's chromium package, and firefox-esr for the Firefox tests
// (.ci/run installs both when missing); without a browser its tests are
// skipped with a message saying so. Chromium starts once per test binary,
// with no network of its own (--disable-quic,
// --disable-background-networking, --disable-component-update,
// --disable-sync) and a new empty profile; each test opens a tab.
//
// Firefox speaks WebDriver BiDi, not the DevTools protocol, so bidi_test.go
// holds a small client of it (over golang.org/x/net/websocket): navigate,
// evaluate, real key and pointer input, screenshots. Each Firefox test
// starts its own Firefox with a new profile whose user.js sends every
// request beyond the loopback interface to a proxy that does not exist.
// A headless Firefox window is never the active one, so Firefox fires no
// blur (hence no change event) when Tab leaves a field and does not
// activate a focused button on Enter: keyboard use is tested in Chromium.
//
//	cd playtest && go test ./...
package playtest
