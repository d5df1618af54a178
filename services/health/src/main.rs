//! `qtg-health`: health of every registered executor and signer, and signers' observed
//! identity (seed: executor_health).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-health").await
}
