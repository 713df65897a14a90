#!/usr/bin/env bash
# functions.sh compares the two deliveries of redisstore's script on one
# fresh redis-server: EVALSHA (the default) and FCALL of the Function
# library that redisstore.Config.Functions loads (the same text, wrapped as
# WIRE.md says). redis-benchmark replays one Take of cost 1 (a bucket of
# 100, 2 per second, server clock) alternately through each, ROUNDS times,
# on 100k random keys and on one hot key, pipelined (-P 16) and not; after
# each run INFO commandstats gives the server's CPU per call
# (usec_per_call). Run from the repository root: bash bench/functions.sh
#
# CALLGRIND=1 runs redis-server under valgrind --tool=callgrind instead and
# prints the instructions the server spends per call (ROUNDS 1, N 20000 by
# default): counts that the load on the machine does not move.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} N=${N:-100000}
cg=()
if [ -n "${CALLGRIND:-}" ]; then
  ROUNDS=${ROUNDS_CG:-1} N=${N_CG:-20000}
  cg=(valgrind -q --tool=callgrind --callgrind-out-file="/dev/null")
fi
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${cg[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize no >/dev/null &
pid=$!
trap 'kill $pid; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
until cli ping >/dev/null 2>&1; do sleep 0.05; done
sha=$(cli -x SCRIPT LOAD <redisstore/tokenbucket.lua)
version=$(sed -n 's/^-- Wire contract: version \([0-9]*\) .*/\1/p' redisstore/tokenbucket.lua)
name="ratebucket_v${version}_${sha:0:12}"
{ printf '#!lua name=%s\nredis.register_function{function_name='"'"'%s'"'"', callback=function(KEYS, ARGV)\n' "$name" "$name"
  cat redisstore/tokenbucket.lua; printf '\nend}\n'; } | cli -x FUNCTION LOAD REPLACE >/dev/null
echo "redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $N calls per run"
unit="µs/call"; [ -z "${CALLGRIND:-}" ] || unit="instructions/call"
echo "| round | keys | -P | EVALSHA calls/s | FCALL calls/s | EVALSHA $unit | FCALL $unit |"
echo "|---|---|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
  for keys in random hot; do
    key='rb:__rand_int__'; rand=(-r 100000)
    if [ "$keys" = hot ]; then key='rb:hot'; rand=(); fi
    for P in 16 1; do
      row="| $round | $keys | $P"
      rps=(); usec=()
      for mode in evalsha fcall; do
        target=$sha; [ "$mode" = fcall ] && target=$name
        cli FLUSHALL >/dev/null; cli CONFIG RESETSTAT >/dev/null
        [ -z "${CALLGRIND:-}" ] || callgrind_control -z "$pid" >/dev/null 2>&1
        out=$(redis-benchmark -p "$port" -n "$N" -c 50 -P "$P" "${rand[@]}" --csv "$mode" "$target" 2 "$key" pol:rb: 100:500000:1 1)
        rps+=("$(echo "$out" | tail -1 | cut -d, -f2 | tr -d '"' | cut -d. -f1)")
        if [ -n "${CALLGRIND:-}" ]; then # thousands of instructions per call, instead of µs
          ir=$(callgrind_control -e Ir "$pid" 2>/dev/null | awk '$1 == "Th" { gsub(",", "", $3); n += $3 } END { print n }')
          usec+=("$(awk "BEGIN{printf \"%.1fk\", $ir/$N/1000}")")
        else
          usec+=("$(cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$mode:.*usec_per_call=\([0-9.]*\),.*/\1/p")")
        fi
      done
      echo "$row | ${rps[0]} | ${rps[1]} | ${usec[0]} | ${usec[1]} |"
    done
  done
done
