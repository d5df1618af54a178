#!/usr/bin/env bash
# Prints a PostgreSQL server URL that qtg can use (a role able to CREATE DATABASE), making one
# exist if needed: MG_DATABASE_URL / DATABASE_URL if set, else a server on 127.0.0.1:5432,
# else a private cluster under .qtg/pg started from the system's binaries (installed if
# missing). initdb refuses root, so the private cluster runs as the `postgres` user.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -n "${MG_DATABASE_URL:-}" ]; then echo "$MG_DATABASE_URL"; exit 0; fi
if [ -n "${DATABASE_URL:-}" ]; then echo "$DATABASE_URL"; exit 0; fi

probe() { # host port
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h "$1" -p "$2" >/dev/null 2>&1
  else
    (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1
  fi
}

# QTG_PG_PRIVATE=1 skips the shared server (to try the private cluster path).
if [ -z "${QTG_PG_PRIVATE:-}" ] && probe 127.0.0.1 5432; then
  echo "postgres://postgres@127.0.0.1:5432/postgres"; exit 0
fi

port=${QTG_PG_PORT:-55432}
dir="$here/.qtg/pg"
# As root the cluster runs as `postgres`, which must be able to reach the directory.
if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$here" 2>/dev/null; then
  dir="/var/tmp/qtg-pg-$(echo "$here" | sha256sum | cut -c1-12)"
fi
if probe 127.0.0.1 "$port"; then
  echo "postgres://postgres@127.0.0.1:$port/postgres"; exit 0
fi

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ]; then
  echo "ensure-postgres: installing PostgreSQL from the system's packages" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >&2 && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

run_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; fi
# Workers and tests open many connections; the default 100 is too few.
if [ ! -f "$dir/data/PG_VERSION" ]; then
  echo "ensure-postgres: initdb in $dir/data" >&2
  run_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >&2
fi
echo "ensure-postgres: starting a private cluster on 127.0.0.1:$port" >&2
run_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c max_connections=300 -c fsync=on" start >&2
echo "postgres://postgres@127.0.0.1:$port/postgres"
