//! `qtg-drift`: re-reads the on-chain facts the lanes rely on (contract code hashes, token
//! decimals, the CCTP messenger's transmitter and remote domains, signer addresses) and
//! compares them with the baseline an admin recorded (seed: verify_drift; conditional on
//! MG_VERIFY_DRIFT_ENABLED, every MG_VERIFY_DRIFT_INTERVAL_SECONDS, default 6 h).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-drift").await
}
