//! Prometheus metrics every worker exports on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabel {
    pub worker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboxLabel {
    pub outbox: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabel {
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabel {
    pub method: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PickupLabel {
    pub pickup: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorLabel {
    pub executor_key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabel {
    pub scope: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureLabel {
    pub target: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VenueStatusLabel {
    pub venue: String,
    pub kind: String,
    pub code: String,
}

#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    db_synchronous: Gauge,
    db_session_weaker: Gauge,
    db_session_refused: Gauge,
    unknown_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    stale_submitting_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    manual_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    dlq_size: Gauge,
    outbox_backlog: Family<OutboxLabel, Gauge>,
    heartbeat_age: Family<WorkerLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    ready_age: Family<ExecutorLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    observing_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    drift_differences: Family<ScopeLabel, Gauge>,
    processed: Family<WorkerLabel, Counter>,
    tick_errors: Family<WorkerLabel, Counter>,
    consecutive_errors: Family<WorkerLabel, Gauge>,
    tick_seconds: Family<WorkerLabel, Histogram>,
    transitions: Family<TransitionLabel, Counter>,
    executor_calls: Family<CallLabel, Histogram>,
    claim_misses: Family<PickupLabel, Counter>,
    callback_deliveries: Family<OutcomeLabel, Counter>,
    notification_deliveries: Family<OutcomeLabel, Counter>,
    venue_unknown_status: Family<VenueStatusLabel, Counter>,
    deprecated_signatures: Family<SignatureLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("qtg");
        let processed = Family::<WorkerLabel, Counter>::default();
        let tick_errors = Family::<WorkerLabel, Counter>::default();
        let consecutive_errors = Family::<WorkerLabel, Gauge>::default();
        let tick_seconds = Family::<WorkerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
        });
        registry.register("worker_items_processed", "Items a worker's ticks processed", processed.clone());
        registry.register("worker_tick_errors", "Worker ticks that failed", tick_errors.clone());
        registry.register("worker_consecutive_errors", "Current run of failed ticks", consecutive_errors.clone());
        registry.register("worker_tick_duration_seconds", "Duration of one worker tick", tick_seconds.clone());
        let unknown_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let stale_submitting_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let manual_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let dlq_size = Gauge::default();
        let outbox_backlog = Family::<OutboxLabel, Gauge>::default();
        let heartbeat_age = Family::<WorkerLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "oldest_unknown_node_age_seconds",
            "Age of the oldest UNKNOWN node (since its submit)",
            unknown_age.clone(),
        );
        registry.register(
            "oldest_stale_submitting_node_age_seconds",
            "Age of the oldest SUBMITTING node past the recovery grace",
            stale_submitting_age.clone(),
        );
        registry.register(
            "oldest_manual_intervention_age_seconds",
            "Age of the oldest MANUAL_INTERVENTION / WAITING_MANUAL_ACTION movement",
            manual_age.clone(),
        );
        registry.register("callback_dlq_size", "Dead-lettered callbacks", dlq_size.clone());
        registry.register("outbox_backlog", "Rows waiting in an outbox", outbox_backlog.clone());
        registry.register(
            "worker_heartbeat_age_seconds",
            "Seconds since a worker's newest heartbeat",
            heartbeat_age.clone(),
        );
        let drift_differences = Family::<ScopeLabel, Gauge>::default();
        registry.register(
            "drift_differences",
            "Per drift scope (a chain, the signers), baseline facts the last verify_drift check found changed",
            drift_differences.clone(),
        );
        let ready_age = Family::<ExecutorLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let observing_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "oldest_ready_node_age_seconds",
            "Per executor key, how long the oldest READY node that may run has waited for a dispatcher",
            ready_age.clone(),
        );
        registry.register(
            "oldest_observing_node_age_seconds",
            "Age of the oldest OBSERVING node (since its submit)",
            observing_age.clone(),
        );
        let transitions = Family::<TransitionLabel, Counter>::default();
        let executor_calls = Family::<CallLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])
        });
        let claim_misses = Family::<PickupLabel, Counter>::default();
        let callback_deliveries = Family::<OutcomeLabel, Counter>::default();
        // Series exist from the start (at 0), so rate()/increase() see the first event.
        let notification_deliveries = Family::<OutcomeLabel, Counter>::default();
        for outcome in ["delivered", "retry", "dlq"] {
            let _ = callback_deliveries.get_or_create(&OutcomeLabel { outcome: outcome.into() });
            let _ = notification_deliveries.get_or_create(&OutcomeLabel { outcome: outcome.into() });
        }
        for pickup in ["dispatch", "observe", "recover"] {
            let _ = claim_misses.get_or_create(&PickupLabel { pickup: pickup.into() });
        }
        registry.register(
            "node_transitions",
            "Node state transitions written, by from and to state",
            transitions.clone(),
        );
        registry.register(
            "executor_call_duration_seconds",
            "Executor and signer call latency by method and outcome (ok, timeout, transport_error, \
             protocol_error, refused)",
            executor_calls.clone(),
        );
        registry.register(
            "claim_misses",
            "Candidates a worker found locked elsewhere or no longer matching, by pickup",
            claim_misses.clone(),
        );
        registry.register(
            "callback_deliveries",
            "Callback delivery attempts by outcome (delivered, retry, dlq)",
            callback_deliveries.clone(),
        );
        registry.register(
            "notification_deliveries",
            "Notification deliveries attempted by outcome (delivered, retry, dlq; a digest counts each it carried)",
            notification_deliveries.clone(),
        );
        let venue_unknown_status = Family::<VenueStatusLabel, Counter>::default();
        registry.register(
            "venue_unknown_status",
            "Venue status codes a lane's mapping does not know (runbook C5), by venue, kind and code",
            venue_unknown_status.clone(),
        );
        let deprecated_signatures = Family::<SignatureLabel, Counter>::default();
        registry.register(
            "deprecated_signature_calls",
            "Calls to executors and signers signed with a deprecated signature version (auth.signature \
             = \"v3\"), by operation",
            deprecated_signatures.clone(),
        );
        let db_synchronous = Gauge::default();
        let db_session_weaker = Gauge::default();
        let db_session_refused = Gauge::default();
        registry.register(
            "db_synchronous_replication",
            "1 when the newest database connection's commits are synchronously replicated (synchronous_commit on \
             or remote_apply with synchronous_standby_names set), else 0",
            db_synchronous.clone(),
        );
        registry.register(
            "db_session_limits_weaker",
            "1 when the newest database connection runs with lock_timeout, idle_in_transaction_session_timeout \
             or synchronous_commit missing or weaker than asked (MG_DB_SESSION_CHECK=warn let it through)",
            db_session_weaker.clone(),
        );
        registry.register(
            "db_session_refused",
            "1 when the newest database connection was refused (a standby, weaker limits, no synchronous \
             replication where MG_DB_REQUIRE_SYNC_REPLICATION asks it)",
            db_session_refused.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                db_synchronous,
                db_session_weaker,
                db_session_refused,
                venue_unknown_status,
                deprecated_signatures,
                transitions,
                executor_calls,
                claim_misses,
                callback_deliveries,
                notification_deliveries,
                processed,
                tick_errors,
                consecutive_errors,
                tick_seconds,
                unknown_age,
                stale_submitting_age,
                manual_age,
                dlq_size,
                outbox_backlog,
                heartbeat_age,
                ready_age,
                observing_age,
                drift_differences,
            }),
        }
    }

    fn label(worker: &str) -> WorkerLabel {
        WorkerLabel { worker: worker.to_string() }
    }

    pub fn processed(&self, worker: &str, n: usize) {
        self.inner.processed.get_or_create(&Self::label(worker)).inc_by(n as u64);
    }

    pub fn tick_error(&self, worker: &str) {
        self.inner.tick_errors.get_or_create(&Self::label(worker)).inc();
    }

    pub fn set_consecutive_errors(&self, worker: &str, n: u32) {
        self.inner.consecutive_errors.get_or_create(&Self::label(worker)).set(i64::from(n));
    }

    pub fn observe_tick(&self, worker: &str, d: Duration) {
        self.inner.tick_seconds.get_or_create(&Self::label(worker)).observe(d.as_secs_f64());
    }

    /// Records the database-wide paging signals (set at scrape time).
    pub fn set_signals(&self, s: &qtg_store::signals::Signals) {
        let i = &self.inner;
        i.unknown_age.set(s.oldest_unknown_node_age_seconds);
        i.stale_submitting_age.set(s.oldest_stale_submitting_node_age_seconds);
        i.manual_age.set(s.oldest_manual_intervention_age_seconds);
        i.dlq_size.set(s.callback_dlq_size);
        i.outbox_backlog.get_or_create(&OutboxLabel { outbox: "callback".into() }).set(s.callback_backlog);
        i.outbox_backlog.get_or_create(&OutboxLabel { outbox: "audit".into() }).set(s.audit_backlog);
        for (worker, age) in &s.heartbeat_age_seconds {
            i.heartbeat_age.get_or_create(&Self::label(worker)).set(*age);
        }
        // A key whose READY nodes were all taken reads 0, not its last age.
        i.ready_age.clear();
        for (key, age) in &s.ready_age_by_executor {
            i.ready_age.get_or_create(&ExecutorLabel { executor_key: key.clone() }).set(*age);
        }
        i.observing_age.set(s.oldest_observing_node_age_seconds);
        for (scope, n) in &s.drift_differences_by_scope {
            i.drift_differences.get_or_create(&ScopeLabel { scope: scope.clone() }).set(*n);
        }
    }

    /// The verdict on the newest database connection (`qtg_store::session::SessionGuard`).
    pub fn set_session(&self, s: &qtg_store::session::SessionState, limits: &qtg_store::SessionLimits) {
        let i = &self.inner;
        if let Some(r) = &s.report {
            i.db_synchronous.set(i64::from(r.synchronous()));
            i.db_session_weaker.set(i64::from(!r.weaker_than(limits).is_empty()));
        }
        i.db_session_refused.set(i64::from(s.refused.is_some()));
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry).expect("writing to a String");
        out
    }
}

