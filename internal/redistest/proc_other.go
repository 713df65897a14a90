//go:build !linux

package redistest

import "os/exec"

// dieWithParent is a no-op where the kernel offers no parent-death signal;
// t.Cleanup still stops the server.
func dieWithParent(*exec.Cmd) {}
