//! `qtg-observer`: the observer worker as its own process.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-observer").await
}
