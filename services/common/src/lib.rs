//! What every qtg binary does at start: read `MG_*` from the environment (the only place
//! that does), set up logs, connect and migrate, load the executor registry over the
//! compiled-in [`lanes`], and run the [`workers`] of its binary under supervision with
//! heartbeats, NOTIFY wake-ups and the admin server.

pub mod diagram;
pub mod lanes;
pub mod workers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use qtg_engine::{Engine, EngineSettings, LaneGrace};
use qtg_executor::{LaneContext, Registry, RegistryFile};
use qtg_runtime::heartbeat::{Heartbeat, Heartbeats};
use qtg_runtime::supervise::run_groups;
pub use qtg_runtime::supervise::Task;
pub use qtg_runtime::wake::WakeHub;
use qtg_runtime::{logging, run_loop, CancellationToken, Group, LoopSpec, Metrics, Settings};
use qtg_store::PgPool;
pub use workers::{Worker, WORKERS};

/// A booted process: settings, database, executors, metrics and its shutdown token.
pub struct Process {
    pub binary: &'static str,
    pub settings: Settings,
    pub pool: PgPool,
    /// The session check of the pool's connections (its newest verdict for /readyz, /metrics).
    pub session: qtg_store::session::SessionGuard,
    pub registry: Arc<Registry>,
    pub metrics: Metrics,
    pub shutdown: CancellationToken,
    /// Flushes exported traces when the process ends.
    pub trace_guard: Option<qtg_runtime::logging::TraceGuard>,
    pub instance_id: String,
}

/// The environment as a key → value map.
pub fn env_vars() -> HashMap<String, String> {
    std::env::vars().collect()
}

/// The binaries whose workers make effects (submit, recover, release nonces): the ones
/// `MG_DB_REQUIRE_SYNC_REPLICATION` holds to synchronously replicated commits.
pub const EFFECT_BINARIES: [&str; 4] = ["qtg", "qtg-dispatcher", "qtg-recovery", "qtg-reaper"];

