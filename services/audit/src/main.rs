//! `qtg-audit`: promotes `audit_outbox` into `audit_events`, in order and exactly once under
//! any number of replicas (seed: audit_outbox_promoter).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-audit").await
}
