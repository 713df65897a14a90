package redisstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: the store
// starts none, and every client and server is closed by t.Cleanup.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
