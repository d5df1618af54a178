//! What every qtg binary does at start: read `MG_*` from the environment (the only place
//! that does), set up logs, connect and migrate, load the executor registry, and run worker
//! loops under supervision with heartbeats, NOTIFY wake-ups and the admin server.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use qtg_engine::{Engine, EngineSettings, LaneGrace};
use qtg_executor::{Registry, RegistryFile};
use qtg_runtime::heartbeat::Heartbeat;
use qtg_runtime::supervise::run_groups;
pub use qtg_runtime::supervise::Task;
pub use qtg_runtime::wake::WakeHub;
pub use qtg_runtime::WorkerKind;
use qtg_runtime::{logging, run_loop, CancellationToken, LoopSpec, Metrics, Settings, Tick};
use qtg_store::transition::{CHANNEL_CALLBACK, CHANNEL_DISPATCH, CHANNEL_OBSERVE, CHANNEL_RECOVER};
use qtg_store::PgPool;

/// A booted process: settings, database, executors, metrics and its shutdown token.
pub struct Process {
    pub binary: &'static str,
    pub settings: Settings,
    pub pool: PgPool,
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

/// Reads settings (printing them and exiting on `--print-config`), starts logging, connects,
/// migrates when `MG_MIGRATE` says so and loads the registry.
pub async fn boot(binary: &'static str, migrate_default: bool) -> anyhow::Result<Process> {
    let vars = env_vars();
    let settings = Settings::from_vars(&vars, migrate_default).context("invalid configuration")?;
    if std::env::args().any(|a| a == "--print-config") {
        println!("{settings:#?}");
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
        tracing::info!(endpoint = %o.endpoint, service_name = %o.service_name, "exporting traces over OTLP/gRPC");
    }
    tracing::info!(binary, settings = ?settings, "starting");
    // Executor latency, transitions, claim misses and callback outcomes reach /metrics.
    let metrics = Metrics::new();
    qtg_telemetry::install(metrics.clone());
    let limits = qtg_store::SessionLimits {
        lock_timeout: settings.db_lock_timeout,
        idle_in_transaction: settings.db_idle_in_transaction_timeout,
    };
    // `--migrate-only` (the Kubernetes migration Job): apply migrations and exit. Migrations
    // run on a connection of their own, without the workers' lock_timeout: a starter waits
    // for another one's migration (sqlx's advisory lock) instead of failing.
    let migrate_only = std::env::args().any(|a| a == "--migrate-only");
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
    let pool = qtg_store::connect_limited(&settings.database_url, settings.db_pool_size, Some(limits), binary)
        .await
        .context("cannot connect to the database")?;
    let session = qtg_store::session_settings(&pool).await.context("cannot read the session settings")?;
    tracing::info!(
        lock_timeout = %session.lock_timeout,
        idle_in_transaction_session_timeout = %session.idle_in_transaction_session_timeout,
        synchronous_commit = %session.synchronous_commit,
        "database session limits"
    );
    let registry = Arc::new(load_registry(&settings, &pool)?);
    let hostname =
        std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "host".into());
    let instance_id = format!("{hostname}-{}-{}", std::process::id(), &uuid_suffix());
    Ok(Process {
        binary,
        settings,
        pool,
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

fn load_registry(settings: &Settings, pool: &PgPool) -> anyhow::Result<Registry> {
    let Some(path) = &settings.executor_registry else {
        tracing::warn!("MG_EXECUTOR_REGISTRY is not set: no executors are registered");
        return Ok(Registry::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read MG_EXECUTOR_REGISTRY {}", path.display()))?;
    let file = RegistryFile::parse(&text).with_context(|| format!("in {}", path.display()))?;
    let registry =
        Registry::build(&file, &qtg_sim::SimFactory { venue: pool.clone() }, &|var| std::env::var(var).ok())?;
    tracing::info!(
        executors = ?file.executors.keys().collect::<Vec<_>>(),
        signers = ?file.signers.keys().collect::<Vec<_>>(),
        "executor registry loaded"
    );
    Ok(registry)
}

impl Process {
    pub fn engine(&self, actor: &str) -> Engine {
        let s = &self.settings;
        Engine {
            pool: self.pool.clone(),
            registry: self.registry.clone(),
            settings: EngineSettings {
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
                call_failure_backoff_seconds: 15.0,
                callbacks: qtg_engine::callbacks::CallbackSettings {
                    secret: s.callback_secret.clone().map(String::into_bytes),
                    max_attempts: s.callback_max_attempts,
                    timeout: s.callback_timeout,
                    allow_private: s.callback_allow_private,
                    allowed_hosts: s.callback_allowed_hosts.clone(),
                },
                risk: s.risk.clone(),
                lease_seconds: s.lease_seconds,
                submit_window_seconds: s.submit_window_seconds,
                clock_skew_seconds: s.clock_skew_seconds,
            },
            actor: actor.to_string(),
        }
    }

    /// The loops of `kinds` (`MG_<WORKER>_CONCURRENCY` each), their heartbeats seeded, wired
    /// to NOTIFY. Returns the tasks and the heartbeats (for readiness).
    pub async fn worker_tasks(
        &self,
        kinds: &[WorkerKind],
        hub: &mut WakeHub,
    ) -> anyhow::Result<(Vec<(String, Task)>, Vec<Heartbeat>)> {
        let mut tasks: Vec<(String, Task)> = Vec::new();
        let mut beats = Vec::new();
        for &kind in kinds {
            let hb = Heartbeat::seed(&self.pool, kind.name(), &self.settings.network_class, &self.instance_id).await?;
            beats.push(hb.clone());
            let engine = Arc::new(self.engine(&format!("worker:{}", kind.binary())));
            let channel = match kind {
                WorkerKind::Dispatcher => Some(CHANNEL_DISPATCH),
                WorkerKind::Observer => Some(CHANNEL_OBSERVE),
                WorkerKind::Recovery => Some(CHANNEL_RECOVER),
                WorkerKind::CallbackDispatcher => Some(CHANNEL_CALLBACK),
                _ => None,
            };
            for i in 0..self.settings.concurrency(kind) {
                // The first loop polls at the seed's interval; the others are woken (NOTIFY, or
                // recruited by a loop that found work) and poll only as a long safety net.
                let secondary = i > 0;
                let interval = self.settings.interval(kind)
                    * if secondary { qtg_runtime::run_loop::SECONDARY_INTERVAL_FACTOR } else { 1 };
                let spec = LoopSpec {
                    name: kind.name().to_string(),
                    interval,
                    jitter: interval / 10,
                    wake: channel.map(|c| hub.subscribe(c)),
                    secondary,
                };
                let engine = engine.clone();
                let fut = run_loop(spec, self.shutdown.clone(), self.metrics.clone(), Some(hb.clone()), move || {
                    let engine = engine.clone();
                    async move {
                        let processed = match kind {
                            WorkerKind::Dispatcher => engine.dispatch_tick().await?,
                            WorkerKind::Observer => engine.observe_tick().await?,
                            WorkerKind::Recovery => engine.recover_tick().await?,
                            WorkerKind::Expiration => engine.expire_movements_tick().await?,
                            WorkerKind::TemplateProposalExpiration => engine.expire_template_proposals_tick().await?,
                            WorkerKind::AuditPromoter => engine.promote_audit_tick().await?,
                            WorkerKind::CallbackDispatcher => engine.deliver_callbacks_tick().await?,
                            // Every executor each tick: report no work so the loop keeps its pace.
                            WorkerKind::ExecutorHealth => {
                                engine.refresh_health_tick().await?;
                                0
                            }
                        };
                        // Idle: wake when the next scheduled observation/recovery falls due.
                        let due_in = match (processed, kind) {
                            (0, WorkerKind::Observer) => engine.observe_due_in().await?,
                            (0, WorkerKind::Recovery) => engine.recovery_due_in().await?,
                            _ => None,
                        };
                        Ok(Tick { processed, due_in })
                    }
                });
                tasks.push((
                    format!("{}#{i}", kind.name()),
                    Box::pin(async move {
                        fut.await;
                        Ok(())
                    }),
                ));
            }
        }
        Ok((tasks, beats))
    }

    /// Starts the admin server.
    pub async fn serve_admin(&self, heartbeats: Vec<Heartbeat>) -> anyhow::Result<()> {
        let stale_after =
            self.settings.dispatch_interval.max(self.settings.observe_interval).max(self.settings.recovery_interval)
                * 3
                + std::time::Duration::from_secs(30);
        qtg_runtime::admin::serve(
            self.settings.admin_addr,
            self.pool.clone(),
            self.metrics.clone(),
            heartbeats,
            stale_after,
            self.settings.grace_default,
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
        self.pool.close().await;
        tracing::info!(binary = self.binary, "stopped");
        res
    }
}

/// `main` of a worker binary running `kinds`. A standalone worker fails fast (exits
/// non-zero so its Deployment restarts it); sidecar isolation is the all-in-one `qtg`'s.
pub async fn run_worker_binary(binary: &'static str, kinds: &[WorkerKind]) -> anyhow::Result<()> {
    let process = boot(binary, false).await?;
    let mut hub = WakeHub::default();
    let (tasks, beats) = process.worker_tasks(kinds, &mut hub).await?;
    process.serve_admin(beats).await?;
    hub.spawn(process.pool.clone(), process.shutdown.clone());
    process.supervise(tasks, Vec::new()).await
}
