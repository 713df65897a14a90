#!/usr/bin/env bash
# Measures ratebucket-rls against envoyproxy/ratelimit on one redis-server
# (rls/cmd/rlsbench): builds both servers, envoyproxy/ratelimit from the Go
# module proxy in a scratch directory outside the repository (its
# dependencies never reach our go.mod), then runs rlsbench with any
# arguments given, e.g.  bash rls/bench.sh -duration 3s -rounds 3
# ENVOY_RATELIMIT_VERSION picks the version (default: the one measured in
# rls/README.md). If it cannot be built the run measures ratebucket alone
# and says why.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ver="${ENVOY_RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}"
out=$(mktemp -d)
trap 'chmod -R u+w "$out" 2>/dev/null; rm -rf "$out"' EXIT
go build -o "$out/ratebucket-rls" ./cmd/ratebucket-rls
go build -o "$out/rlsbench" ./cmd/rlsbench
peer=()
if (
  cd "$out" && go mod init scratch >/dev/null 2>&1 &&
    dir=$(go mod download -json "github.com/envoyproxy/ratelimit@$ver" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') &&
    cp -r "$dir" envoy-src && chmod -R u+w envoy-src &&
    cd envoy-src && go build -o "$out/envoy-ratelimit" ./src/service_cmd
) >"$out/peer-build.log" 2>&1; then
  peer=(-peer "$out/envoy-ratelimit")
  echo "envoyproxy/ratelimit $ver built" >&2
else
  echo "envoyproxy/ratelimit $ver did not build; measuring ratebucket alone:" >&2
  tail -5 "$out/peer-build.log" >&2
fi
"$out/rlsbench" -ours "$out/ratebucket-rls" "${peer[@]}" "$@"
