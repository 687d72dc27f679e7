#!/bin/sh
# Entry point of the temporalio/server stand-in, with the upstream image's contract: BIND_ON_IP
# defaults to the container's address, listening on 0.0.0.0 broadcasts that address to the
# cluster, SERVICES ("history:matching") selects services, and the server renders
# config/docker.yaml from the environment itself.
set -eu
self=$(getent hosts "$(hostname)" | awk '{ print $1; exit }')
: "${BIND_ON_IP:=$self}"
export BIND_ON_IP
case "$BIND_ON_IP" in
0.0.0.0 | ::0 | ::)
  : "${TEMPORAL_BROADCAST_ADDRESS:=$self}"
  export TEMPORAL_BROADCAST_ADDRESS
  ;;
esac
if [ -z "${TEMPORAL_ADDRESS:-}" ]; then
  case "$BIND_ON_IP" in
  *:*) TEMPORAL_ADDRESS="[$BIND_ON_IP]:7233" ;;
  *) TEMPORAL_ADDRESS="$BIND_ON_IP:7233" ;;
  esac
  export TEMPORAL_ADDRESS
fi
set --
for s in $(echo "${SERVICES:-}" | tr ':,' '  '); do
  set -- "$@" "--service=$s"
done
exec temporal-server --env docker start "$@"
