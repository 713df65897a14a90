//go:build !linux

package otelobserver_test

// threadCPU is not measured outside Linux.
func threadCPU() int64 { return -1 }