/// Reads settings (printing them and exiting on `--print-config`), starts logging, connects,
/// migrates when `MG_MIGRATE` says so and loads the registry.
pub async fn boot(binary: &'static str, migrate_default: bool) -> anyhow::Result<Process> {
    let vars = env_vars();
    let settings = Settings::from_vars(&vars, migrate_default, WORKERS).context("invalid configuration")?;
    if std::env::args().any(|a| a == "--print-config") {
        print!("{}", settings.print_config());
        std::process::exit(0);
    }
    let otlp = settings.otlp_endpoint.as_ref().map(|endpoint| logging::OtlpConfig {
        endpoint: endpoint.clone(),
        service_name: settings.otel_service_name.clone().unwrap_or_else(|| binary.to_string()),
    });
    let trace_guard = match logging::init(settings.log_format, vars.get("RUST_LOG").map(String::as_str), otlp.as_ref())
    {
        Ok(guard) => guard,
        Err(e) => {
            tracing::error!(error = %e, "traces are not exported");
            None
        }
    };
    if let Some(o) = &otlp {
        tracing::info!(
            endpoint = %qtg_core::urls::redact(&o.endpoint), service_name = %o.service_name,
            "exporting traces over OTLP/gRPC"
        );
    }
    tracing::info!(binary, settings = ?settings, "starting");
    // Executor latency, transitions, claim misses and callback outcomes reach /metrics.
    let metrics = Metrics::new();
    qtg_telemetry::install(metrics.clone());
    let limits = qtg_store::SessionLimits {
        lock_timeout: settings.db_lock_timeout,
        idle_in_transaction: settings.db_idle_in_transaction_timeout,
    };
    // Every connection is checked where it is made, at start and on every reconnect: a
    // standby is refused, and so are limits a pooler or a role default left weaker
    // (MG_DB_SESSION_CHECK) and, for the workers that make effects, commits that are not
    // synchronously replicated when MG_DB_REQUIRE_SYNC_REPLICATION asks it.
    let effects = EFFECT_BINARIES.contains(&binary);
    let session = qtg_store::session::SessionGuard::new(qtg_store::session::SessionPolicy {
        limits,
        refuse_weaker_limits: settings.db_refuse_weaker_session,
        require_sync_replication: settings.db_require_sync_replication && effects,
    });
    let migrate_only = std::env::args().any(|a| a == "--migrate-only");
    let pool = match qtg_store::connect_guarded(&settings.database_url, settings.db_pool_size, session.clone(), binary)
        .await
    {
        Ok(pool) => pool,
        // A pool that timed out retrying refused connections: say why they were refused.
        Err(e) => match session.last().and_then(|s| s.refused) {
            Some(why) => anyhow::bail!("database connections refused: {why} (docs/architecture.md §16)"),
            None => anyhow::bail!("cannot connect to the database: {e} (docs/architecture.md §16 says what qtg needs)"),
        },
    };
    // What is checked where a connection is made can change under it (the standby names
    // emptied, the server turned read-only): checked again every 5 s.
    {
        let (guard, pool) = (session.clone(), pool.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                if let Err(e) = guard.recheck(&pool).await {
                    tracing::debug!(error = %e, "session recheck");
                }
            }
        });
    }
    // Behind a transaction pooler a notification never reaches its listener (nor do sqlx's
    // prepared statements or the migrator's advisory lock work): refuse to run.
    let heard = qtg_runtime::wake::notify_reaches_listener(&pool, Duration::from_secs(5))
        .await
        .context("cannot check LISTEN/NOTIFY through the pool")?;
    if !heard {
        anyhow::bail!(
            "LISTEN/NOTIFY does not work through MG_DATABASE_URL: a notification sent through the pool never reached \
             the listener — a transaction or statement pooler (PgBouncer pool_mode = transaction)? qtg needs session \
             pooling or a direct connection (docs/architecture.md §16)"
        );
    }
    // `--migrate-only` (the Kubernetes migration Job): apply migrations and exit. Migrations
    // run on a connection of their own, without the workers' lock_timeout: a starter waits
    // for another one's migration (sqlx's advisory lock) instead of failing.
    if settings.migrate || migrate_only {
        let migrator = qtg_store::connect_limited(&settings.database_url, 1, None, binary)
            .await
            .context("cannot connect to the database")?;
        qtg_store::migrate(&migrator).await.context("migrations failed")?;
        migrator.close().await;
        tracing::info!("migrations applied");
    }
    if migrate_only {
        std::process::exit(0);
    }
    let (registry, read_by_lanes) = load_registry(&settings, &pool, &vars)?;
    let registry = Arc::new(registry);
    // A misspelt setting must not silently do nothing.
    let unknown = settings.unknown_keys(&vars, &read_by_lanes);
    if !unknown.is_empty() {
        if settings.strict_settings {
            anyhow::bail!("unknown settings (MG_STRICT_SETTINGS=true): {}", unknown.join(", "));
        }
        tracing::warn!(unknown = ?unknown, "MG_* variables no part of this process reads (misspelt?); they do nothing");
    }
    let hostname =
        std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "host".into());
    let instance_id = format!("{hostname}-{}-{}", std::process::id(), &uuid_suffix());
    Ok(Process {
        binary,
        settings,
        pool,
        session,
        registry,
        metrics,
        shutdown: qtg_runtime::shutdown::on_signals(),
        trace_guard,
        instance_id,
    })
}

