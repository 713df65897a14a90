#!/usr/bin/env bash
# ab.sh compares ratebucket's own rows between another revision and the
# working tree: the in-process rows (BenchmarkHotKey, BenchmarkDistinctKeys,
# BenchmarkParallelDistinctKeys) and the Redis rows (cmd/redisbench, the
# pipelined and direct stores), built from both trees and run in alternating
# rounds so that both see the same machine, then benchstat, old vs new.
# Peers are left out: their code is the same on both sides.
#
#   bench/ab.sh REV        e.g. bench/ab.sh 443e5fa
#
# Environment: ROUNDS (6), BENCHTIME (200ms), DUR (500ms), OUT (out/ab).
# The old revision's bench/ must have the same benchmarks and flags.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rev=${1:?usage: bench/ab.sh REV}
ROUNDS=${ROUNDS:-6} BENCHTIME=${BENCHTIME:-200ms} DUR=${DUR:-500ms} OUT=${OUT:-out/ab}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
old=$(mktemp -d)
trap 'git worktree remove --force "$old/tree" >/dev/null 2>&1 || true; rm -rf "$old"' EXIT
git worktree add -q --detach "$old/tree" "$rev"
for side in old new; do
	dir=$PWD
	[ "$side" = old ] && dir=$old/tree/bench
	(cd "$dir" && go test -c -o "$OUT/$side.test" . && go build -o "$OUT/$side-redis" ./cmd/redisbench)
	: >"$OUT/$side-inproc.txt"
	: >"$OUT/$side-redis.txt"
done
for r in $(seq "$ROUNDS"); do
	for side in old new; do
		dir=$PWD
		[ "$side" = old ] && dir=$old/tree/bench
		(cd "$dir" && "$OUT/$side.test" -test.run '^$' -test.count 1 -test.benchtime "$BENCHTIME" \
			-test.bench '^Benchmark(HotKey|DistinctKeys|ParallelDistinctKeys)$/policy=.*/impl=ratebucket$') |
			grep '^Benchmark' >>"$OUT/$side-inproc.txt"
		(cd "$dir" && "$OUT/$side-redis" -rounds 1 -dur "$DUR" -ceiling '' -mem=false -impls ratebucket,ratebucket-direct) \
			2>>"$OUT/$side-redis.log" | grep '^Benchmark' >>"$OUT/$side-redis.txt"
		echo "ab.sh: round $r, $side" >&2
	done
done
bs() { go run golang.org/x/perf/cmd/benchstat "$@"; }
{
	echo "ab.sh $rev ($(git rev-parse --short "$rev")) vs the working tree, $ROUNDS rounds, $(date -u '+%Y-%m-%d %H:%M UTC')"
	bs old="$OUT/old-inproc.txt" new="$OUT/new-inproc.txt"
	echo
	bs old="$OUT/old-redis.txt" new="$OUT/new-redis.txt"
} | tee "$OUT/benchstat.txt"
