#!/usr/bin/env bash
# The article's benchmark against examples/app.js: a fresh redis-server on a
# free port (persistence off), the app on another, then
# ab -n 1000 -c "${C:-200}" -H "x-user-id: test-user", and the limiter's latency
# (in the app: from the call to its answer, event-loop waits included; in
# Redis: the script's usec_per_call). C=1 runs one request at a time.
# Needs ab (apt-get install apache2-utils). Run from js/: bash examples/ab.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=$(mktemp -d)
free() { node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }
rport=$(free); aport=$(free)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize no >/dev/null &
rpid=$!
REDIS_URL="redis://127.0.0.1:$rport" TRUST_USER_HEADER=1 PORT="$aport" node examples/app.js >/dev/null &
apid=$!
trap 'kill $apid $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
until curl -s "http://127.0.0.1:$aport/stats" >/dev/null; do sleep 0.05; done
ab -n 1000 -c "${C:-200}" -H "x-user-id: test-user" "http://127.0.0.1:$aport/api/feed" >"$dir/ab.txt" 2>&1
grep -E 'Complete requests|Non-2xx|Time taken|Requests per second|Time per request.*mean\)' "$dir/ab.txt"
echo "admitted: $(( $(sed -n 's/^Complete requests: *//p' "$dir/ab.txt") - $(sed -n 's/^Non-2xx responses: *//p' "$dir/ab.txt") ))"
echo "limiter call: $(curl -s "http://127.0.0.1:$aport/stats")"
echo "in redis: $(redis-cli -p "$rport" info commandstats | grep -E '^cmdstat_eval(sha)?:' | tr -d '\r' | tr '\n' ' ')"
