// Package doccheck holds no code: its test keeps the Go shown to readers
// compiling and true.
//
// The test reads README.md and every docs/*.md page. Each fenced block
// must name its language (```go, ```sh, ```text, ...). A ```go block that
// is a complete program (package main) is written into a temporary
// directory inside the module, so that its imports resolve to this
// checkout, built and run: it must exit 0, and the README's first program
// must print what the README says it prints. A program that dials
// localhost:6379 is pointed at a redis-server started for the test
// (internal/redistest, or REDIS_URL). Any other ```go block is a fragment:
// it must appear, whitespace aside, in the body of an Example function of
// the repository (a line holding only "..." stands for omitted code), and
// the packages holding the matched Examples are vetted, so a fragment that
// stops compiling fails this test too.
//
// The package docs of the library packages (the root package, algo,
// store, observe, memstore, redisstore, hybrid, httplimit, sim) are held
// to the same rule: each
// indented code block appears in an Example of that package, unless the
// test's table of non-Go blocks lists it as a diagram, a formula or a key
// layout. The test also checks that README.md stays within 200 lines,
// that it shows `go get github.com/ratebucket/ratebucket` before its first
// program, and that every relative link of those pages names a file or
// heading that exists.
package doccheck
