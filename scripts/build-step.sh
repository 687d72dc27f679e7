#!/usr/bin/env bash
# build-step.sh WHAT ESTIMATE COMMAND...: runs one build, saying what it builds and how long it
# usually takes before it starts, that it still builds every BUILD_TICK seconds (default 20) while
# it runs, and how long it took. go build prints nothing while it compiles, and a first build of
# the Temporal CLI compiles for minutes: without this, make run looks hung.
set -euo pipefail
what=$1 estimate=$2
shift 2
tick=${BUILD_TICK:-20}
start=$(date +%s)

echo "==> building $what ($estimate)"
(
  while sleep "$tick"; do
    echo "    ... still building $what: $(($(date +%s) - start))s so far"
  done
) &
ticker=$!
# the ticker goes with the build, also on Ctrl-C or a failed build
trap 'kill "$ticker" 2>/dev/null || true' EXIT

rc=0
"$@" || rc=$?
if [ "$rc" -eq 0 ]; then
  echo "==> built $what in $(($(date +%s) - start))s"
fi
exit "$rc"
