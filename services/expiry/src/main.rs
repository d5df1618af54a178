//! `qtg-expiry`: expires movements past their approval window and template proposals past
//! their review window (seed: expiration_checker, template_proposal_expiration).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-expiry").await
}
