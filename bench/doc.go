// Package bench compares ratebucket with the rate limiters Go users already
// reach for, in a module of its own so that none of them leaks into the
// library's go.mod.
//
// # What is measured
//
// In process (go test -bench . in this directory): ratebucket's memstore
// against golang.org/x/time/rate (one rate.Limiter per key in a sharded,
// mutexed map: the fair way users key it), sethvargo/go-limiter's
// memorystore, throttled's memstore with its GCRA limiter and ulule/limiter's
// memory store. Each benchmark has one sub-benchmark per implementation
// (BenchmarkX/policy=.../impl=...), all built from the same [Policy] over the
// same key set:
//
//   - HotKey: every call on one key.
//   - DistinctKeys: 100,000 keys of 20 bytes, every one pre-filled before the
//     timer starts, then taken in turn. The pre-fill runs under a burst-1
//     policy in [CheckSpread] first: each key must be admitted exactly once,
//     which proves the implementation keeps one bucket per key (go-limiter's
//     own benchmark never fills its map, so it measures the key "").
//   - ParallelDistinctKeys: the same keys from b.RunParallel goroutines, each
//     walking all of them from its own offset, 7919 keys apart.
//   - ParallelStretches: the same keys from GOMAXPROCS goroutines, each
//     walking its own stretch of them in order: no bucket is shared.
//   - RandomKeys, ParallelRandomKeys: the same keys at random, from one
//     goroutine and from GOMAXPROCS, each in an order of its own.
//
// On a machine shared with other work, a parallel row's ns/op says mostly
// how much of the machine it got; cmd/scaling measures the same patterns
// in rounds and keeps only those in which every goroutine had a core.
//
// Two policies: [Admit] (burst 1e9, refilled 1/s: every call is admitted
// and charged, and buckets stay below full) and [Deny] (burst 1, 1 per minute: after the pre-fill every
// call is denied). Denials are the cheap path for most limiters and the
// common one under attack; admissions are the common one in normal traffic.
//
// Over Redis (cmd/redisbench): throughput and p50/p99 latency at several
// concurrencies for ratebucket's redisstore (server clock), go-redis's
// redis_rate, the reference hash script ([RefScript]), throttled's and
// ulule's Redis stores, the redis-benchmark ceiling on the same server, and
// memory per key. run.sh runs everything and cmd/benchtables turns the
// output into Markdown tables (bench/out/generated.md), from which
// BENCHMARKS.md's tables are copied. ab.sh REV answers "did my change slow
// ratebucket down?": ratebucket's own rows built from REV and from the
// working tree, run in alternating rounds, then benchstat old vs new.
package bench