fn uuid_suffix() -> String {
    format!("{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as u32
}

/// The registry over the compiled-in lanes, and the variables the lanes and the registry's
/// entries read.
fn load_registry(
    settings: &Settings,
    pool: &PgPool,
    vars: &HashMap<String, String>,
) -> anyhow::Result<(Registry, Vec<String>)> {
    let Some(path) = &settings.executor_registry else {
        tracing::warn!("MG_EXECUTOR_REGISTRY is not set: no executors are registered");
        return Ok((Registry::default(), Vec::new()));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read MG_EXECUTOR_REGISTRY {}", path.display()))?;
    let file = RegistryFile::parse(&text).with_context(|| format!("in {}", path.display()))?;
    let read = std::sync::Mutex::new(Vec::new());
    let setting = |key: &str| {
        read.lock().expect("settings read").push(key.to_string());
        vars.get(key).cloned()
    };
    let registry = lanes::build_registry(
        &file,
        &LaneContext { pool, setting: &setting, clock_skew: settings.clock_skew, shared: &Default::default() },
    )?;
    tracing::info!(
        executors = ?file.executors.keys().collect::<Vec<_>>(),
        signers = ?file.signers.keys().collect::<Vec<_>>(),
        "executor registry loaded"
    );
    Ok((registry, read.into_inner().expect("settings read")))
}

/// The engine's settings from the process' settings: the one place a setting reaches the
/// engine (an empty environment gives exactly [`EngineSettings::default`], checked below).
pub fn engine_settings(s: &Settings) -> EngineSettings {
    EngineSettings {
        executor_timeout: s.executor_timeout,
        observe_timeout_enforcement: s.observe_timeout_enforcement,
        observe_batch: s.observe_batch,
        recovery_batch: s.recovery_batch,
        grace: LaneGrace {
            ccip: s.grace_ccip.unwrap_or(s.grace_default),
            stargate: s.grace_stargate.unwrap_or(s.grace_default),
            cex: s.grace_cex.unwrap_or(s.grace_default),
            other: s.grace_other.unwrap_or(s.grace_default),
        },
        call_failure_backoff: EngineSettings::default().call_failure_backoff,
        callbacks: qtg_engine::callbacks::CallbackSettings {
            secret: s.callback_secret.clone().map(String::into_bytes),
            signature: s.callback_signature,
            webhook_secrets: s.callback_webhook_secrets.clone(),
            max_attempts: s.callback_max_attempts,
            timeout: s.callback_timeout,
            allow_private: s.callback_allow_private,
            allowed_hosts: s.callback_allowed_hosts.clone(),
            per_receiver: s.callback_per_receiver,
            delivery: qtg_engine::callbacks::Delivery::new(s.callback_max_in_flight),
        },
        risk: s.risk.clone(),
        lease: s.lease,
        approval_health_gate: if s.approval_health_gate_strict {
            qtg_engine::HealthGate::Strict
        } else {
            qtg_engine::HealthGate::DownOnly
        },
        key_creation_approvals: s.key_creation_approvals,
        policy_change_approvals: s.policy_change_approvals,
        address_book_cool_down: s.address_book_cool_down,
        evm_nonce_reaper_age: s.evm_nonce_reaper_age,
        ccip_stranded_age: s.ccip_stranded_age,
        drift: qtg_engine::drift::DriftSettings {
            pause: s.verify_drift_pause,
            concurrency: s.verify_drift_concurrency.max(1),
            timeout: s.verify_drift_timeout,
            alert_url: s.drift_alert_url.clone(),
        },
        balances: qtg_engine::balances::BalanceSettings {
            retention: s.balance_retention,
            stale: s.balance_stale,
            fetch_timeout: s.balance_fetch_timeout,
            history: s.workers.get("balance_history_rollup").is_some_and(|w| w.enabled),
            hourly_retention: s.balance_hourly_retention,
            daily_retention: s.balance_daily_retention,
        },
        notify: qtg_engine::notify::NotifySettings {
            max_attempts: s.notify_max_attempts,
            timeout: s.notify_timeout,
            unknown_grace: s.notify_unknown_grace,
            worker_stale: s.worker_stale,
            link_base: s.notify_link_base.clone(),
            retention: s.notify_retention,
            ..qtg_engine::notify::NotifySettings::new(s.notify_max_in_flight)
        },
        ingest: qtg_engine::ingest::IngestSettings {
            venues: s.cex_transfer_ingest_venues.clone(),
            lookback: s.cex_transfer_ingest_lookback,
            page: s.cex_transfer_ingest_page,
            overlap: s.cex_transfer_ingest_overlap,
            unexplained_grace: s.cex_transfer_unexplained_grace,
            alert_url: s.cex_transfer_alert_url.clone(),
        },
        capital: qtg_engine::capital::CapitalSettings {
            stale: s.capital_transfer_stale,
            default_callback_url: s.callback_default_url.clone(),
            approval_ttl: s.approval_ttl,
        },
        // Three health intervals.
        health_stale: 3 * s.worker("executor_health").map(|w| w.interval).unwrap_or(Duration::from_secs(60)),
        submit_window: s.submit_window,
        clock_skew: s.clock_skew,
        outbox_retention: s.outbox_retention,
    }
}

impl Process {
    pub fn engine(&self, actor: &str) -> Engine {
        Engine {
            pool: self.pool.clone(),
            registry: self.registry.clone(),
            settings: engine_settings(&self.settings),
            actor: actor.to_string(),
            shutdown: self.shutdown.clone(),
        }
    }

    /// The loops of `workers` (each `concurrency` times), their heartbeats seeded, wired to
    /// NOTIFY; a conditional worker whose flag is off is skipped. Returns the tasks by
    /// supervision group and the heartbeats (for readiness).
    pub async fn worker_tasks(&self, workers: &[&'static Worker], hub: &mut WakeHub) -> anyhow::Result<WorkerTasks> {
        let mut out = WorkerTasks::default();
        for &worker in workers {
            let Some(ws) = self.settings.worker(worker.name).filter(|ws| ws.enabled) else {
                let flag = worker.enabled_by.map(|f| f.key).unwrap_or_default();
                tracing::info!(worker = worker.name, flag, "worker disabled by its flag");
                continue;
            };
            if let Some(missing) = ws.missing {
                tracing::warn!(
                    worker = worker.name,
                    setting = missing,
                    "worker skipped: {missing} is not set, so it has nothing to do"
                );
                continue;
            }
            let hb = Heartbeat::seed(&self.pool, worker.name, &self.settings.network_class, &self.instance_id).await?;
            out.heartbeats.push(hb.clone());
            let engine = Arc::new(self.engine(&format!("worker:{}", worker.binary)));
            for i in 0..ws.concurrency {
                // The first loop polls at the seed's interval; the others are woken (NOTIFY, or
                // recruited by a loop that found work) and poll only as a long safety net.
                let secondary = i > 0;
                let interval =
                    ws.interval * if secondary { qtg_runtime::run_loop::SECONDARY_INTERVAL_FACTOR } else { 1 };
                let spec = LoopSpec {
                    name: worker.name.to_string(),
                    interval,
                    jitter: interval / 10,
                    wake: worker.wake.map(|c| hub.subscribe(c)),
                    secondary,
                };
                let (engine, in_flight) = (engine.clone(), engine.clone());
                let tick = worker.tick;
                let fut = run_loop(spec, self.shutdown.clone(), self.metrics.clone(), Some(hb.clone()), move || {
                    tick(engine.clone())
                });
                let task: Task = Box::pin(async move {
                    fut.await;
                    // Sends the loop started on tasks of their own (callbacks, notifications)
                    // record their outcome before the process goes.
                    in_flight.finish_in_flight().await;
                    in_flight.finish_notifications().await;
                    Ok(())
                });
                let group = match worker.group {
                    Group::Core => &mut out.core,
                    Group::Sidecar => &mut out.sidecars,
                };
                group.push((format!("{}#{i}", worker.name), task));
            }
        }
        Ok(out)
    }

    /// Starts the admin server and this process' heartbeat writer (its own period,
    /// `MG_HEARTBEAT_INTERVAL_SECONDS`; `/readyz` turns 503 once it has failed for
    /// `MG_WORKER_STALE_SECONDS`).
    pub async fn serve_admin(&self, heartbeats: Vec<Heartbeat>) -> anyhow::Result<()> {
        let heartbeats = Heartbeats::new(heartbeats);
        heartbeats.spawn(self.pool.clone(), self.settings.heartbeat_interval, self.shutdown.clone());
        qtg_runtime::admin::serve(
            self.settings.admin_addr,
            self.pool.clone(),
            self.session.clone(),
            self.metrics.clone(),
            heartbeats,
            self.settings.worker_stale,
            self.settings.grace_default.as_secs_f64(),
            self.shutdown.clone(),
        )
        .await?;
        Ok(())
    }

    /// Runs `core` and `sidecars` until SIGTERM (exit 0) or a core failure (error).
    /// After SIGTERM the items in hand get `MG_SHUTDOWN_GRACE_SECONDS` to finish; past that
    /// they are dropped (a submit cut off keeps its intent marker for recovery).
    pub async fn supervise(self, core: Vec<(String, Task)>, sidecars: Vec<(String, Task)>) -> anyhow::Result<()> {
        let grace = self.settings.shutdown_grace;
        let shutdown = self.shutdown.clone();
        let res = tokio::select! {
            res = run_groups(core, sidecars, self.shutdown.clone()) => res,
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::error!(grace_s = grace.as_secs_f64(), "shutdown grace exceeded; abandoning the items in hand");
                Err(anyhow::anyhow!("shutdown grace exceeded"))
            }
        };
        // Stopped on purpose: its heartbeats go (a stopped instance is not a stale one).
        if res.is_ok() {
            let forgotten = tokio::time::timeout(
                Duration::from_secs(5),
                qtg_store::heartbeats::forget_instance(&self.pool, &self.instance_id),
            )
            .await;
            if !matches!(forgotten, Ok(Ok(_))) {
                tracing::warn!(
                    instance = %self.instance_id,
                    "could not remove this instance's heartbeats; they will read as stale"
                );
            }
        }
        self.pool.close().await;
        tracing::info!(binary = self.binary, "stopped");
        res
    }
}

/// A process' worker loops by supervision group, and their heartbeats.
#[derive(Default)]
pub struct WorkerTasks {
    pub core: Vec<(String, Task)>,
    pub sidecars: Vec<(String, Task)>,
    pub heartbeats: Vec<Heartbeat>,
}

/// `main` of the worker binary `binary`: runs its workers of the table. A standalone worker
/// fails fast whatever its group (exits non-zero so its Deployment restarts it); sidecar
/// isolation is the all-in-one `qtg`'s.
pub async fn run_worker_binary(binary: &'static str) -> anyhow::Result<()> {
    let workers = workers::of_binary(binary);
    anyhow::ensure!(!workers.is_empty(), "{binary} runs no worker of the table");
    let process = boot(binary, false).await?;
    let mut hub = WakeHub::default();
    let tasks = process.worker_tasks(&workers, &mut hub).await?;
    process.serve_admin(tasks.heartbeats).await?;
    hub.spawn(process.pool.clone(), process.shutdown.clone());
    let mut all = tasks.core;
    all.extend(tasks.sidecars);
    if all.is_empty() {
        // Every worker of this binary is off by its flag: stay up (ready, no work) rather
        // than exit into a restart loop.
        tracing::warn!(binary, "every worker of this binary is disabled; idling until stopped");
        let shutdown = process.shutdown.clone();
        all.push((
            "idle".into(),
            Box::pin(async move {
                shutdown.cancelled().await;
                Ok(())
            }),
        ));
    }
    process.supervise(all, Vec::new()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One source of defaults: the engine an empty environment configures is exactly the one
    /// in-process code gets from `EngineSettings::default()`.
    #[test]
    fn an_empty_environment_gives_the_engines_defaults() {
        let vars = HashMap::from([("MG_DATABASE_URL".to_string(), "postgres://u@127.0.0.1:5432/db".to_string())]);
        let settings = Settings::from_vars(&vars, false, crate::workers::WORKERS).expect("settings");
        assert_eq!(format!("{:?}", engine_settings(&settings)), format!("{:?}", EngineSettings::default()));
    }
}
