//! `qtg-api`: the HTTP API as its own process.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let process = qtg_service::boot("qtg-api", true).await?;
    let state = qtg_api::app_state(&process);
    if let Some(key) = &process.settings.bootstrap_admin_key {
        qtg_api::bootstrap_admin(&process.pool, key, process.settings.bootstrap_admin_key_ttl).await?;
    }
    process.serve_admin(Vec::new()).await?;
    let (_, server) = qtg_api::serve(state, process.settings.api_addr, process.shutdown.clone()).await?;
    let core: Vec<(String, qtg_service::Task)> = vec![("api".into(), Box::pin(async move { server.await? }))];
    process.supervise(core, Vec::new()).await
}
