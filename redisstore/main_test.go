package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's own log lines ("failed to dial" while a test has
// killed the server on purpose); the tests assert the errors themselves.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain fails the run if any goroutine outlives the tests: a store's
// pipeline writers stop at Close (every store is closed by t.Cleanup), as
// do every client and server. The one
// exception is go-redis's own: after dial errors (a server killed on
// purpose) a pool probes the address once a second and notices its Close
// only between probes.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
