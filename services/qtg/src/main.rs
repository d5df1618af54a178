//! `qtg`: every worker of the table and the API in one process, with the seed's supervision
//! groups — core workers fail fast together (the API with them); sidecars are isolated.
//! `MG_WORKERS_ENABLED=false` runs the API alone.

use qtg_service::{workers, WakeHub, WorkerTasks};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let process = qtg_service::boot("qtg", true).await?;
    if let Some(key) = &process.settings.bootstrap_admin_key {
        qtg_api::bootstrap_admin(&process.pool, key, process.settings.bootstrap_admin_key_ttl).await?;
    }
    let mut hub = WakeHub::default();
    let WorkerTasks { mut core, sidecars, heartbeats } = if process.settings.workers_enabled {
        process.worker_tasks(&workers::of_binary("qtg"), &mut hub).await?
    } else {
        WorkerTasks::default()
    };
    process.serve_admin(heartbeats).await?;
    hub.spawn(process.pool.clone(), process.shutdown.clone());
    let state = qtg_api::app_state(&process);
    let (_, server) = qtg_api::serve(state, process.settings.api_addr, process.shutdown.clone()).await?;
    core.push(("api".into(), Box::pin(async move { server.await? })));
    process.supervise(core, sidecars).await
}
