//! `qtg`: every worker and the API in one process, with the seed's supervision groups — the
//! core workers (dispatcher, observer, recovery) fail fast together; sidecars are isolated.
//! `MG_WORKERS_ENABLED=false` runs the API alone.

use qtg_service::{Task, WakeHub, WorkerKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let process = qtg_service::boot("qtg", true).await?;
    if let Some(key) = &process.settings.bootstrap_admin_key {
        qtg_api::bootstrap_admin(&process.pool, key).await?;
    }
    let mut hub = WakeHub::default();
    let mut core: Vec<(String, Task)> = Vec::new();
    let mut sidecars: Vec<(String, Task)> = Vec::new();
    let mut beats = Vec::new();
    if process.settings.workers_enabled {
        let (tasks, b) = process.worker_tasks(&WorkerKind::CORE, &mut hub).await?;
        core.extend(tasks);
        beats.extend(b);
        let (tasks, b) = process.worker_tasks(&WorkerKind::SIDECARS, &mut hub).await?;
        sidecars.extend(tasks);
        beats.extend(b);
    }
    process.serve_admin(beats).await?;
    hub.spawn(process.pool.clone(), process.shutdown.clone());
    let state = qtg_api::app_state(&process);
    let (_, server) = qtg_api::serve(state, process.settings.api_addr, process.shutdown.clone()).await?;
    core.push(("api".into(), Box::pin(async move { server.await? })));
    // Callbacks and executor health join the sidecars with their issue.
    process.supervise(core, sidecars).await
}
