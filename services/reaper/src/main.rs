//! `qtg-reaper`: reclaims EVM nonce reservations that nothing ever signed or broadcast with
//! (seed: evm_nonce_reaper; conditional on MG_EVM_NONCE_REAPER_ENABLED, skipped with a warning
//! when MG_EVM_CHAINS names no chain).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-reaper").await
}
