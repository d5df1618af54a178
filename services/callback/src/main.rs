//! `qtg-callback`: delivers the callback outbox, v3-signed, with backoff, DLQ and an SSRF
//! guard (seed: callback_dispatcher).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    qtg_service::run_worker_binary("qtg-callback").await
}
