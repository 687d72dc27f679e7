#!/usr/bin/env bash
# make test-compose: runs docker-compose.yaml for real on a Docker engine of the project's own.
#
#  1. starts Debian's dockerd on .state/docker (scripts/docker-engine.sh),
#  2. builds every image without a registry (scripts/compose-images.sh; cached between runs),
#  3. closes the engine's DOCKER-USER chain: container traffic to any address outside the
#     engine's networks is refused while the stack runs (published ports on 127.0.0.1 and
#     container-to-container traffic are all it needs),
#  4. runs TestComposeImageRunsRubyHelpers (a Ruby helper in the built image) and
#     TestComposeStack (internal/integration/compose_test.go): up, every service's state and
#     health, three servers provisioned, the Web UI decoding through the codec server after the
#     browser's login there, /metrics, down -v leaving nothing,
#  5. removes the rule and stops the engine, whatever happened.
#
# One run at a time per machine (a lock): the engine's iptables chains are the machine's.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="/usr/sbin:/usr/bin:$PATH" # Debian's docker client and dockerd
if [ "$(id -u)" -ne 0 ]; then
  echo "make test-compose starts its own Docker engine and needs root" >&2
  exit 1
fi
for c in dockerd docker docker-compose iptables debootstrap python3; do
  command -v "$c" >/dev/null || { echo "$c is missing: make deps installs docker.io, docker-compose and debootstrap" >&2; exit 1; }
done

# (fd 9 holds the lock: the engine and the test get it closed, so nothing that outlives this
# script keeps it)
exec 9>/tmp/choria-provisioner-test-compose.lock
flock -w 1800 9

start=$SECONDS
POOL="${PROVISIONER_DOCKER_POOL:-172.31.240.0/20}"
export PROVISIONER_DOCKER_POOL="$POOL"
# Rejected rather than silently dropped: the engine's DNS forwards what it cannot answer itself
# (the AAAA records of service names) to the host's resolver, and a dropped query would stall
# every name lookup for its timeout; a rejected one fails at once and still never leaves.
rule_tcp=(DOCKER-USER -s "$POOL" ! -d "$POOL" -p tcp -j REJECT --reject-with tcp-reset)
rule_other=(DOCKER-USER -s "$POOL" ! -d "$POOL" -j REJECT --reject-with icmp-port-unreachable)
cleanup() {
  local rc=$?
  if iptables -C "${rule_other[@]}" 2>/dev/null; then
    refused=$(iptables -L DOCKER-USER -v -x -n | awk -v pool="$POOL" '$3 == "REJECT" && $8 == pool { n += $1 } END { print n + 0 }')
    echo "test-compose: packets from containers to addresses outside the compose network, refused: $refused"
  fi
  iptables -D "${rule_tcp[@]}" 2>/dev/null || true
  iptables -D "${rule_other[@]}" 2>/dev/null || true
  scripts/docker-engine.sh stop || true
  echo "test-compose: $((SECONDS - start)) s in all (images $images_s s, stack test $((stack_s)) s)"
  exit $rc
}
images_s=0
stack_s=0
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/docker-engine.sh start 9>&-
eval "$(scripts/docker-engine.sh env)"

t=$SECONDS
scripts/compose-images.sh 9>&-
images_s=$((SECONDS - t))

# the engine made DOCKER-USER when it started; it is checked before FORWARD's own rules
iptables -C "${rule_other[@]}" 2>/dev/null || iptables -I "${rule_other[@]}"
iptables -C "${rule_tcp[@]}" 2>/dev/null || iptables -I "${rule_tcp[@]}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export COMPOSE_PROJECT_NAME=choria-provisioner-test
export DEMO_TEMPORAL_PORT DEMO_UI_PORT DEMO_METRICS_PORT DEMO_CODEC_PORT
DEMO_TEMPORAL_PORT=$(free_port) DEMO_UI_PORT=$(free_port) DEMO_METRICS_PORT=$(free_port) DEMO_CODEC_PORT=$(free_port)

# what an interrupted run may have left (the test itself checks that down -v leaves nothing)
docker-compose down -v --remove-orphans >/dev/null 2>&1 || true

t=$SECONDS
log="$root/.state/test-compose.log"
rc=0
go test -tags compose -count=1 -timeout 20m -v -run '^TestCompose(ImageRunsRubyHelpers|Stack)$' ./internal/integration/ >"$log" 2>&1 9>&- || rc=$?
stack_s=$((SECONDS - t))
if [ $rc -ne 0 ]; then
  tail -120 "$log"
  exit $rc
fi
grep -E '^(=== RUN|--- |PASS|ok)|COMPOSE:' "$log"
