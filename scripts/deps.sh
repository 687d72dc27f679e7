#!/usr/bin/env bash
# Installs the Debian packages the tests need when they are missing: chromium (Web UI test),
# docker-compose (validates docker-compose.yaml without an engine), bzip2 (the upgrade test's
# update repository), postgresql (the production-shape test runs a Temporal server on a throwaway
# PostgreSQL cluster of its own; the package's binaries live in /usr/lib/postgresql/<major>/bin),
# docker.io and debootstrap (make test-compose runs an engine of its own and builds its images from
# a debootstrapped Debian; iptables comes with docker.io),
# rpm (the package test reads the .rpm and installs it into a throwaway root), systemd (the package
# test's systemd-analyze verify and security on the unit; only the tools, no running systemd).
# As root it installs them; otherwise it says what to install.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v bzip2 >/dev/null || need+=(bzip2)
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || need+=(postgresql)
command -v rpm >/dev/null || need+=(rpm)
command -v systemd-analyze >/dev/null || need+=(systemd)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "the tests need these Debian packages: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# the tests start their own PostgreSQL and Docker engine: keep the packages from starting their
# system services here
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
