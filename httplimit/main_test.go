package httplimit_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/internal/leaktest"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// middleware starts none, and the end-to-end servers and clients must all
// be closed.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
