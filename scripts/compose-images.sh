#!/usr/bin/env bash
# Builds every image docker-compose.yaml uses, on the project's own engine (scripts/docker-engine.sh),
# without an image registry: stand-ins for the upstream images (docker/standins, tagged with the
# names the compose file and the Dockerfile use) from Debian's packages, the Go module proxy and
# the binaries tools/go.mod builds, then the project's own Dockerfile. Builds use the host's
# network (--network host), which reaches only the package registries.
#
# A stand-in is rebuilt only when its inputs change (a hash of them is a label on the image), so a
# second run on the same machine builds only what changed.
#
# The Debian mirror is the machine's own: the first `deb` source of the main archive and of the
# security suite in its apt configuration (/etc/apt/sources.list, then sources.list.d/*.list and
# *.sources in apt's order), unless PROVISIONER_DEBIAN_MIRROR and PROVISIONER_DEBIAN_SECURITY say
# otherwise. `scripts/compose-images.sh --mirrors` prints the two and builds nothing (APT_DIR=DIR
# reads another apt configuration directory instead of /etc/apt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
RELEASE=bookworm # the images' Debian release

# apt_sources [DIR]: every enabled `deb` source of the apt configuration under DIR (/etc/apt), one
# "URI SUITE COMPONENT..." line per URI and suite, in the order apt reads them: one-line .list
# files and deb822 .sources stanzas
apt_sources() {
  local dir=${1:-/etc/apt} f
  local files=()
  [ -f "$dir/sources.list" ] && files+=("$dir/sources.list")
  for f in "$dir"/sources.list.d/*; do
    case "$f" in *.list | *.sources) [ -f "$f" ] && files+=("$f") ;; esac
  done
  [ ${#files[@]} -gt 0 ] || return 0
  for f in "${files[@]}"; do
    case "$f" in
    *.sources)
      awk '
        function flush(   n, m, i, j, uris, suites) {
          if (types ~ /(^|[[:space:]])deb([[:space:]]|$)/ && tolower(enabled) != "no") {
            n = split(uri, uris, /[[:space:]]+/); m = split(suite, suites, /[[:space:]]+/)
            for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) if (uris[i] != "" && suites[j] != "") print uris[i], suites[j], comps
          }
          types = uri = suite = comps = enabled = ""; key = ""
        }
        /^#/ { next }
        /^[[:space:]]*$/ { flush(); next }
        /^[[:space:]]/ { if (key == "uris") uri = uri " " $0; else if (key == "suites") suite = suite " " $0; next }
        {
          key = tolower(substr($0, 1, index($0, ":") - 1)); val = substr($0, index($0, ":") + 1)
          gsub(/^[[:space:]]+|[[:space:]]+$/, "", val)
          if (key == "types") types = val; else if (key == "uris") uri = val
          else if (key == "suites") suite = val; else if (key == "components") comps = val
          else if (key == "enabled") enabled = val
        }
        END { flush() }' "$f"
      ;;
    *)
      sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { $1 = ""; sub(/^ /, ""); print }'
      ;;
    esac
  done
  return 0
}

# apt_mirror SUITE... : the URI of the first deb source of one of the suites (in apt's order),
# without its trailing slash
apt_mirror() {
  local sources
  sources=$(apt_sources "${APT_DIR:-/etc/apt}")
  awk -v want="$*" '
    BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) ok[w[i]] = 1 }
    ok[$2] && !found { sub(/\/+$/, "", $1); print $1; found = 1 }' <<<"$sources"
}

# the machine's own release serves as well: its archive carries every release
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}" || true)
[ "$codename" != "$RELEASE" ] || codename=
MIRROR="${PROVISIONER_DEBIAN_MIRROR:-$(apt_mirror "$RELEASE" "$RELEASE-updates" $codename ${codename:+$codename-updates})}"
SECURITY="${PROVISIONER_DEBIAN_SECURITY:-$(apt_mirror "$RELEASE-security" "$RELEASE/updates" ${codename:+$codename-security $codename/updates})}"
[ -n "$MIRROR" ] || { echo "compose-images: no Debian archive among this machine's apt sources (${APT_DIR:-/etc/apt}/sources.list, sources.list.d/*.list, *.sources; a deb source of suite $RELEASE${codename:+ or $codename}): set PROVISIONER_DEBIAN_MIRROR to the mirror's URI" >&2; exit 1; }
[ -n "$SECURITY" ] || { echo "compose-images: no Debian security suite among this machine's apt sources (${APT_DIR:-/etc/apt}/sources.list, sources.list.d/*.list, *.sources; a deb source of suite $RELEASE-security${codename:+ or $codename-security}): set PROVISIONER_DEBIAN_SECURITY to its URI" >&2; exit 1; }
if [ "${1:-}" = --mirrors ]; then
  printf 'archive %s\nsecurity %s\n' "$MIRROR" "$SECURITY"
  exit 0
fi

export PATH="/usr/sbin:/usr/bin:$PATH" # Debian's docker client, the engine's own version
export DOCKER_BUILDKIT=0               # the classic builder: docker.io ships no buildx
eval "$(scripts/docker-engine.sh env)"
work="$root/.state/standins"
mkdir -p "$work"
LABEL=org.choria-temporal.standin.inputs

log() { printf '%s compose-images: %s\n' "$(date +%T)" "$*"; }

# current TAG: the inputs hash the image was built from, or nothing
built_from() { docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null || true; }
image_id() { docker image inspect --format '{{.Id}}' "$1"; }
hash_of() { sha256sum "$@" | sha256sum | cut -c1-16; }

# build TAG DOCKERFILE CONTEXT HASH
build() {
  local tag=$1 dockerfile=$2 ctx=$3 inputs=$4
  if [ "$(built_from "$tag")" = "$inputs" ]; then
    log "$tag is up to date"
    return
  fi
  log "building $tag"
  local t0=$SECONDS
  local out="$work/build-${tag//[\/:]/_}.log"
  docker build --force-rm --network host --label "$LABEL=$inputs" -t "$tag" -f "$dockerfile" "$ctx" >"$out" 2>&1 ||
    { tail -40 "$out" >&2; echo "building $tag failed (log: $out)" >&2; exit 1; }
  log "built $tag in $((SECONDS - t0)) s"
}

# context NAME FILE... : a fresh build context of hard links (the binaries are large)
context() {
  local dir="$work/ctx/$1"
  shift
  rm -rf "$dir" && mkdir -p "$dir"
  echo "$dir"
}

# 1. debian:bookworm-slim: debootstrap's minbase, with the security and updates suites
debian_inputs=$(printf 'minbase bookworm %s %s v1' "$MIRROR" "$SECURITY" | sha256sum | cut -c1-16)
if [ "$(built_from debian:bookworm-slim)" != "$debian_inputs" ]; then
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap (make deps)" >&2; exit 1; }
  log "debootstrap --variant=minbase bookworm from $MIRROR"
  t0=$SECONDS
  rootfs="$work/rootfs"
  rm -rf "$rootfs"
  mkdir -p "$work/debs"
  debootstrap --variant=minbase --cache-dir="$work/debs" bookworm "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECURITY bookworm-security main
SOURCES
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -c . |
    docker import --change 'CMD ["bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL $LABEL=$debian_inputs" - debian:bookworm-slim >/dev/null
  rm -rf "$rootfs"
  log "debian:bookworm-slim imported in $((SECONDS - t0)) s"
else
  log "debian:bookworm-slim is up to date"
fi
debian_id=$(image_id debian:bookworm-slim)

# 2. the stand-ins' common layer
inputs=$(echo "$debian_id" | cat - docker/standins/base.Dockerfile | sha256sum | cut -c1-16)
ctx=$(context base)
build choria-temporal/standin-base:bookworm docker/standins/base.Dockerfile "$ctx" "$inputs"
base_id=$(image_id choria-temporal/standin-base:bookworm)

# 3. golang:1.26-bookworm: the common layer (CA certificates, as the official image has) and the
# toolchain of this machine's go release, from the module proxy
gover=$(go env GOVERSION)
toolchain="golang.org/toolchain@v0.0.1-$gover.$(go env GOOS)-$(go env GOARCH)"
inputs=$(echo "$base_id $toolchain" | cat - docker/standins/golang.Dockerfile | sha256sum | cut -c1-16)
if [ "$(built_from golang:1.26-bookworm)" != "$inputs" ]; then
  tcdir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$toolchain" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -f "$tcdir/bin/go" ] || { echo "could not fetch $toolchain from the module proxy" >&2; exit 1; }
  ctx=$(context golang)
  # the module cache keeps the zip's files read-only and not executable; the go command's own
  # toolchain switch marks bin/ and pkg/tool/ executable the same way
  cp -r "$tcdir" "$ctx/go"
  chmod -R u+w "$ctx/go"
  chmod +x "$ctx"/go/bin/* "$ctx"/go/pkg/tool/*/*
  build golang:1.26-bookworm docker/standins/golang.Dockerfile "$ctx" "$inputs"
  rm -rf "$ctx"
else
  log "golang:1.26-bookworm is up to date"
fi

# 4. PostgreSQL
inputs=$(echo "$debian_id" | cat - docker/standins/postgres.Dockerfile docker/standins/postgres-entrypoint.sh | sha256sum | cut -c1-16)
ctx=$(context postgres)
cp docker/standins/postgres-entrypoint.sh "$ctx/"
build postgres:15 docker/standins/postgres.Dockerfile "$ctx" "$inputs"

# 5. Temporal server, admin tools and UI from tools/go.mod's binaries and modules
modver() { go -C tools list -m -f '{{.Version}}' "$1"; }
moddir() { go -C tools list -m -f '{{.Dir}}' "$1"; }
server_ver=$(modver go.temporal.io/server)
ui_ver=$(modver github.com/temporalio/ui-server/v2)
[ "$server_ver" = v1.29.1 ] && [ "$ui_ver" = v2.42.1 ] ||
  { echo "tools/go.mod has server $server_ver and ui-server $ui_ver: update the image tags here and in docker-compose.yaml" >&2; exit 1; }
server_dir=$(moddir go.temporal.io/server)
ui_dir=$(moddir github.com/temporalio/ui-server/v2)
for b in temporal temporal-server temporal-sql-tool temporal-ui-server; do
  [ -x ".bin/$b" ] || { echo ".bin/$b is missing: make tools .bin/temporal-ui-server" >&2; exit 1; }
done

inputs=$(echo "$base_id $server_ver" | cat - docker/standins/temporal-server.Dockerfile docker/standins/temporal-server-entrypoint.sh \
  .bin/temporal-server .bin/temporal "$server_dir/config/docker.yaml" "$server_dir/config/dynamicconfig/docker.yaml" | sha256sum | cut -c1-16)
ctx=$(context temporal-server)
mkdir -p "$ctx/config/dynamicconfig"
cp -l .bin/temporal-server .bin/temporal "$ctx/" 2>/dev/null || cp .bin/temporal-server .bin/temporal "$ctx/"
cp "$server_dir/config/docker.yaml" "$ctx/config/docker.yaml"
cp "$server_dir/config/dynamicconfig/docker.yaml" "$ctx/config/dynamicconfig/docker.yaml"
cp docker/standins/temporal-server-entrypoint.sh "$ctx/"
build temporalio/server:1.29.1 docker/standins/temporal-server.Dockerfile "$ctx" "$inputs"

inputs=$(echo "$base_id $server_ver" | cat - docker/standins/temporal-admin-tools.Dockerfile .bin/temporal-sql-tool .bin/temporal | sha256sum | cut -c1-16)
ctx=$(context temporal-admin-tools)
cp -l .bin/temporal-sql-tool .bin/temporal "$ctx/" 2>/dev/null || cp .bin/temporal-sql-tool .bin/temporal "$ctx/"
cp -r "$server_dir/schema" "$ctx/schema"
chmod -R u+w "$ctx/schema"
build temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0 docker/standins/temporal-admin-tools.Dockerfile "$ctx" "$inputs"

inputs=$(echo "$base_id $ui_ver" | cat - docker/standins/temporal-ui.Dockerfile docker/standins/temporal-ui-start.sh \
  .bin/temporal-ui-server "$ui_dir/config/docker.yaml" | sha256sum | cut -c1-16)
ctx=$(context temporal-ui)
mkdir -p "$ctx/config"
cp -l .bin/temporal-ui-server "$ctx/ui-server" 2>/dev/null || cp .bin/temporal-ui-server "$ctx/ui-server"
cp "$ui_dir/config/docker.yaml" "$ctx/config/docker.yaml"
cp docker/standins/temporal-ui-start.sh "$ctx/"
build temporalio/ui:2.42.1 docker/standins/temporal-ui.Dockerfile "$ctx" "$inputs"
rm -rf "$work/ctx"

# 6. the project's own image, from its Dockerfile (the engine's layer cache makes an unchanged
# tree a no-op). Its `go mod download` gets the modules from this machine's module cache, served
# as a module proxy on loopback: this machine reaches the module proxy through a TLS-intercepting
# egress proxy whose CA only the host trusts, and the cache holds exactly what the proxy served
# (.ci/run's `go mod download`).
modcache="$(go env GOMODCACHE)/cache/download"
go mod download # whatever the cache lacks, from the module proxy, as the host reaches it
# the same port each run when it is free: the GOPROXY build argument is part of the build cache key
port_free() { python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', $1))" 2>/dev/null; }
port=${PROVISIONER_MODPROXY_PORT:-47521}
port_free "$port" || port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$modcache" "$port" >"$work/modproxy.log" 2>&1 &
proxy_pid=$!
trap 'kill $proxy_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break; sleep 0.1; done
log "building choria-temporal-provisioner:local from ./Dockerfile"
t0=$SECONDS
docker build --force-rm --network host --build-arg "GOPROXY=http://127.0.0.1:$port" --build-arg GOSUMDB=off \
  -t choria-temporal-provisioner:local . >"$work/build-provisioner.log" 2>&1 ||
  { tail -40 "$work/build-provisioner.log" >&2; echo "building the project's image failed (log: $work/build-provisioner.log)" >&2; exit 1; }
log "built choria-temporal-provisioner:local in $((SECONDS - t0)) s"
