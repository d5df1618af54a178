#!/usr/bin/env bash
# The store's checked queries: libs/store's `sqlx::query!` macros build from the query data
# committed in libs/store/.sqlx (`SQLX_OFFLINE=true`, .cargo/config.toml), never from a live
# database. This script derives that data from a database of its own (`qtg_sqlx`, dropped,
# re-created and migrated from migrations/ on every run) with sqlx-cli, installed when missing:
#   scripts/sqlx.sh check    fail if libs/store/.sqlx is not exactly what the queries need
#                            (`cargo sqlx prepare --check`; `make test` runs it)
#   scripts/sqlx.sh prepare  rewrite libs/store/.sqlx (after a query or a migration changed)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
  check) args=(--check) ;;
  prepare) args=() ;;
  *) echo "usage: scripts/sqlx.sh check|prepare" >&2; exit 2 ;;
esac

version=0.9.0
if ! cargo sqlx --version 2>/dev/null | grep -qF " $version"; then
  echo "sqlx: installing sqlx-cli $version (once; postgres only)" >&2
  cargo install --quiet --locked --debug --version "$version" --no-default-features --features postgres \
    sqlx-cli >&2
fi

server=$(./scripts/ensure-postgres.sh)
# The same server, the database `qtg_sqlx`: the URL's database (its path) replaced, or added
# when it names none; its query (`?sslmode=…`) kept.
query=""
case "$server" in *\?*) query="?${server#*\?}"; server=${server%%\?*} ;; esac
authority=${server#*://}
if [[ "$authority" == */* ]]; then
  url="${server%/*}/qtg_sqlx$query"
else
  url="$server/qtg_sqlx$query"
fi
DATABASE_URL="$url" cargo sqlx database reset -y -f --source migrations >/dev/null
cd libs/store
DATABASE_URL="$url" cargo sqlx prepare "${args[@]}"
