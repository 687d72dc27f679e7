#!/bin/sh
# Entry point of the postgres stand-in. As root it hands the data directory to the postgres user
# and runs itself again as that user; an empty data directory is initialised with POSTGRES_USER
# (default postgres) and POSTGRES_PASSWORD (required), scram-sha-256 from any address, and the
# database POSTGRES_DB (default: the user's name); then postgres runs in the foreground.
set -eu
if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres: POSTGRES_PASSWORD must be set for a new database" >&2
    exit 1
  fi
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\";" | postgres --single -j -D "$PGDATA" postgres >/dev/null
  fi
  echo "postgres: initialised $PGDATA for user $user, database $db"
fi
exec "$@"
