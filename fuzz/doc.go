// Package fuzz holds ratebucket's go test -fuzz targets. It has no API:
// everything is in its tests, each target with a committed seed corpus
// under testdata/fuzz/<Target>/, which plain go test runs as regression
// cases.
//
//   - FuzzAlgorithms: random Take sequences against every algo.Algorithm;
//     checks the invariants every Result must keep (remaining within the
//     limit, exact retry-after, time never running backwards, IdleAt
//     meaning "same as no state") and, for the token bucket and the
//     sliding window, the never-exceed law over every interval. Never a
//     panic.
//   - FuzzPolicy: arbitrary integers as a Policy, a State, a time and a
//     cost: construction and Take either work or fail with one of algo's
//     sentinel errors, never a panic.
//   - FuzzKeys: arbitrary keys and prefixes through ratebucket.Limiter and
//     memstore: an empty key is ErrEmptyKey, any other key is its own
//     bucket.
//   - FuzzLuaParity: random Take and TakeMulti sequences, with arbitrary
//     (binary, hash-tagged) keys and policies up to the 2^53 bounds, run
//     on redisstore against a real Redis (client clock) and on the Go
//     reference, which must agree exactly. It skips, saying so, when no
//     redis-server is installed and REDIS_URL is unset.
//
// The rapid-based targets (rapid.MakeFuzz) read the fuzzer's bytes as
// rapid's random stream, so the property tests and the fuzz targets are one
// harness. CI runs each target for ten seconds on top of its corpus, on one
// worker and without coverage guidance, from the race build the rest of CI
// compiled (see .ci/run: go test -fuzz would compile every package again
// with the fuzzer's instrumentation, 123 CPU-s on a fresh machine). Guided
// fuzzing, for as long as you like:
//
//	go test -run '^$' -fuzz '^FuzzAlgorithms$' -fuzztime 1m ./fuzz/
//	go test -run '^$' -fuzz '^FuzzPolicy$' -fuzztime 1m ./fuzz/
//	go test -run '^$' -fuzz '^FuzzKeys$' -fuzztime 1m ./fuzz/
//	go test -run '^$' -fuzz '^FuzzLuaParity$' -fuzztime 1m ./fuzz/
package fuzz
