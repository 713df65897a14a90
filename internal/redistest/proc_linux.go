//go:build linux

package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the server when the test binary dies,
// even if it is killed before its cleanups run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
