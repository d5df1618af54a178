# The documented way to do everything. CI runs `make test`.
SHELL := /bin/bash
export CARGO_TERM_COLOR ?= never

DB_ADMIN_URL = $(shell ./scripts/ensure-postgres.sh)

.PHONY: run test build lint lint-deploy lint-proto fmt bench db chaos sqlx-prepare

build:
	cargo build --workspace --bins

## Start the whole system: Postgres, migrations, `qtg` with the sim registry, a demo template.
run: build
	@./scripts/run.sh

## Every test: unit, property, store and black-box (real binaries, real Postgres).
test:
	@url="$$(./scripts/ensure-postgres.sh)" && anvil="$$(./scripts/ensure-evm-tools.sh)" && \
	driver="$$(./scripts/ensure-chromium.sh)" && bouncer="$$(./scripts/ensure-pgbouncer.sh)" && \
	./scripts/sqlx.sh check && \
	cargo build --workspace --bins && \
	DATABASE_URL="$$url" QTG_TEST_DATABASE_URL="$$url" QTG_ANVIL="$$anvil" QTG_CHROMEDRIVER="$$driver" \
	QTG_PGBOUNCER="$$bouncer" cargo test --workspace -- --test-threads=4
	@$(MAKE) --no-print-directory lint-deploy
	@$(MAKE) --no-print-directory lint-proto

## The fault-injection run (docs/chaos.md): every worker in replicas over a private PostgreSQL
## cluster, 520 movements, SIGKILLs, SIGSTOPs past the lease, PostgreSQL crash-restarts, outages;
## prints the table, fails on any duplicate or lost callback. `make chaos SEED=n` for another
## schedule. A small seeded version runs in `make test` (tests/tests/chaos.rs).
## `make chaos FAILOVER=sync` (or `async`): PostgreSQL failovers instead (architecture §16).
SEED ?= 1
chaos:
	@./scripts/ensure-postgres.sh >/dev/null && anvil="$$(./scripts/ensure-evm-tools.sh)" && \
	cargo build --workspace --bins && \
	QTG_ANVIL="$$anvil" ./target/debug/qtg-chaos --seed $(SEED) $(if $(FAILOVER),--failover $(FAILOVER))

## Render the Helm chart (default and full values) and k8s/, lint, validate strictly against
## the Kubernetes schemas and assert the deployment properties (Python venv in .qtg/).
lint-deploy:
	@./scripts/lint-deploy.sh

## Protocol compatibility of proto/: `buf lint` (STANDARD, exceptions in buf.yaml) and
## `buf breaking` against the last release's protos in proto-released/ (buf from npm, in .qtg/).
lint-proto:
	@./scripts/buf.sh

## Rewrite libs/store/.sqlx, the checked queries' data, after a query or a migration changed
## (`make test` fails while it is stale).
sqlx-prepare:
	@./scripts/sqlx.sh prepare

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

## Throughput and latency against the same run's raw Postgres ceiling, on a PostgreSQL of its own with
## pg_stat_statements (release build; about 25 min: the history phase loads 1,000,000 nodes).
## QTG_BENCH_ONLY=fan,idle,scal,hist picks the parts after the empty-database run.
bench:
	@./scripts/bench.sh

db:
	@echo "$(DB_ADMIN_URL)"
