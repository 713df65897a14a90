// Package playtest tests the playground (package sim/play, `ratebucket
// play`) the way a person uses it: a real headless Chromium loads the page
// from the real server, the tests type and click, then assert on what is
// drawn, and keep a screenshot of each view in testdata/artifacts (ignored
// by git).
//
// It is a module of its own so that chromedp, which drives the browser
// over the DevTools protocol, never enters the library's go.mod. It needs
// Debian's chromium package (.ci/run installs it when missing); without a
// browser every test is skipped with a message saying so. Chromium starts
// once per test binary, with no network of its own (--disable-quic,
// --disable-background-networking, --disable-component-update,
// --disable-sync) and a new empty profile; each test opens a tab.
//
//	cd playtest && go test ./...
package playtest
