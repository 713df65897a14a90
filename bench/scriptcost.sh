#!/usr/bin/env bash
# scriptcost.sh counts the instructions redis-server spends per call of
# redisstore's script, under valgrind --tool=callgrind: counts that the
# load on the machine does not move. It loads the working tree's
# tokenbucket.lua and, when REV is given, the one at that git revision into
# one server, and alternates them, ROUNDS times: redis-benchmark replays
# N EVALSHA calls of each (a bucket of 100 at 2 per second, server clock,
# 50 clients, -P 16) on 100k random keys and on one hot key. The server
# runs at hz 1, so its cron ticks, counted too, stay out of the figures.
# Each call is made as the script's wire version lays it out: version 1's
# (KEYS key, registry; ARGV [call,] policy, cost...; costs of 1 left out
# when the script takes that) or, for a revision before it, version 3's
# ("stp" and four numbers a key), what Go sent.
# CALLS: "take" a take of 1 (the default), "refund", "atmost" (up to 5),
# "reserve" (cost 1, maxWait 1 s), "quota" a take of 1 on a calendar
# quota of 10^6 a month (UTC), and "b4", "b8" (any bN) a batch: one call
# taking N keys, each alone (the auto-pipeline's shared call), reported per
# key. Run from the repository root: bash bench/scriptcost.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-} ROUNDS=${ROUNDS:-3} N=${N:-20000} CALLS=${CALLS:-take}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind -q --tool=callgrind --callgrind-out-file=/dev/null redis-server --port "$port" --bind 127.0.0.1 \
  --save '' --appendonly no --dir "$dir" --daemonize no --hz 1 >/dev/null &
pid=$!
trap 'kill $pid; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
until cli ping >/dev/null 2>&1; do sleep 0.2; done
names=(work) shas=("$(cli -x SCRIPT LOAD <redisstore/tokenbucket.lua)") v3=(no)
if [ -n "$REV" ]; then
  git show "$REV:redisstore/tokenbucket.lua" >"$dir/rev.lua"
  names+=("$REV") shas+=("$(cli -x SCRIPT LOAD <"$dir/rev.lua")")
  v3+=("$(grep -q '^-- Wire contract: version 3 ' "$dir/rev.lua" && echo yes || echo no)")
fi
# ones[i]: the script takes costs of 1 left out (it does not refuse a take without one).
ones=()
for sha in "${shas[@]}"; do
  ones+=("$(cli EVALSHA "$sha" 2 rb:probe pol:rb: 100:500000:1 2>&1 | grep -q RBARG && echo no || echo yes)")
done
# argsof CALL KEY V3 ONES prints the call's keys and arguments.
argsof() {
  local call=$1 key=$2 pol="100:500000:1 1" word="" n=1 keys
  case $call in
    refund) word=sr ;;
    atmost) word=sa pol="100:500000:1 5" ;;
    reserve) word=sv pol="100:500000:1 1 1000000" ;;
    quota) pol="1000000:0:-345599 1" ;; # refill -(3 + 4*(0 + 86399)): a month, UTC
    b*) n=${call#b} ;;
  esac
  if [ "$4" = yes ]; then pol=${pol% 1}; fi # a cost of 1 is left out
  keys=$(for _ in $(seq "$n"); do printf '%s ' "$key"; done)
  if [ "$3" = yes ]; then # version 3: "stp", "srp", ...; four numbers a key
    word=${word:-st}p pol=${pol//:/ }
  fi
  printf '%s %s pol:rb: %s' "$((n + 1))" "$keys" "$word"
  for _ in $(seq "$n"); do printf ' %s' "$pol"; done
}
echo "redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2), $N calls per run, -P 16, hz 1"
echo "| round | keys | call | script | instructions/call (per key for bN) |"
echo "|---|---|---|---|---:|"
for round in $(seq "$ROUNDS"); do
  for keys in random hot; do
    key='rb:__rand_int__'; rand=(-r 100000)
    if [ "$keys" = hot ]; then key='rb:hot'; rand=(); fi
    for call in $CALLS; do
      per=1; [ "${call#b}" != "$call" ] && per=${call#b}
      for i in "${!shas[@]}"; do
        read -r -a args <<<"$(argsof "$call" "$key" "${v3[$i]}" "${ones[$i]}")"
        cli FLUSHALL >/dev/null
        callgrind_control -z "$pid" >/dev/null 2>&1
        redis-benchmark -p "$port" -n "$N" -c 50 -P 16 "${rand[@]}" --csv evalsha "${shas[$i]}" "${args[@]}" >/dev/null
        ir=$(callgrind_control -e Ir "$pid" 2>/dev/null | awk '$1 == "Th" { gsub(",", "", $3); n += $3 } END { print n }')
        echo "| $round | $keys | $call | ${names[$i]} | $(awk "BEGIN{printf \"%.2fk\", $ir/$N/$per/1000}") |"
      done
    done
  done
done
