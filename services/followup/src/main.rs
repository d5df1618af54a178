//! `qtg-followup`: follows up capital transfers untouched past the stale threshold — creates
//! a movement whose creation was lost, closes a request whose movement finished, hands one
//! whose movement expired, was rejected or needs a person to NEEDS_ATTENTION (seed:
//! capital_transfer_followup; conditional on MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED, every
//! MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS, default 60 s).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-followup").await
}
