//! Typed settings, parsed once from a key → value source (the environment, handed in by
//! `services/`), validated, printable with secrets redacted.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The workers qtg runs (DESIGN.md §1); `name` is the seed's name and the heartbeat key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkerKind {
    Dispatcher,
    Observer,
    Recovery,
    Expiration,
    TemplateProposalExpiration,
    AuditPromoter,
    CallbackDispatcher,
    ExecutorHealth,
}

impl WorkerKind {
    pub const CORE: [WorkerKind; 3] = [WorkerKind::Dispatcher, WorkerKind::Observer, WorkerKind::Recovery];
    /// The sidecars built so far (callbacks and health join with their issue).
    pub const SIDECARS: [WorkerKind; 5] = [
        WorkerKind::CallbackDispatcher,
        WorkerKind::ExecutorHealth,
        WorkerKind::Expiration,
        WorkerKind::TemplateProposalExpiration,
        WorkerKind::AuditPromoter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkerKind::Dispatcher => "node_dispatcher",
            WorkerKind::Observer => "node_observer",
            WorkerKind::Recovery => "node_recovery",
            WorkerKind::Expiration => "expiration_checker",
            WorkerKind::TemplateProposalExpiration => "template_proposal_expiration",
            WorkerKind::AuditPromoter => "audit_outbox_promoter",
            WorkerKind::CallbackDispatcher => "callback_dispatcher",
            WorkerKind::ExecutorHealth => "executor_health",
        }
    }

    pub fn binary(self) -> &'static str {
        match self {
            WorkerKind::Dispatcher => "qtg-dispatcher",
            WorkerKind::Observer => "qtg-observer",
            WorkerKind::Recovery => "qtg-recovery",
            WorkerKind::Expiration | WorkerKind::TemplateProposalExpiration => "qtg-expiry",
            WorkerKind::AuditPromoter => "qtg-audit",
            WorkerKind::CallbackDispatcher => "qtg-callback",
            WorkerKind::ExecutorHealth => "qtg-health",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Clone)]
