package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: the demo's
// servers, load workers, progress bar and Redis clients must all be gone
// when a subcommand returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
