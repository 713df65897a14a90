//go:build !linux

package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// stall skips the test: it stops the server with SIGSTOP and reads its
// state from /proc, which only Linux has.
func stall(t *testing.T, _ *redis.Client) (resume func()) {
	t.Skip("stalling the server needs Linux (SIGSTOP and /proc)")
	return nil
}
