#!/usr/bin/env bash
# run.sh runs every comparison of BENCHMARKS.md in one go and prints the
# tables: the in-process benchmarks (go test -bench, -count runs), the Redis
# program (cmd/redisbench: it starts its own redis-server on a free
# 127.0.0.1 port and stops it; the redis-benchmark ceiling runs against that
# same server), the token-lease loads (cmd/leasebench, its own server too),
# benchstat over them, and cmd/benchtables' Markdown.
#
#   bench/run.sh          full run, about 8-10 minutes on 2 cores
#   bench/run.sh -w       the same, then redraw the chart bench/throughput.svg
#                         that ../BENCHMARKS.md shows; its tables are taken
#                         by hand from bench/out/generated.md (one per question,
#                         with the peer and the ratio)
#   SMOKE=1 bench/run.sh  every step once and tiny (< 1 minute): checks the
#                         pipeline, measures nothing worth quoting
#
# Environment: COUNT (in-process runs, 6), BENCHTIME (per run, 200ms),
# ROUNDS (Redis rounds, 6), DUR (per Redis measurement, 500ms), CEILING_N
# (requests per unpipelined redis-benchmark run, 30000; x4 pipelined),
# OUT (output directory, bench/out), NOTE (a line printed above the tables).
set -euo pipefail
cd "$(dirname "$0")"

write=false
if [[ ${1:-} == -w ]]; then write=true; fi
COUNT=${COUNT:-6} BENCHTIME=${BENCHTIME:-200ms} ROUNDS=${ROUNDS:-6} DUR=${DUR:-500ms} CEILING_N=${CEILING_N:-30000}
redis_args=() lease_args=()
if [[ -n ${SMOKE:-} ]]; then
	COUNT=1 BENCHTIME=1x ROUNDS=1 DUR=50ms CEILING_N=2000
	redis_args=(-keys 5000 -ceiling 8x1,8x4)
	lease_args=(-keys 5000 -per-store 4 -hot 16 -distinct 1)
fi
OUT=${OUT:-out}
mkdir -p "$OUT"

for tool in redis-server redis-benchmark; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

start=$(date +%s)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
machine="$(nproc) cores ($cpu), $(free -g | awk '/^Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3-), redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2)"
peers=$(go list -m -f '{{.Path}} {{.Version}}' golang.org/x/time github.com/sethvargo/go-limiter \
	github.com/throttled/throttled/v2 github.com/ulule/limiter/v3 github.com/go-redis/redis_rate/v10 github.com/redis/go-redis/v9)
echo "machine: $machine"
echo "$peers" | sed 's/^/peer: /'

echo "== in process: go test -bench . -count $COUNT -benchtime $BENCHTIME" >&2
go test -run '^$' -bench . -count "$COUNT" -benchtime "$BENCHTIME" . > "$OUT/inproc.txt"
echo "== Redis: go run ./cmd/redisbench -rounds $ROUNDS -dur $DUR -ceiling-n $CEILING_N ${redis_args[*]}" >&2
go run ./cmd/redisbench -rounds "$ROUNDS" -dur "$DUR" -ceiling-n "$CEILING_N" "${redis_args[@]}" > "$OUT/redis.txt" 2> "$OUT/redis.log" ||
	{ cat "$OUT/redis.log" >&2; exit 1; }

echo "== token leases: go run ./cmd/leasebench -rounds $ROUNDS -dur $DUR ${lease_args[*]}" >&2
go run ./cmd/leasebench -rounds "$ROUNDS" -dur "$DUR" "${lease_args[@]}" > "$OUT/leases.txt" 2> "$OUT/leases.log" ||
	{ cat "$OUT/leases.log" >&2; exit 1; }

# benchstat per kind of row: the load rows by impl, the ceiling by script.
benchstat() { go run golang.org/x/perf/cmd/benchstat "$@"; }
benchstat -col /impl "$OUT/inproc.txt" > "$OUT/benchstat-inproc.txt"
grep -v '^BenchmarkRedisCeiling\|^BenchmarkRedisMemory' "$OUT/redis.txt" > "$OUT/redis-load.txt"
grep -v '^BenchmarkRedis/\|^BenchmarkRedisMemory' "$OUT/redis.txt" > "$OUT/redis-ceiling.txt"
{ benchstat -col /impl "$OUT/redis-load.txt"; echo; benchstat -col /script "$OUT/redis-ceiling.txt"; } > "$OUT/benchstat-redis.txt"
benchstat -col /impl "$OUT/leases.txt" > "$OUT/benchstat-leases.txt"
go run ./cmd/benchtables -svg "$OUT/throughput.svg" "$OUT/inproc.txt" "$OUT/redis.txt" > "$OUT/tables.md"
elapsed=$(( $(date +%s) - start ))

cmdline="COUNT=$COUNT BENCHTIME=$BENCHTIME ROUNDS=$ROUNDS DUR=$DUR CEILING_N=$CEILING_N${SMOKE:+ SMOKE=1} bench/run.sh"
{
	echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') in ${elapsed}s by \`$cmdline\`."
	if [[ -n ${NOTE:-} ]]; then echo; echo "**$NOTE**"; fi
	echo
	echo "- Machine: $machine"
	echo "$peers" | sed 's/^/- Peer: /'
	echo
	cat "$OUT/tables.md"
	echo "<details><summary>benchstat -col /impl (in process; columns against ratebucket)</summary>"
	echo
	echo '```'
	cat "$OUT/benchstat-inproc.txt"
	echo '```'
	echo "</details>"
	echo
	echo "<details><summary>benchstat -col /impl (Redis)</summary>"
	echo
	echo '```'
	cat "$OUT/benchstat-redis.txt"
	echo '```'
	echo "</details>"
	echo
	echo "<details><summary>benchstat -col /impl (token leases: cmd/leasebench)</summary>"
	echo
	echo '```'
	cat "$OUT/benchstat-leases.txt"
	echo '```'
	echo "</details>"
	echo
	echo "<details><summary>redisbench log (captured commands, peers' errors)</summary>"
	echo
	echo '```'
	cat "$OUT/redis.log"
	echo '```'
	echo "</details>"
} > "$OUT/generated.md"
cat "$OUT/generated.md"

if $write; then
	cp "$OUT/throughput.svg" throughput.svg
	echo "run.sh: redrew bench/throughput.svg; the tables for ../BENCHMARKS.md are in $OUT/generated.md" >&2
fi
