//! The pipelines workers run: dispatch, observe, recover (each one `tick` returning the items
//! it processed), the advance/derive steps they share, execution-context building, and the
//! movement and template operations the API performs.

pub mod access;
pub mod advance;
pub mod balances;
pub mod callbacks;
pub mod calls;
pub mod capital;
pub mod context;
pub mod controls;
pub mod dispatch;
pub mod drift;
pub mod health;
mod hints;
pub mod ingest;
pub mod movements;
pub mod notify;
pub mod observe;
pub mod operator;
pub mod plans;
pub mod policy;
pub mod reaper;
pub mod recover;
pub mod sidecars;
pub mod templates;

use std::sync::Arc;
use std::time::Duration;

use qtg_core::Lane;
use qtg_executor::Registry;
use qtg_store::PgPool;

pub use qtg_store::StoreError;

/// The engine's error: what the database or the store refused, in one shape (the store's).
/// A compare-and-set miss is not an error (`qtg_store::Cas`); an executor's failure is the
/// node's, recorded on it, never this.
pub type EngineError = StoreError;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Recovery grace per lane: how long after `started_at` a SUBMITTING node (or an UNKNOWN from
/// a submit) is left alone before `recover()` (the venue may still be processing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaneGrace {
    pub ccip: Duration,
    pub stargate: Duration,
    pub cex: Duration,
    pub other: Duration,
}

impl Default for LaneGrace {
    fn default() -> Self {
        let seed = Duration::from_secs(90);
        LaneGrace { ccip: seed, stargate: seed, cex: seed, other: seed }
    }
}

impl LaneGrace {
    pub fn of(&self, lane: Lane) -> Duration {
        match lane {
            Lane::Ccip => self.ccip,
            Lane::Stargate => self.stargate,
            Lane::Cex => self.cex,
            Lane::Other => self.other,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Deadline of every executor and signer call (`MG_EXECUTOR_TIMEOUT_MS`).
    pub executor_timeout: Duration,
    /// `MG_OBSERVE_TIMEOUT_ENFORCEMENT_ENABLED`.
    pub observe_timeout_enforcement: bool,
    /// Nodes per observe tick (seed: 10).
    pub observe_batch: i64,
    /// Nodes per recovery tick, split over four lanes (`MG_NODE_RECOVERY_BATCH_SIZE`, 10).
    pub recovery_batch: i64,
    pub grace: LaneGrace,
    /// Before re-trying an observe/recover whose call failed.
    pub call_failure_backoff: Duration,
    pub callbacks: callbacks::CallbackSettings,
    /// Global risk limits (`MG_RISK_*`); each template's `risk_controls` can only tighten them.
    pub risk: qtg_core::risk::RiskLimits,
    /// How long a dispatch claim holds a node through preflight, prepare and sign
    /// (`MG_DISPATCH_LEASE_SECONDS`); an expired lease is re-claimable.
    pub lease: Duration,
    /// `submit_by = started_at + submit_window` (`MG_SUBMIT_WINDOW_SECONDS`).
    pub submit_window: Duration,
    /// Margin for clocks and the network (`MG_CLOCK_SKEW_MARGIN_SECONDS`): a submit starts
    /// only within `submit_window` minus it; recovery takes a SUBMITTING node only after
    /// `submit_by` plus it.
    pub clock_skew: Duration,
    /// What an approval needs of the movement's executors and signers
    /// (`MG_APPROVAL_HEALTH_GATE`).
    pub approval_health_gate: HealthGate,
    /// A health check older than this does not vouch for an approval (three health intervals).
    pub health_stale: Duration,
    /// Admins a new API key needs (`MG_API_KEY_CREATION_APPROVALS`, 1 or 2).
    pub key_creation_approvals: u32,
    /// Approvals by admins other than its proposer a new policy version needs.
    pub policy_change_approvals: u32,
    /// The least cool-down of an address-book entry.
    pub address_book_cool_down: Duration,
    /// How old an untouched EVM nonce reservation must be before the reaper reclaims it.
    pub evm_nonce_reaper_age: Duration,
    /// How long a CCIP send intent may stay unresolved before the stranded reaper ends it.
    pub ccip_stranded_age: Duration,
    pub drift: drift::DriftSettings,
    pub balances: balances::BalanceSettings,
    pub capital: capital::CapitalSettings,
    pub ingest: ingest::IngestSettings,
    pub notify: notify::NotifySettings,
    /// outbox_retention: how long promoted audit rows and acknowledged callbacks stay in their
    /// outboxes (`MG_OUTBOX_RETENTION_SECONDS`).
    pub outbox_retention: Duration,
}

/// The approval gate on bound executors' and signers' health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthGate {
    /// Fails closed: each must be `up`, checked within `health_stale`.
    Strict,
    /// Refuses only what is known to be `down`.
    DownOnly,
}

impl EngineSettings {
    /// How long an observe or recover claim holds its node: the call's deadline plus margin.
    pub fn call_lease(&self) -> Duration {
        self.executor_timeout + 2 * self.clock_skew + Duration::from_secs(1)
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            executor_timeout: Duration::from_secs(30),
            observe_timeout_enforcement: false,
            observe_batch: 10,
            recovery_batch: 10,
            grace: LaneGrace::default(),
            call_failure_backoff: Duration::from_secs(15),
            callbacks: callbacks::CallbackSettings {
                max_attempts: 5,
                timeout: Duration::from_secs(10),
                per_receiver: 2,
                ..Default::default()
            },
            risk: qtg_core::risk::RiskLimits::default(),
            // The binaries' defaults (services/common `engine_settings` of an empty environment
            // equals this, a test checks): lease 3 × the call deadline + 2 × the skew margin.
            lease: Duration::from_secs(100),
            submit_window: Duration::from_secs(40),
            clock_skew: Duration::from_secs(5),
            approval_health_gate: HealthGate::Strict,
            health_stale: Duration::from_secs(180),
            key_creation_approvals: 1,
            policy_change_approvals: 1,
            address_book_cool_down: Duration::ZERO,
            evm_nonce_reaper_age: Duration::from_secs(600),
            ccip_stranded_age: Duration::from_secs(7200),
            drift: drift::DriftSettings::default(),
            balances: balances::BalanceSettings::default(),
            capital: capital::CapitalSettings::default(),
            ingest: ingest::IngestSettings::default(),
            notify: notify::NotifySettings::default(),
            outbox_retention: Duration::from_secs(90 * 86_400),
        }
    }
}

