//! What every worker process shares: typed `MG_*` configuration, the seed's `run_loop`
//! (plus draining, LISTEN/NOTIFY wake-ups and concurrency), supervision groups, heartbeats,
//! the admin HTTP server (/healthz /readyz /metrics), JSON logs and graceful shutdown.

pub mod admin;
pub mod config;
pub mod heartbeat;
pub mod logging;
pub mod metrics;
pub mod run_loop;
pub mod shutdown;
pub mod supervise;
pub mod wake;
pub mod workers;

pub use config::Settings;
pub use metrics::Metrics;
pub use run_loop::{run_loop, LoopSpec, Tick};
pub use tokio_util::sync::CancellationToken;
pub use workers::{Flag, Group, Worker, WorkerSettings};
