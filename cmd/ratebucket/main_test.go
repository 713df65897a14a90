package main

import (
	"testing"

	"github.com/ratebucket/ratebucket/internal/leaktest"
)

// TestMain fails the run if any goroutine outlives the tests: the demo's
// servers, load workers, progress bar and Redis clients must all be gone
// when a subcommand returns. go-redis's dial prober, which a client of an
// unreachable server may leave running for up to a second after Close, is
// not ours (see internal/leaktest).
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
