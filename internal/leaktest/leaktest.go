// Package leaktest is goleak as this project's tests use it: every test
// binary checks that no goroutine outlives its tests (a store's Close must
// stop what its New started), ignoring the goroutines that are not the
// project's to stop. Say them here, once:
//
//   - runtime.runCleanups, the runtime's cleanup goroutine: it is a system
//     goroutine, hidden from goleak, except while it runs a cleanup, as it
//     does after a collection frees interned values (an algo.Policy holds a
//     unique.Handle), which on a loaded machine can outlast goleak's
//     retries;
//   - go-redis's pool dialling again in the background after a dial failed
//     (a test that stops a Redis server under a client).
//
// A package's own exceptions (Toxiproxy's toxics) are passed as options.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// ignored is what every check ignores (see the package doc).
var ignored = []goleak.Option{
	goleak.IgnoreAnyFunction("runtime.runCleanups"),
	goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
}

// VerifyTestMain runs m's tests and fails the binary if a goroutine is
// left once they are done, as goleak.VerifyTestMain, with the project's
// ignored goroutines and opts.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(opts, ignored...)...)
}

// VerifyNone fails t if a goroutine is left, as goleak.VerifyNone, with
// the project's ignored goroutines and opts.
func VerifyNone(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	goleak.VerifyNone(t, append(opts, ignored...)...)
}
