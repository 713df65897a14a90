package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: the demo's
// servers, load workers, progress bar and Redis clients must all be gone
// when a subcommand returns. go-redis's dial prober, which a client of an
// unreachable server may leave running for up to a second after Close, is
// not ours (see redisstore/main_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
