// Package obstest holds what the benchmarks of the observer adapters
// (contrib/prometheus, contrib/otel) share across modules: stores filled
// before a benchmark, and the CPU time of the calling thread. The recorder
// of events that tests share is observe/observetest's.
package obstest
