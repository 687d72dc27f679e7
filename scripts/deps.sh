#!/usr/bin/env bash
# Installs the Debian packages the tests need when they are missing: chromium (Web UI test),
# docker-compose (validates docker-compose.yaml without an engine), bzip2 (the upgrade test's
# update repository), postgresql (the production-shape test runs a Temporal server on a throwaway
# PostgreSQL cluster of its own; the package's binaries live in /usr/lib/postgresql/<major>/bin),
# rpm (the package test reads the .rpm and installs it into a throwaway root), systemd (the package
# test's systemd-analyze verify and security on the unit; only the tools, no running systemd).
# As root it installs them; otherwise it says what to install.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v bzip2 >/dev/null || need+=(bzip2)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || need+=(postgresql)
command -v rpm >/dev/null || need+=(rpm)
command -v systemd-analyze >/dev/null || need+=(systemd)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "the tests need these Debian packages: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# the tests start their own PostgreSQL: keep the package from starting its system cluster here
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
