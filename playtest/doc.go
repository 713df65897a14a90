// Package playtest tests the playground (package sim/play, `ratebucket
// play`) the way a person uses it: a real headless Chromium loads the page
// from the real server, the tests type and click, then assert on what is
// drawn, and keep a screenshot of each view in testdata/artifacts (ignored
// by git). A real headless Firefox then loads the same page for three views
// and its drawing is checked against the simulator too (TestFirefox).
//
// It is a module of its own so that chromedp, which drives the browser
// over the DevTools protocol, never enters the library's go.mod. It needs
// Debian's chromium package, and firefox-esr for TestFirefox (.ci/run
// installs both when missing); without a browser its tests are skipped
// with a message saying so. Chromium starts once per test binary, with no
// network of its own (--disable-quic, --disable-background-networking,
// --disable-component-update, --disable-sync) and a new empty profile;
// each test opens a tab.
//
// Firefox has no protocol chromedp speaks, so each Firefox view is one run
// of firefox --headless --screenshot, with a new profile whose user.js
// sends every request beyond the loopback interface to a proxy that does
// not exist. The page's test mode (?report=PATH) posts what it drew (the
// summary table; per chart, its marks, worst-interval highlights and level
// lines, measured by Firefox's own layout) to the test server, and holds
// its load event until then, so the screenshot shows the drawn page.
//
//	cd playtest && go test ./...
package playtest
