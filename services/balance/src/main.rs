//! `qtg-balance`: appends every venue's balances (the registry's `[balances."<venue_key>"]`
//! fetchers) to `balance_snapshots` and deletes rows past the retention (seed:
//! balance_snapshot; conditional on MG_BALANCE_SNAPSHOT_ENABLED, every
//! MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS, default 30 s).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-balance").await
}
