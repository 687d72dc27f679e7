#!/usr/bin/env bash
# A Docker engine of the project's own, for `make test-compose`: Debian's dockerd (docker.io) on a
# socket, data root and exec root under .state/docker, so it touches no system engine and its
# images (the stand-ins of docker/standins) stay cached between runs on this machine.
#
#   scripts/docker-engine.sh start   # prints nothing; the socket is .state/docker/docker.sock
#   scripts/docker-engine.sh stop    # stops it (SIGTERM, then SIGKILL after 30 s)
#   scripts/docker-engine.sh env     # export DOCKER_HOST=...
#
# The engine makes no default bridge (docker0): the compose network is its only one, with its
# subnet from 172.31.240.0/20, which the DOCKER-USER rules of scripts/test-compose.sh rely on.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
state="$root/.state/docker"
sock="$state/docker.sock"
pidfile="$state/dockerd.pid"
export DOCKER_HOST="unix://$sock"
POOL="${PROVISIONER_DOCKER_POOL:-172.31.240.0/20}"

running() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "${1:-}" in
start)
  command -v dockerd >/dev/null || { echo "dockerd is missing: apt-get install docker.io (make deps)" >&2; exit 1; }
  mkdir -p "$state/data" "$state/exec"
  if running; then exit 0; fi
  # containerd's socket path must stay under the kernel's 108-byte limit
  if [ ${#state} -gt 60 ]; then echo "state directory path too long for the engine's sockets: $state" >&2; exit 1; fi
  setsid dockerd --host "$DOCKER_HOST" --data-root "$state/data" --exec-root "$state/exec" \
    --pidfile "$pidfile" --bridge none --default-address-pool "base=$POOL,size=24" \
    --storage-driver overlay2 --log-driver json-file --log-opt max-size=10m \
    --userland-proxy=true >"$state/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    if docker version >/dev/null 2>&1; then exit 0; fi
    sleep 0.5
  done
  echo "dockerd did not answer on $sock in 60 s:" >&2; tail -20 "$state/dockerd.log" >&2; exit 1
  ;;
stop)
  if running; then
    pid="$(cat "$pidfile")"
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # the engine leaves its network namespace mounted; unmounted, make clean can remove .state
  for ns in "$state"/exec/netns/*; do
    if mountpoint -q "$ns" 2>/dev/null; then umount "$ns" 2>/dev/null || true; fi
  done
  ;;
env)
  echo "export DOCKER_HOST=$DOCKER_HOST"
  ;;
*)
  echo "usage: $0 start|stop|env" >&2; exit 2
  ;;
esac