/// What every pipeline needs: the database, the executors, the settings and who it is (for
/// the audit trail).
#[derive(Clone)]
pub struct Engine {
    pub pool: PgPool,
    pub registry: Arc<Registry>,
    pub settings: EngineSettings,
    pub actor: String,
    /// The process is stopping once this is cancelled: a dispatch tick then hands on no more
    /// successors (it finishes the node in hand, and the shutdown waits only for that).
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// The root span of one node step (`node.dispatch`, `node.observe`, `node.recover`): a new
/// trace per step, carrying the movement, node, executor and attempt.
pub(crate) fn step_span(step: &'static str, item: &qtg_store::WorkItem, attempt_no: i32) -> tracing::Span {
    tracing::info_span!(
        parent: None,
        "node.step",
        otel.name = %format_args!("node.{step}"),
        step,
        movement_id = %item.request_id,
        node_key = %item.node_key,
        executor_key = %item.executor_key,
        attempt_no,
    )
}

impl Engine {
    /// The executor keys this worker can call: it claims only nodes bound to one of them.
    pub fn served_keys(&self) -> Vec<String> {
        self.registry.executors().map(|e| e.key.clone()).collect()
    }

    /// An error while handling node `node_id` in step `method` (claiming it, recording its
    /// answer) that is not its executor's: the node gets an event and is held back for the
    /// call-failure backoff, and the worker goes on with its next item. Only when even that
    /// cannot be written is the error the worker's (the database is likely gone).
    pub(crate) async fn contain(&self, node_id: uuid::Uuid, method: &'static str, error: EngineError) -> Result<()> {
        let held = match self.pool.acquire().await {
            Ok(mut conn) => self.hold_back(&mut conn, node_id, method, &error).await,
            Err(e) => Err(e.into()),
        };
        match held {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::error!(%node_id, error = %e, "could not hold the node back either");
                Err(error)
            }
        }
    }

    /// [`Engine::contain`]'s hold-back, in `conn`'s transaction: the node event and the
    /// call-failure backoff. `Ok(false)`: the node is gone.
    pub(crate) async fn hold_back(
        &self,
        conn: &mut qtg_store::PgConnection,
        node_id: uuid::Uuid,
        method: &'static str,
        error: &EngineError,
    ) -> Result<bool> {
        tracing::error!(%node_id, step = method, error = %error, "could not handle this node; held back, going on");
        let detail = format!("qtg could not handle this node's {method} step: {error}");
        let event = qtg_store::events::Call::failed(method, "engine_error", qtg_core::codes::ENGINE_ERROR, &detail, 0);
        let backoff = self.settings.call_failure_backoff.as_secs_f64();
        qtg_store::claims::hold_back(conn, node_id, backoff, &event, &self.actor).await
    }
}
