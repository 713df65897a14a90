package obstest

import (
	"syscall"
	"unsafe"
)

// ThreadCPU returns the CPU time the calling thread has used, in ns
// (CLOCK_THREAD_CPUTIME_ID), or -1 where it is not measured: on a machine
// shared with other work, the time a benchmark's thread waited for a core
// is not in it, where it is in ns/op. Lock the goroutine to its thread
// (runtime.LockOSThread) around what it measures.
func ThreadCPU() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return -1
	}
	return ts.Nano()
}
