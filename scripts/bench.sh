#!/usr/bin/env bash
# `make bench`: on a PostgreSQL of its own (docs/benchmarks.md "The server"), the raw ceiling
# for one audited transition (pgbench, 1/2/4/8 clients), then qtg driven through separately
# started release binaries (qtg-bench): the contract's floor (scripts/bench-floor.sql run by
# pgbench on qtg's schema), empty database, fan-out, idle, scaling, and the same phases again
# on a database grown to 1,000,000 finished nodes.
# QTG_BENCH_DATABASE_URL runs it on that server instead (pg_stat_statements optional).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cargo build --release --workspace --bins

if [ -n "${QTG_BENCH_DATABASE_URL:-}" ]; then
  admin_url=$QTG_BENCH_DATABASE_URL
else
  # The server: the system's PostgreSQL binaries, their defaults (fsync and synchronous
  # commit on, autovacuum on) except what a deployment sizes for its machine — the same
  # settings docs/deployment.md recommends — and pg_stat_statements loaded.
  ./scripts/ensure-postgres.sh >/dev/null
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  dir=$(mktemp -d /var/tmp/qtg-bench-pg.XXXXXX)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  run_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  run_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
  cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = '1GB'
effective_cache_size = '4GB'
work_mem = '16MB'
maintenance_work_mem = '256MB'
max_wal_size = '4GB'
checkpoint_timeout = '15min'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = 'top'
pg_stat_statements.track_planning = on
CONF
  run_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
  stop() { run_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
  trap stop EXIT
  admin_url="postgres://postgres@127.0.0.1:$port/postgres"
  echo "bench server: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($dir)"
fi
base=${admin_url%/*}

db=qtg_pgbench
psql "$admin_url" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql "$base/$db" -q <<'SQL'
CREATE TABLE bq (id bigserial PRIMARY KEY, state text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX bq_ready ON bq (id) WHERE state = 'READY';
CREATE TABLE baudit (id bigserial PRIMARY KEY, node_id bigint NOT NULL, data jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bevents (id bigserial PRIMARY KEY, node_id bigint NOT NULL, data jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO bq (state) SELECT 'READY' FROM generate_series(1, 400000);
VACUUM ANALYZE bq;
SQL
script=$(mktemp)
cat > "$script" <<'SQL'
BEGIN;
UPDATE bq SET state = 'DONE', updated_at = now()
  WHERE id = (SELECT id FROM bq WHERE state = 'READY' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING id AS node \gset
INSERT INTO baudit (node_id, data) VALUES (:node, '{"from":"READY","to":"DONE"}');
INSERT INTO bevents (node_id, data) VALUES (:node, '{"kind":"transition"}');
COMMIT;
SQL
json="{"
for c in 1 2 4 8; do
  out=$(pgbench -n -f "$script" -c "$c" -j "$(( c < 2 ? c : 2 ))" -T 8 "$base/$db" 2>&1)
  tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -n 1)
  lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
  json="$json\"$c\":{\"tps\":$tps,\"latency_ms\":$lat},"
done
json="${json%,}}"
rm -f "$script"
psql "$admin_url" -qc "DROP DATABASE IF EXISTS $db"

QTG_BENCH_PGBENCH="$json" QTG_TEST_DATABASE_URL="$admin_url" ./target/release/qtg-bench
