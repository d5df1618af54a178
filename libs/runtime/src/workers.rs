//! The shape of one worker in qtg's worker table (`services/common/src/workers.rs` holds the
//! table itself, with each worker's tick). Everything that differs between workers is a field
//! here, so the all-in-one `qtg`, the per-worker binaries, settings, `--print-config`, the
//! heartbeat rows, `GET /v3/workers` and the Helm chart's worker list all read one entry.

use std::time::Duration;

/// Supervision group (the seed's `run_worker_groups`): a core worker that ends abnormally
/// takes the whole core group (and the process) down; a sidecar's failure is logged and the
/// others go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    Core,
    Sidecar,
}

/// The flag that enables a conditional worker (`MG_EVM_NONCE_REAPER_ENABLED`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    pub key: &'static str,
    pub default: bool,
    /// The key is a comma-separated list, not a boolean: the worker runs when it names
    /// anything (`MG_CEX_TRANSFER_INGEST_VENUES_CSV`, the seed's "no boolean flag").
    pub list: bool,
}

/// One worker: its seed name and everything that is configured per worker. `T` is its tick
/// (a function of the engine, which this crate does not know).
#[derive(Debug)]
pub struct Worker<T> {
    /// The seed's name: heartbeat key, metrics label, log field.
    pub name: &'static str,
    /// The binary that runs it alone (one Deployment per binary).
    pub binary: &'static str,
    /// One line for operators (docs/binaries.md, `/v3/workers`).
    pub summary: &'static str,
    /// `MG_*_INTERVAL_SECONDS` and its default: the idle poll.
    pub interval_key: &'static str,
    pub default_interval: Duration,
    /// `MG_*_CONCURRENCY` (claim loops per process, 1..=64); `None` = one loop.
    pub concurrency_key: Option<&'static str>,
    /// The NOTIFY channel that wakes it early, if any.
    pub wake: Option<&'static str>,
    pub group: Group,
    /// `None` = always on (whenever workers run).
    pub enabled_by: Option<Flag>,
    /// A setting without which the worker has nothing to do: unset, it is skipped with a
    /// warning (the seed's "registered only when … available").
    pub requires: Option<&'static str>,
    pub tick: T,
}

/// Most claim loops a process may run for one worker.
pub const MAX_CONCURRENCY: usize = 64;

/// A worker's effective settings, read from the key → value source by
/// [`crate::Settings::from_vars`].
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    pub interval: Duration,
    pub concurrency: usize,
    pub enabled: bool,
    /// The `requires` setting, when it is unset (the worker is then skipped).
    pub missing: Option<&'static str>,
}
