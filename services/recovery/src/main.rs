//! `qtg-recovery`: the recovery worker as its own process.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-recovery").await
}
