package leaktest

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRuntimeCleanupIgnored holds the runtime's cleanup goroutine in a
// cleanup, as a loaded machine holds it in unique's: goleak alone reports
// it, the project's checks do not.
func TestRuntimeCleanupIgnored(t *testing.T) {
	running, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	holdCleanups(running, release)
	for held := false; !held; {
		runtime.GC()
		select {
		case <-running:
			held = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := goleak.Find(); err == nil {
		t.Fatal("goleak.Find() = nil while the cleanup goroutine runs a cleanup: the test does not show what leaktest ignores")
	}
	if err := goleak.Find(ignored...); err != nil {
		t.Fatalf("goleak.Find(ignored...) = %v, want nil", err)
	}
}

// holdCleanups attaches to an object it drops a cleanup that closes
// running, then waits for release. The object is not a tiny allocation,
// whose cleanup could wait on its neighbours.
func holdCleanups(running, release chan struct{}) {
	runtime.AddCleanup(new([64]byte), func(struct{}) {
		close(running)
		<-release
	}, struct{}{})
}