pub struct Settings {
    pub database_url: String,
    pub db_pool_size: u32,
    pub api_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub migrate: bool,
    pub network_class: String,
    pub executor_registry: Option<PathBuf>,
    pub log_format: LogFormat,
    pub dispatch_interval: Duration,
    pub observe_interval: Duration,
    pub recovery_interval: Duration,
    pub expiration_interval: Duration,
    pub template_proposal_expiration_interval: Duration,
    pub audit_promote_interval: Duration,
    pub callback_interval: Duration,
    pub health_interval: Duration,
    /// A heartbeat older than this is `stale` in `GET /v3/workers`.
    pub worker_stale_seconds: f64,
    /// Secret: never printed.
    pub callback_secret: Option<String>,
    pub callback_max_attempts: i32,
    pub callback_timeout: Duration,
    pub callback_allow_private: bool,
    pub callback_allowed_hosts: Vec<String>,
    pub dispatch_concurrency: usize,
    pub observe_concurrency: usize,
    pub recovery_concurrency: usize,
    pub recovery_batch: i64,
    pub observe_batch: i64,
    /// Default and per-lane overrides (`MG_RECOVERY_SUBMITTING_GRACE_SECONDS[_<LANE>]`).
    pub grace_default: f64,
    pub grace_ccip: Option<f64>,
    pub grace_stargate: Option<f64>,
    pub grace_cex: Option<f64>,
    pub grace_other: Option<f64>,
    pub executor_timeout: Duration,
    /// `MG_CLOCK_SKEW_MARGIN_SECONDS` (5): margin for clocks and the network around
    /// `submit_by`.
    pub clock_skew_seconds: f64,
    /// `MG_SUBMIT_WINDOW_SECONDS` (the executor deadline + 2 × skew): an armed attempt's
    /// `submit_by = started_at + submit_window`.
    pub submit_window_seconds: f64,
    /// `MG_DISPATCH_LEASE_SECONDS` (3 × the executor deadline + 2 × skew): how long a
    /// dispatch claim holds its node through preflight, prepare and sign.
    pub lease_seconds: f64,
    /// `MG_DB_LOCK_TIMEOUT_MS` (5000): `lock_timeout` of every connection.
    pub db_lock_timeout: Duration,
    /// `MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS` (half the lease, at most 60):
    /// `idle_in_transaction_session_timeout` of every connection; must be below the lease.
    pub db_idle_in_transaction_timeout: Duration,
    pub observe_timeout_enforcement: bool,
    pub approval_ttl_seconds: f64,
    pub template_proposal_ttl_seconds: f64,
    pub callback_default_url: Option<String>,
    /// Secret: never printed.
    pub bootstrap_admin_key: Option<String>,
    pub shutdown_grace: Duration,
    /// `MG_WORKERS_ENABLED` (the all-in-one `qtg`): run the workers, not only the API.
    pub workers_enabled: bool,
    /// Global risk limits (`MG_RISK_*`), combined with each template's, the stricter winning.
    pub risk: qtg_core::risk::RiskLimits,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: export traces over OTLP/gRPC when set.
    pub otlp_endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME` (else the binary's name).
    pub otel_service_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("setting {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

struct Source<'a>(&'a HashMap<String, String>);

impl Source<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
    }

    fn err(key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError { key: key.into(), reason: reason.into() }
    }

    fn parse<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, ConfigError>
    where
        T::Err: fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e| Self::err(key, format!("{v:?}: {e}"))),
        }
    }

    fn seconds(&self, key: &str, default: f64) -> Result<f64, ConfigError> {
        let v: f64 = self.parse(key, default)?;
        if !v.is_finite() || v < 0.0 {
            return Err(Self::err(key, "must be a number of seconds >= 0"));
        }
        Ok(v)
    }

    fn opt_seconds(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.get(key).map(|_| self.seconds(key, 0.0)).transpose()
    }

    fn interval(&self, key: &str, default: f64) -> Result<Duration, ConfigError> {
        Ok(Duration::from_secs_f64(self.seconds(key, default)?))
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("1" | "true" | "yes" | "on") => Ok(true),
            Some("0" | "false" | "no" | "off") => Ok(false),
            Some(v) => Err(Self::err(key, format!("{v:?} is not a boolean"))),
        }
    }

    fn count(&self, key: &str, default: usize, max: usize) -> Result<usize, ConfigError> {
        let v: usize = self.parse(key, default)?;
        if v == 0 || v > max {
            return Err(Self::err(key, format!("must be between 1 and {max}")));
        }
        Ok(v)
    }
}

/// `MG_RISK_HARD_CAP`, `MG_RISK_VELOCITY_AMOUNT` over `MG_RISK_VELOCITY_WINDOW_SECONDS`
/// (default 86400), `MG_RISK_DESTINATION_ALLOWLIST` (comma-separated),
/// `MG_RISK_APPROVALS_REQUIRED` from `MG_RISK_MULTI_APPROVAL_THRESHOLD`: read with the same
/// rules as a template's `risk_controls`.
fn risk_limits(s: &Source<'_>) -> Result<qtg_core::risk::RiskLimits, ConfigError> {
    let mut controls = serde_json::Map::new();
    let mut keys = Vec::new();
    if let Some(v) = s.get("MG_RISK_HARD_CAP") {
        controls.insert("hard_cap".into(), v.into());
        keys.push("MG_RISK_HARD_CAP");
    }
    if s.get("MG_RISK_VELOCITY_WINDOW_SECONDS").is_some() && s.get("MG_RISK_VELOCITY_AMOUNT").is_none() {
        return Err(Source::err("MG_RISK_VELOCITY_WINDOW_SECONDS", "needs MG_RISK_VELOCITY_AMOUNT"));
    }
    if let Some(v) = s.get("MG_RISK_VELOCITY_AMOUNT") {
        let window: i64 = s.parse("MG_RISK_VELOCITY_WINDOW_SECONDS", 86_400)?;
        controls.insert("velocity_limit".into(), serde_json::json!({"amount": v, "window_seconds": window}));
        keys.push("MG_RISK_VELOCITY_AMOUNT");
    }
    if let Some(v) = s.get("MG_RISK_DESTINATION_ALLOWLIST") {
        let list: Vec<&str> = v.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
        controls.insert("destination_allowlist".into(), list.into());
        keys.push("MG_RISK_DESTINATION_ALLOWLIST");
    }
    if s.get("MG_RISK_APPROVALS_REQUIRED").is_some() {
        let n: u64 = s.parse("MG_RISK_APPROVALS_REQUIRED", 1)?;
        controls.insert("approvals_required".into(), n.into());
        keys.push("MG_RISK_APPROVALS_REQUIRED");
    }
    if let Some(v) = s.get("MG_RISK_MULTI_APPROVAL_THRESHOLD") {
        controls.insert("multi_approval_threshold".into(), v.into());
        keys.push("MG_RISK_MULTI_APPROVAL_THRESHOLD");
    }
    qtg_core::risk::RiskLimits::from_plan(&serde_json::Value::Object(controls))
        .map_err(|reason| Source::err(&keys.join("/"), reason.replace("risk_controls.", "")))
}

impl Settings {
    /// Parses settings from `vars` (e.g. the process environment). `migrate_default` is the
    /// binary's own default for `MG_MIGRATE`.
    pub fn from_vars(vars: &HashMap<String, String>, migrate_default: bool) -> Result<Settings, ConfigError> {
        let s = Source(vars);
        let database_url = s
            .get("MG_DATABASE_URL")
            .or_else(|| s.get("DATABASE_URL"))
            .ok_or_else(|| Source::err("MG_DATABASE_URL", "is required (or DATABASE_URL)"))?
            .to_string();
        let log_format = match s.get("MG_LOG_FORMAT").unwrap_or("json") {
            "json" => LogFormat::Json,
            "pretty" => LogFormat::Pretty,
            other => return Err(Source::err("MG_LOG_FORMAT", format!("{other:?} is not json|pretty"))),
        };
        let network_class = s.get("MG_NETWORK_CLASS").unwrap_or("default").to_string();
        let callback_default_url = s.get("MG_CALLBACK_DEFAULT_URL").map(String::from);
        let settings = Settings {
            database_url,
            db_pool_size: s.count("MG_DB_POOL_SIZE", 8, 200)? as u32,
            api_addr: s.parse("MG_API_ADDR", "0.0.0.0:8080".parse().expect("literal"))?,
            admin_addr: s.parse("MG_ADMIN_ADDR", "0.0.0.0:9090".parse().expect("literal"))?,
            migrate: s.flag("MG_MIGRATE", migrate_default)?,
            network_class,
            executor_registry: s.get("MG_EXECUTOR_REGISTRY").map(PathBuf::from),
            log_format,
            dispatch_interval: s.interval("MG_NODE_DISPATCH_INTERVAL_SECONDS", 2.0)?,
            observe_interval: s.interval("MG_NODE_OBSERVE_INTERVAL_SECONDS", 5.0)?,
            recovery_interval: s.interval("MG_NODE_RECOVERY_INTERVAL_SECONDS", 60.0)?,
            expiration_interval: s.interval("MG_EXPIRATION_CHECK_INTERVAL_SECONDS", 30.0)?,
            template_proposal_expiration_interval: s
                .interval("MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", 30.0)?,
            audit_promote_interval: s.interval("MG_AUDIT_PROMOTE_INTERVAL_SECONDS", 1.0)?,
            callback_interval: s.interval("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", 3.0)?,
            health_interval: s.interval("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", 60.0)?,
            worker_stale_seconds: s.seconds("MG_WORKER_STALE_SECONDS", 180.0)?,
            callback_secret: s.get("MG_CALLBACK_SECRET").map(String::from),
            callback_max_attempts: s.count("MG_CALLBACK_MAX_ATTEMPTS", 5, 100)? as i32,
            callback_timeout: s.interval("MG_CALLBACK_TIMEOUT_SECONDS", 10.0)?,
            callback_allow_private: s.flag("MG_CALLBACK_ALLOW_PRIVATE", false)?,
            callback_allowed_hosts: s
                .get("MG_CALLBACK_ALLOWED_HOSTS")
                .map(|v| v.split(',').map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect())
                .unwrap_or_default(),
            dispatch_concurrency: s.count("MG_DISPATCHER_CONCURRENCY", 1, 64)?,
            observe_concurrency: s.count("MG_OBSERVER_CONCURRENCY", 1, 64)?,
            recovery_concurrency: s.count("MG_RECOVERY_CONCURRENCY", 1, 64)?,
            recovery_batch: s.count("MG_NODE_RECOVERY_BATCH_SIZE", 10, 1000)? as i64,
            observe_batch: s.count("MG_NODE_OBSERVE_BATCH_SIZE", 10, 1000)? as i64,
            grace_default: s.seconds("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", 90.0)?,
            grace_ccip: s.opt_seconds("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP")?,
            grace_stargate: s.opt_seconds("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_STARGATE")?,
            grace_cex: s.opt_seconds("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX")?,
            grace_other: s.opt_seconds("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_OTHER")?,
            executor_timeout: Duration::from_millis(s.parse("MG_EXECUTOR_TIMEOUT_MS", 30_000u64)?.max(1)),
            // Set (and checked) by fence_times below.
            clock_skew_seconds: 0.0,
            submit_window_seconds: 0.0,
            lease_seconds: 0.0,
            db_lock_timeout: Duration::from_millis(s.parse("MG_DB_LOCK_TIMEOUT_MS", 5_000u64)?.max(1)),
            db_idle_in_transaction_timeout: Duration::ZERO,
            observe_timeout_enforcement: s.flag("MG_OBSERVE_TIMEOUT_ENFORCEMENT_ENABLED", false)?,
            approval_ttl_seconds: s.seconds("MG_APPROVAL_TTL_SECONDS", 300.0)?,
            template_proposal_ttl_seconds: s.seconds("MG_TEMPLATE_PROPOSAL_TTL_SECONDS", 7.0 * 86400.0)?,
            callback_default_url,
            bootstrap_admin_key: s.get("MG_API_BOOTSTRAP_ADMIN_KEY").map(String::from),
            shutdown_grace: s.interval("MG_SHUTDOWN_GRACE_SECONDS", 30.0)?,
            workers_enabled: s.flag("MG_WORKERS_ENABLED", true)?,
            risk: risk_limits(&s)?,
            otlp_endpoint: s.get("OTEL_EXPORTER_OTLP_ENDPOINT").map(String::from),
            otel_service_name: s.get("OTEL_SERVICE_NAME").map(String::from),
        };
        let mut settings = settings;
        settings.fence_times(&s)?;
        if let Some(k) = &settings.bootstrap_admin_key {
            if k.len() < 16 {
                return Err(Source::err("MG_API_BOOTSTRAP_ADMIN_KEY", "must be at least 16 characters"));
            }
        }
        Ok(settings)
    }

    /// The lease, the submit window and the skew margin, which must nest (DESIGN.md §2.2):
    /// every grace > submit window + skew; submit window > the largest submit deadline
    /// (`MG_EXECUTOR_TIMEOUT_MS`, which also caps every remote entry's `timeout_ms`) + skew;
    /// lease > preflight + prepare + sign deadlines + skew; idle-in-transaction timeout <
    /// lease. A binary refuses to start otherwise, naming the numbers.
    fn fence_times(&mut self, s: &Source<'_>) -> Result<(), ConfigError> {
        let deadline = self.executor_timeout.as_secs_f64();
        let skew = s.seconds("MG_CLOCK_SKEW_MARGIN_SECONDS", 5.0)?;
        let window = s.seconds("MG_SUBMIT_WINDOW_SECONDS", deadline + 2.0 * skew)?;
        let lease = s.seconds("MG_DISPATCH_LEASE_SECONDS", 3.0 * deadline + 2.0 * skew)?;
        let idle = s.seconds("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", (lease / 2.0).min(60.0))?;
        if window <= deadline + skew {
            return Err(Source::err(
                "MG_SUBMIT_WINDOW_SECONDS",
                format!(
                    "the submit window ({window} s) must be above the largest submit deadline \
                     (MG_EXECUTOR_TIMEOUT_MS = {deadline} s) + the clock-skew margin ({skew} s)"
                ),
            ));
        }
        let graces = [
            ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", Some(self.grace_default)),
            ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP", self.grace_ccip),
            ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_STARGATE", self.grace_stargate),
            ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX", self.grace_cex),
            ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_OTHER", self.grace_other),
        ];
        for (key, grace) in graces {
            if let Some(grace) = grace.filter(|g| *g <= window + skew) {
                return Err(Source::err(
                    key,
                    format!(
                        "the recovery grace ({grace} s) must be above the submit window ({window} s) + the \
                         clock-skew margin ({skew} s): recovery may not decide an attempt that can still start"
                    ),
                ));
            }
        }
        if lease <= 3.0 * deadline + skew {
            return Err(Source::err(
                "MG_DISPATCH_LEASE_SECONDS",
                format!(
                    "the lease ({lease} s) must be above preflight + prepare + sign deadlines \
                     (3 × {deadline} s) + the clock-skew margin ({skew} s)"
                ),
            ));
        }
        if idle <= 0.0 || idle >= lease {
            return Err(Source::err(
                "MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
                format!("must be above 0 and below the lease ({lease} s), got {idle} s"),
            ));
        }
        self.clock_skew_seconds = skew;
        self.submit_window_seconds = window;
        self.lease_seconds = lease;
        self.db_idle_in_transaction_timeout = Duration::from_secs_f64(idle);
        Ok(())
    }

    pub fn interval(&self, kind: WorkerKind) -> Duration {
        match kind {
            WorkerKind::Dispatcher => self.dispatch_interval,
            WorkerKind::Observer => self.observe_interval,
            WorkerKind::Recovery => self.recovery_interval,
            WorkerKind::Expiration => self.expiration_interval,
            WorkerKind::TemplateProposalExpiration => self.template_proposal_expiration_interval,
            WorkerKind::AuditPromoter => self.audit_promote_interval,
            WorkerKind::CallbackDispatcher => self.callback_interval,
            WorkerKind::ExecutorHealth => self.health_interval,
        }
    }

    /// Claim loops per process (`MG_<WORKER>_CONCURRENCY`; sidecars run one).
    pub fn concurrency(&self, kind: WorkerKind) -> usize {
        match kind {
            WorkerKind::Dispatcher => self.dispatch_concurrency,
            WorkerKind::Observer => self.observe_concurrency,
            WorkerKind::Recovery => self.recovery_concurrency,
            _ => 1,
        }
    }
}

fn redact_url(url: &str) -> String {
    // postgres://user:password@host/db → postgres://user:***@host/db
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &creds[..colon], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("database_url", &redact_url(&self.database_url))
            .field("db_pool_size", &self.db_pool_size)
            .field("api_addr", &self.api_addr)
            .field("admin_addr", &self.admin_addr)
            .field("migrate", &self.migrate)
            .field("network_class", &self.network_class)
            .field("executor_registry", &self.executor_registry)
            .field("log_format", &self.log_format)
            .field("dispatch_interval", &self.dispatch_interval)
            .field("observe_interval", &self.observe_interval)
            .field("recovery_interval", &self.recovery_interval)
            .field("concurrency", &(self.dispatch_concurrency, self.observe_concurrency, self.recovery_concurrency))
            .field("recovery_batch", &self.recovery_batch)
            .field("grace_default", &self.grace_default)
            .field("executor_timeout", &self.executor_timeout)
            .field("clock_skew_seconds", &self.clock_skew_seconds)
            .field("submit_window_seconds", &self.submit_window_seconds)
            .field("lease_seconds", &self.lease_seconds)
            .field("db_lock_timeout", &self.db_lock_timeout)
            .field("db_idle_in_transaction_timeout", &self.db_idle_in_transaction_timeout)
            .field("observe_timeout_enforcement", &self.observe_timeout_enforcement)
            .field("approval_ttl_seconds", &self.approval_ttl_seconds)
            .field("callback_default_url", &self.callback_default_url)
            .field("callback_secret", &self.callback_secret.as_ref().map(|_| "***"))
            .field("callback_max_attempts", &self.callback_max_attempts)
            .field("callback_allow_private", &self.callback_allow_private)
            .field("callback_allowed_hosts", &self.callback_allowed_hosts)
            .field("bootstrap_admin_key", &self.bootstrap_admin_key.as_ref().map(|_| "***"))
            .field("risk", &self.risk)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_follow_the_seed() {
        let s = Settings::from_vars(
            &vars(&[("DATABASE_URL", "postgres://u:pa55-w0rd@h/db"), ("MG_CALLBACK_SECRET", "whsec-do-not-print")]),
            false,
        )
        .unwrap();
        assert_eq!(s.dispatch_interval, Duration::from_secs(2));
        assert_eq!(s.observe_interval, Duration::from_secs(5));
        assert_eq!(s.recovery_interval, Duration::from_secs(60));
        assert_eq!(s.recovery_batch, 10);
        assert_eq!(s.grace_default, 90.0);
        assert!(!s.observe_timeout_enforcement);
        assert_eq!(s.approval_ttl_seconds, 300.0);
        let printed = format!("{s:?}");
        assert!(!printed.contains("pa55-w0rd") && !printed.contains("whsec-do-not-print"), "{printed}");
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let base = [("MG_DATABASE_URL", "postgres://h/db")];
        let e = Settings::from_vars(&vars(&[base[0], ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "-1")]), false).unwrap_err();
        assert_eq!(e.key, "MG_NODE_DISPATCH_INTERVAL_SECONDS");
        let e = Settings::from_vars(&vars(&[base[0], ("MG_MIGRATE", "maybe")]), false).unwrap_err();
        assert_eq!(e.key, "MG_MIGRATE");
        let e = Settings::from_vars(&vars(&[base[0], ("MG_DISPATCHER_CONCURRENCY", "0")]), false).unwrap_err();
        assert_eq!(e.key, "MG_DISPATCHER_CONCURRENCY");
        assert!(Settings::from_vars(&vars(&[]), false).is_err());
        let s = Settings::from_vars(&vars(&[base[0], ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.25")]), true).unwrap();
        assert_eq!(s.observe_interval, Duration::from_millis(250));
        assert!(s.migrate);
        let e = Settings::from_vars(&vars(&[base[0], ("MG_RISK_HARD_CAP", "-5")]), false).unwrap_err();
        assert_eq!(e.key, "MG_RISK_HARD_CAP");
        let s = Settings::from_vars(
            &vars(&[base[0], ("MG_RISK_HARD_CAP", "1000"), ("MG_RISK_DESTINATION_ALLOWLIST", "a, b")]),
            false,
        )
        .unwrap();
        assert_eq!(s.risk.hard_cap.as_ref().map(|c| c.to_string()).as_deref(), Some("1000"));
        assert_eq!(s.risk.destination_allowlist, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(s.risk.approvals_needed(&qtg_core::risk::Amount::parse("5").unwrap()), 1);
        let e = Settings::from_vars(&vars(&[base[0], ("MG_RISK_VELOCITY_WINDOW_SECONDS", "60")]), false).unwrap_err();
        assert_eq!(e.key, "MG_RISK_VELOCITY_WINDOW_SECONDS");
    }

    #[test]
    fn lease_window_and_grace_must_nest() {
        let base = ("MG_DATABASE_URL", "postgres://h/db");
        let s = Settings::from_vars(&vars(&[base]), false).unwrap();
        assert_eq!((s.clock_skew_seconds, s.submit_window_seconds, s.lease_seconds), (5.0, 40.0, 100.0));
        assert_eq!(s.db_idle_in_transaction_timeout, Duration::from_secs(50));
        // A grace recovery could reach while the attempt may still start: refused, with numbers.
        let e =
            Settings::from_vars(&vars(&[base, ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX", "30")]), false).unwrap_err();
        assert_eq!(e.key, "MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX");
        assert!(e.reason.contains("30 s") && e.reason.contains("40 s") && e.reason.contains("5 s"), "{e}");
        let e = Settings::from_vars(&vars(&[base, ("MG_SUBMIT_WINDOW_SECONDS", "31")]), false).unwrap_err();
        assert_eq!(e.key, "MG_SUBMIT_WINDOW_SECONDS");
        let e = Settings::from_vars(&vars(&[base, ("MG_DISPATCH_LEASE_SECONDS", "60")]), false).unwrap_err();
        assert_eq!(e.key, "MG_DISPATCH_LEASE_SECONDS");
        let e = Settings::from_vars(&vars(&[base, ("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "100")]), false)
            .unwrap_err();
        assert_eq!(e.key, "MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS");
        // Short deadlines let short graces nest (the tests' settings).
        let s = Settings::from_vars(
            &vars(&[
                base,
                ("MG_EXECUTOR_TIMEOUT_MS", "1500"),
                ("MG_CLOCK_SKEW_MARGIN_SECONDS", "0.2"),
                ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "3"),
            ]),
            false,
        )
        .unwrap();
        assert!((s.submit_window_seconds - 1.9).abs() < 1e-9 && (s.lease_seconds - 4.9).abs() < 1e-9);
    }
}
