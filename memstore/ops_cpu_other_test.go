//go:build !linux

package memstore_test

// threadCPU is not measured outside Linux.
func threadCPU() int64 { return -1 }
