// Package faultinject tests ratebucket under real faults: Toxiproxy, run
// in-process, sits between go-redis and a real redis-server (started by
// internal/redistest on a free loopback port), and hybrid.Fallback guards
// redisstore. It is a module of its own so that Toxiproxy's dependencies
// (Prometheus, zerolog, gorilla/mux) never enter the library's go.mod.
//
// TestFaults injects, one at a time, under LocalFallback and under
// FailClosed:
//
//   - latency far above the Fallback's timeout (2s against 150ms);
//   - connection reset (reset_peer) and a partition (the proxy stopped,
//     then started again);
//   - redis-server killed and restarted empty (its script cache empty, so
//     the next call meets NOSCRIPT);
//   - a 1 KB/s bandwidth limit, replies sliced into 1-byte writes, and
//     connections cut after 100 bytes (limit_data).
//
// For each it asserts: no panic; no request served in fail-closed mode
// while the store was failing; locally admitted requests within this
// instance's share (algo.Policy.Share) and Redis's admissions within the law;
// every reply accepted a valid bucket answer (none corrupted or truncated);
// every call back within the timeout plus a slack; and Redis answering
// again, with exactly the capacity admitted on a fresh key, within three
// calls after the fault ends. TestFaultsWithDenyCache repeats the faults
// that take Redis away with a hybrid.DenyCache under the Fallback: an abuser
// who drained its bucket gets no more than Redis's own refill would give it
// (the cache denies, and counts the local share's admissions). TestKilledUnderLoad kills Redis under eight goroutines
// of load. The worst latency and the recovery of each scenario
// are logged (go test -v).
//
// Bucket and breaker time is a manual clock (storetest.Clock), so counts are
// exact and nothing sleeps to wait for a cool-down; only the faults run in
// real time. The whole module runs in about 10 seconds:
//
//	cd faultinject && go test -race -count=1 ./...
package faultinject
