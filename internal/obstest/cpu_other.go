//go:build !linux

package obstest

// ThreadCPU is not measured outside Linux: it returns -1.
func ThreadCPU() int64 { return -1 }
