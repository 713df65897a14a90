package sim

import (
	"testing"

	"github.com/ratebucket/ratebucket/internal/leaktest"
)

// TestMain fails the package if any goroutine outlives the tests: the
// simulator starts none, and the stores and Redis clients it uses must
// leave none behind once closed.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
