#!/usr/bin/env bash
# `make bench`: the raw Postgres ceiling for one audited transition (pgbench, 1/2/4/8
# clients), then qtg driven through separately started release binaries (qtg-bench).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
admin_url=$(./scripts/ensure-postgres.sh)
base=${admin_url%/*}
cargo build --release --workspace --bins

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