/// The lower layers report through this (installed once per process at boot).
impl qtg_telemetry::Sink for Metrics {
    fn node_transition(&self, from: &str, to: &str) {
        self.inner.transitions.get_or_create(&TransitionLabel { from: from.into(), to: to.into() }).inc();
    }

    fn executor_call(&self, method: &str, outcome: &str, seconds: f64) {
        self.inner
            .executor_calls
            .get_or_create(&CallLabel { method: method.into(), outcome: outcome.into() })
            .observe(seconds);
    }

    fn claim_miss(&self, pickup: &str) {
        self.inner.claim_misses.get_or_create(&PickupLabel { pickup: pickup.into() }).inc();
    }

    fn callback_delivery(&self, outcome: &str) {
        self.inner.callback_deliveries.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc();
    }

    fn notification_delivery(&self, outcome: &str) {
        self.inner.notification_deliveries.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc();
    }

    fn venue_unknown_status(&self, venue: &str, kind: &str, code: i64) {
        let label = VenueStatusLabel { venue: venue.into(), kind: kind.into(), code: code.to_string() };
        self.inner.venue_unknown_status.get_or_create(&label).inc();
    }

    fn deprecated_signature(&self, target: &str, version: &str) {
        let label = SignatureLabel { target: target.into(), version: version.into() };
        self.inner.deprecated_signatures.get_or_create(&label).inc();
    }
}
