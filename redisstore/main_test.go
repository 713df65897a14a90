package redisstore_test

import (
	"context"
	"testing"

	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/redis/go-redis/v9"
)

// quiet drops go-redis's own log lines ("failed to dial" while a test has
// killed the server on purpose); the tests assert the errors themselves.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain fails the run if any goroutine outlives the tests: a store's
// pipeline writers stop at Close (every store is closed by t.Cleanup), as
// do every client and server. The goroutines that are not ours to stop
// (go-redis's dial prober, the runtime's cleanups) are internal/leaktest's.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	leaktest.VerifyTestMain(m)
}
