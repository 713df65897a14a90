package store_test

import (
	"testing"

	"github.com/ratebucket/ratebucket/internal/leaktest"
)

// TestMain fails the run if any goroutine outlives the tests.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
