//! Typed settings, parsed once from a key → value source (the environment, handed in by
//! `services/`), validated, printable with secrets redacted.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::workers::{Worker, WorkerSettings, MAX_CONCURRENCY};

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
    /// Each worker of the table handed to [`Settings::from_vars`], by its seed name.
    pub workers: BTreeMap<&'static str, WorkerSettings>,
    /// `MG_HEARTBEAT_INTERVAL_SECONDS` (10): how often a process writes its heartbeat rows,
    /// on a task of its own (not a worker's loop).
    pub heartbeat_interval: Duration,
    /// `MG_WORKER_STALE_SECONDS` (3 heartbeat intervals): a heartbeat older than this is
    /// `stale` in `GET /v3/workers`, and `/readyz` answers 503.
    pub worker_stale: Duration,
    /// Secret: never printed.
    pub callback_secret: Option<String>,
    /// `MG_CALLBACK_SIGNATURE` (`v3`): how callbacks are signed when their movement does not
    /// say — `v3` or `standard_webhooks`.
    pub callback_signature: qtg_wire_auth::standard::Scheme,
    /// `MG_CALLBACK_WEBHOOK_SECRETS`: the Standard Webhooks secrets (`whsec_…`, comma- or
    /// space-separated, every one signs: a rotation). Secret: never printed.
    pub callback_webhook_secrets: Vec<qtg_wire_auth::standard::WebhookSecret>,
    pub callback_max_attempts: i32,
    pub callback_timeout: Duration,
    pub callback_allow_private: bool,
    pub callback_allowed_hosts: Vec<String>,
    /// `MG_CALLBACK_MAX_IN_FLIGHT` (16): sends in flight at once per process.
    pub callback_max_in_flight: u32,
    /// `MG_CALLBACK_MAX_IN_FLIGHT_PER_RECEIVER` (2): rows of one receiver host in flight at
    /// once across every replica, so one slow receiver cannot hold the others' callbacks.
    pub callback_per_receiver: i64,
    pub recovery_batch: i64,
    pub observe_batch: i64,
    /// Default and per-lane overrides (`MG_RECOVERY_SUBMITTING_GRACE_SECONDS[_<LANE>]`).
    pub grace_default: Duration,
    pub grace_ccip: Option<Duration>,
    pub grace_stargate: Option<Duration>,
    pub grace_cex: Option<Duration>,
    pub grace_other: Option<Duration>,
    pub executor_timeout: Duration,
    /// `MG_CLOCK_SKEW_MARGIN_SECONDS` (5): margin for clocks and the network around
    /// `submit_by`.
    pub clock_skew: Duration,
    /// `MG_SUBMIT_WINDOW_SECONDS` (the executor deadline + 2 × skew): an armed attempt's
    /// `submit_by = started_at + submit_window`.
    pub submit_window: Duration,
    /// `MG_DISPATCH_LEASE_SECONDS` (3 × the executor deadline + 2 × skew): how long a
    /// dispatch claim holds its node through preflight, prepare and sign.
    pub lease: Duration,
    /// `MG_DB_LOCK_TIMEOUT_MS` (5000): `lock_timeout` of every connection.
    pub db_lock_timeout: Duration,
    /// `MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS` (half the lease, at most 60):
    /// `idle_in_transaction_session_timeout` of every connection; must be below the lease.
    pub db_idle_in_transaction_timeout: Duration,
    /// `MG_DB_SESSION_CHECK` (`refuse`): a connection whose session limits the server reports
    /// missing or weaker than asked (a pooler that drops the startup options, a role default)
    /// is refused; `warn` accepts it and logs an error-level warning.
    pub db_refuse_weaker_session: bool,
    /// `MG_DB_REQUIRE_SYNC_REPLICATION` (false): the workers that make effects (dispatcher,
    /// recovery, reaper) refuse a connection whose commits are not synchronously replicated;
    /// otherwise every process warns.
    pub db_require_sync_replication: bool,
    pub observe_timeout_enforcement: bool,
    pub approval_ttl: Duration,
    pub template_proposal_ttl: Duration,
    pub callback_default_url: Option<String>,
    /// Secret: never printed.
    pub bootstrap_admin_key: Option<String>,
    /// `MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS`: the bootstrap key stops working this long after
    /// it was first registered (unset: it works until revoked).
    pub bootstrap_admin_key_ttl: Option<Duration>,
    pub shutdown_grace: Duration,
    /// `MG_WORKERS_ENABLED` (the all-in-one `qtg`): run the workers, not only the API.
    pub workers_enabled: bool,
    /// `MG_APPROVAL_HEALTH_GATE` (`strict`): `strict` refuses an approval unless every bound
    /// executor and signer is up and checked within three health intervals; `down-only`
    /// refuses only those known to be down.
    pub approval_health_gate_strict: bool,
    /// `MG_API_KEY_CREATION_APPROVALS` (1): 2 makes a new API key a request a second admin
    /// approves.
    pub key_creation_approvals: u32,
    /// `MG_POLICY_CHANGE_APPROVALS` (1): approvals by admins other than its proposer a new
    /// approval-policy version needs (1-5; the proposer never counts).
    pub policy_change_approvals: u32,
    /// `MG_ADDRESS_BOOK_COOL_DOWN_SECONDS` (0): the least time between an address-book entry's
    /// activation and its first use (an entry may ask for longer).
    pub address_book_cool_down: Duration,
    /// `MG_EVM_NONCE_REAPER_AGE_SECONDS` (600): how old an untouched EVM nonce reservation
    /// must be before the reaper may reclaim it.
    pub evm_nonce_reaper_age: Duration,
    /// `MG_CCIP_STRANDED_REAPER_AGE_SECONDS` (7200): how long a CCIP send intent may stay
    /// unresolved (never broadcast, or its message never executed) before the stranded reaper
    /// ends it.
    pub ccip_stranded_age: Duration,
    /// verify_drift: `MG_VERIFY_DRIFT_PAUSE` (false) pauses the executors of a drifted scope
    /// through the kill switch; `MG_VERIFY_DRIFT_CONCURRENCY` (4) executors read at once;
    /// `MG_VERIFY_DRIFT_TIMEOUT_SECONDS` (30) per executor; `MG_DRIFT_ALERT_URL` (else
    /// `MG_CALLBACK_DEFAULT_URL`) receives the `drift_detected` callback.
    pub verify_drift_pause: bool,
    pub verify_drift_concurrency: usize,
    pub verify_drift_timeout: Duration,
    pub drift_alert_url: Option<String>,
    /// balance_snapshot and `GET /v3/balances`: `MG_BALANCE_SNAPSHOT_RETENTION_SECONDS`
    /// (604800), `MG_BALANCE_STALE_THRESHOLD_SECONDS` (120), `MG_BALANCE_FETCH_TIMEOUT_SECONDS`
    /// (10, one fetcher's read, `fresh=true`'s included), `MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS`
    /// (5, per caller between `fresh=true` reads).
    pub balance_retention: Duration,
    pub balance_stale: Duration,
    pub balance_fetch_timeout: Duration,
    /// balance_history_rollup: `MG_BALANCE_HISTORY_HOURLY_RETENTION_SECONDS` (90 days) and
    /// `MG_BALANCE_HISTORY_DAILY_RETENTION_SECONDS` (1825 days) of hourly and daily rollups.
    pub balance_hourly_retention: Duration,
    /// notification_dispatcher: `MG_NOTIFY_MAX_ATTEMPTS` (20), `MG_NOTIFY_TIMEOUT_SECONDS` (10),
    /// `MG_NOTIFY_UNKNOWN_GRACE_SECONDS` (300), `MG_NOTIFY_MAX_IN_FLIGHT` (8) and
    /// `MG_NOTIFY_LINK_BASE_URL` (the console's base URL for links in messages).
    pub notify_max_attempts: i32,
    pub notify_timeout: Duration,
    pub notify_unknown_grace: Duration,
    pub notify_max_in_flight: u32,
    pub notify_link_base: Option<String>,
    /// `MG_NOTIFY_RETENTION_SECONDS` (30 days): finished notifications kept.
    pub notify_retention: Duration,
    /// outbox_retention: `MG_OUTBOX_RETENTION_SECONDS` (90 days): promoted audit rows and
    /// acknowledged callbacks kept in their outboxes.
    pub outbox_retention: Duration,
    pub balance_daily_retention: Duration,
    pub balance_fresh_min_interval: Duration,
    /// capital_transfer_followup: `MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS` (300).
    pub capital_transfer_stale: Duration,
    /// cex_transfer_ingest: `MG_CEX_TRANSFER_INGEST_VENUES_CSV` (the `[balances.*]` entries
    /// to ingest; non-empty enables the worker), `MG_CEX_TRANSFER_INGEST_LOOKBACK_SECONDS`
    /// (86400, a venue's first read), `MG_CEX_TRANSFER_INGEST_PAGE_SECONDS` (3600, one history
    /// read's window), `MG_CEX_TRANSFER_INGEST_OVERLAP_SECONDS` (600, re-read behind the
    /// cursor), `MG_CEX_TRANSFER_UNEXPLAINED_GRACE_SECONDS` (900, before an unexplained
    /// withdrawal is alerted), `MG_CEX_TRANSFER_ALERT_URL` (else `MG_CALLBACK_DEFAULT_URL`).
    pub cex_transfer_ingest_venues: Vec<String>,
    pub cex_transfer_ingest_lookback: Duration,
    pub cex_transfer_ingest_page: Duration,
    pub cex_transfer_ingest_overlap: Duration,
    pub cex_transfer_unexplained_grace: Duration,
    pub cex_transfer_alert_url: Option<String>,
    /// `MG_STRICT_SETTINGS` (false): an `MG_*` variable no part of the process reads is fatal
    /// at start instead of a warning.
    pub strict_settings: bool,
    /// Global risk limits (`MG_RISK_*`), combined with each template's, the stricter winning.
    pub risk: qtg_core::risk::RiskLimits,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: export traces over OTLP/gRPC when set.
    pub otlp_endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME` (else the binary's name).
    pub otel_service_name: Option<String>,
    /// Every setting read and its effective value (defaults included, secrets as `***`), by
    /// key: what `--print-config` prints and the start-up log shows.
    pub effective: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("setting {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

/// The key → value source, recording every setting read with its effective value.
struct Source<'a> {
    vars: &'a HashMap<String, String>,
    seen: RefCell<BTreeMap<String, String>>,
}

/// How an unset optional setting is printed.
const UNSET: &str = "(unset)";

impl Source<'_> {
    /// The raw value (trimmed; empty = unset). Not recorded: typed readers record.
    fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
    }

    fn note(&self, key: &str, value: impl fmt::Display) {
        self.seen.borrow_mut().insert(key.to_string(), value.to_string());
    }

    fn err(key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError { key: key.into(), reason: reason.into() }
    }

    /// An optional free-form value (recorded as given).
    fn text(&self, key: &str) -> Option<String> {
        let v = self.get(key).map(String::from);
        self.note(key, v.as_deref().unwrap_or(UNSET));
        v
    }

    /// An optional http(s) URL, recorded with its secrets masked (`qtg_core::urls::redact`).
    /// Credentials in the userinfo over plain `http://` are refused, as a bearer over plain
    /// http is: they would cross the network in the clear.
    fn url(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let Some(v) = self.get(key).map(String::from) else {
            self.note(key, UNSET);
            return Ok(None);
        };
        let shown = qtg_core::urls::redact(&v);
        self.note(key, &shown);
        let parts = qtg_core::urls::Parts::of(&v)
            .filter(|p| matches!(p.scheme, "http" | "https") && !p.host().is_empty())
            .ok_or_else(|| Self::err(key, format!("{shown:?} is not an http(s) URL")))?;
        if parts.userinfo.is_some() && parts.scheme == "http" {
            return Err(Self::err(key, format!("{shown:?} carries credentials over plain http: use https")));
        }
        Ok(Some(v))
    }

    /// A secret: recorded only as set or not.
    fn secret(&self, key: &str) -> Option<String> {
        let v = self.get(key).map(String::from);
        self.note(key, if v.is_some() { "***" } else { UNSET });
        v
    }

    fn parse<T: std::str::FromStr + fmt::Display>(&self, key: &str, default: T) -> Result<T, ConfigError>
    where
        T::Err: fmt::Display,
    {
        let v = match self.get(key) {
            None => default,
            Some(v) => v.parse().map_err(|e| Self::err(key, format!("{v:?}: {e}")))?,
        };
        self.note(key, &v);
        Ok(v)
    }

    fn seconds(&self, key: &str, default: f64) -> Result<f64, ConfigError> {
        let v: f64 = self.parse(key, default)?;
        if !v.is_finite() || v < 0.0 {
            return Err(Self::err(key, "must be a number of seconds >= 0"));
        }
        Ok(v)
    }

    /// A number of seconds (recorded as given) as a `Duration`; one past `Duration::MAX`
    /// saturates there.
    fn interval(&self, key: &str, default: f64) -> Result<Duration, ConfigError> {
        Ok(Duration::try_from_secs_f64(self.seconds(key, default)?).unwrap_or(Duration::MAX))
    }

    fn opt_interval(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        let v = self.get(key).map(|_| self.interval(key, 0.0)).transpose()?;
        if v.is_none() {
            self.note(key, UNSET);
        }
        Ok(v)
    }

    fn millis(&self, key: &str, default: u64) -> Result<Duration, ConfigError> {
        Ok(Duration::from_millis(self.parse(key, default)?.max(1)))
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        let v = match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None => default,
            Some("1" | "true" | "yes" | "on") => true,
            Some("0" | "false" | "no" | "off") => false,
            Some(v) => return Err(Self::err(key, format!("{v:?} is not a boolean"))),
        };
        self.note(key, v);
        Ok(v)
    }

    fn count(&self, key: &str, default: usize, max: usize) -> Result<usize, ConfigError> {
        let v: usize = self.parse(key, default)?;
        if v == 0 || v > max {
            return Err(Self::err(key, format!("must be between 1 and {max}")));
        }
        Ok(v)
    }

    fn list(&self, key: &str) -> Vec<String> {
        let v: Vec<String> = self
            .get(key)
            .map(|v| v.split(',').map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect())
            .unwrap_or_default();
        self.note(key, if v.is_empty() { UNSET.to_string() } else { v.join(",") });
        v
    }

    fn worker<T>(&self, w: &Worker<T>) -> Result<WorkerSettings, ConfigError> {
        Ok(WorkerSettings {
            interval: self.interval(w.interval_key, w.default_interval.as_secs_f64())?,
            concurrency: match w.concurrency_key {
                Some(key) => self.count(key, 1, MAX_CONCURRENCY)?,
                None => 1,
            },
            enabled: match w.enabled_by {
                Some(flag) if flag.list => !self.list(flag.key).is_empty(),
                Some(flag) => self.flag(flag.key, flag.default)?,
                None => true,
            },
            // Recorded as set or not: it may hold RPC URLs with credentials.
            missing: w.requires.filter(|key| self.secret(key).is_none_or(|v| v.trim().is_empty())),
        })
    }
}

/// `MG_RISK_HARD_CAP`, `MG_RISK_VELOCITY_AMOUNT` over `MG_RISK_VELOCITY_WINDOW_SECONDS`
/// (default 86400), `MG_RISK_DESTINATION_ALLOWLIST` (comma-separated),
/// `MG_RISK_APPROVALS_REQUIRED` from `MG_RISK_MULTI_APPROVAL_THRESHOLD`: read with the same
/// rules as a template's `risk_controls`.
fn risk_limits(s: &Source<'_>) -> Result<qtg_core::risk::RiskLimits, ConfigError> {
    for key in [
        "MG_RISK_HARD_CAP",
        "MG_RISK_VELOCITY_AMOUNT",
        "MG_RISK_VELOCITY_WINDOW_SECONDS",
        "MG_RISK_DESTINATION_ALLOWLIST",
        "MG_RISK_APPROVALS_REQUIRED",
        "MG_RISK_MULTI_APPROVAL_THRESHOLD",
    ] {
        s.text(key);
    }
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
    /// Parses settings from `vars` (e.g. the process environment), with the settings of each
    /// worker in `workers` (the worker table). `migrate_default` is the binary's own default
    /// for `MG_MIGRATE`.
    pub fn from_vars<T>(
        vars: &HashMap<String, String>,
        migrate_default: bool,
        workers: &[Worker<T>],
    ) -> Result<Settings, ConfigError> {
        let s = Source { vars, seen: RefCell::default() };
        let database_url = s
            .get("MG_DATABASE_URL")
            .or_else(|| s.get("DATABASE_URL"))
            .ok_or_else(|| Source::err("MG_DATABASE_URL", "is required (or DATABASE_URL)"))?
            .to_string();
        s.note("MG_DATABASE_URL", qtg_core::urls::redact(&database_url));
        let log_format = match s.get("MG_LOG_FORMAT").unwrap_or("json") {
            "json" => LogFormat::Json,
            "pretty" => LogFormat::Pretty,
            other => return Err(Source::err("MG_LOG_FORMAT", format!("{other:?} is not json|pretty"))),
        };
        s.note("MG_LOG_FORMAT", format!("{log_format:?}").to_ascii_lowercase());
        let network_class = s.get("MG_NETWORK_CLASS").unwrap_or("default").to_string();
        s.note("MG_NETWORK_CLASS", &network_class);
        let workers = workers.iter().map(|w| Ok((w.name, s.worker(w)?))).collect::<Result<_, ConfigError>>()?;
        let callback_default_url = s.url("MG_CALLBACK_DEFAULT_URL")?;
        let mut settings = Settings {
            database_url,
            db_pool_size: s.count("MG_DB_POOL_SIZE", 8, 200)? as u32,
            api_addr: s.parse("MG_API_ADDR", "0.0.0.0:8080".parse().expect("literal"))?,
            admin_addr: s.parse("MG_ADMIN_ADDR", "0.0.0.0:9090".parse().expect("literal"))?,
            migrate: s.flag("MG_MIGRATE", migrate_default)?,
            network_class,
            executor_registry: s.text("MG_EXECUTOR_REGISTRY").map(PathBuf::from),
            log_format,
            workers,
            heartbeat_interval: Duration::ZERO,
            worker_stale: Duration::ZERO,
            callback_secret: s.secret("MG_CALLBACK_SECRET"),
            callback_signature: {
                let v = s.get("MG_CALLBACK_SIGNATURE").unwrap_or("v3");
                s.note("MG_CALLBACK_SIGNATURE", v);
                qtg_wire_auth::standard::Scheme::parse(v).map_err(|e| Source::err("MG_CALLBACK_SIGNATURE", e))?
            },
            callback_webhook_secrets: match s.secret("MG_CALLBACK_WEBHOOK_SECRETS") {
                None => Vec::new(),
                Some(v) => qtg_wire_auth::standard::WebhookSecret::parse_list(&v)
                    .map_err(|e| Source::err("MG_CALLBACK_WEBHOOK_SECRETS", e))?,
            },
            callback_max_attempts: s.count("MG_CALLBACK_MAX_ATTEMPTS", 5, 100)? as i32,
            callback_timeout: s.interval("MG_CALLBACK_TIMEOUT_SECONDS", 10.0)?,
            callback_allow_private: s.flag("MG_CALLBACK_ALLOW_PRIVATE", false)?,
            callback_allowed_hosts: s.list("MG_CALLBACK_ALLOWED_HOSTS"),
            callback_max_in_flight: s.count("MG_CALLBACK_MAX_IN_FLIGHT", 16, 1024)? as u32,
            callback_per_receiver: s.count("MG_CALLBACK_MAX_IN_FLIGHT_PER_RECEIVER", 2, 1024)? as i64,
            recovery_batch: s.count("MG_NODE_RECOVERY_BATCH_SIZE", 10, 1000)? as i64,
            observe_batch: s.count("MG_NODE_OBSERVE_BATCH_SIZE", 10, 1000)? as i64,
            grace_default: s.interval("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", 90.0)?,
            grace_ccip: s.opt_interval("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP")?,
            grace_stargate: s.opt_interval("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_STARGATE")?,
            grace_cex: s.opt_interval("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX")?,
            grace_other: s.opt_interval("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_OTHER")?,
            executor_timeout: s.millis("MG_EXECUTOR_TIMEOUT_MS", 30_000)?,
            // Set (and checked) by fence_times below.
            clock_skew: Duration::ZERO,
            submit_window: Duration::ZERO,
            lease: Duration::ZERO,
            db_lock_timeout: s.millis("MG_DB_LOCK_TIMEOUT_MS", 5_000)?,
            db_idle_in_transaction_timeout: Duration::ZERO,
            db_refuse_weaker_session: match s.text("MG_DB_SESSION_CHECK").as_deref() {
                None | Some("refuse") => true,
                Some("warn") => false,
                Some(other) => return Err(Source::err("MG_DB_SESSION_CHECK", format!("{other:?} is not refuse|warn"))),
            },
            db_require_sync_replication: s.flag("MG_DB_REQUIRE_SYNC_REPLICATION", false)?,
            observe_timeout_enforcement: s.flag("MG_OBSERVE_TIMEOUT_ENFORCEMENT_ENABLED", false)?,
            approval_ttl: s.interval("MG_APPROVAL_TTL_SECONDS", 300.0)?,
            template_proposal_ttl: s.interval("MG_TEMPLATE_PROPOSAL_TTL_SECONDS", 7.0 * 86400.0)?,
            drift_alert_url: s.url("MG_DRIFT_ALERT_URL")?.or_else(|| callback_default_url.clone()),
            cex_transfer_alert_url: s.url("MG_CEX_TRANSFER_ALERT_URL")?.or_else(|| callback_default_url.clone()),
            cex_transfer_ingest_venues: s.list("MG_CEX_TRANSFER_INGEST_VENUES_CSV"),
            cex_transfer_ingest_lookback: s.interval("MG_CEX_TRANSFER_INGEST_LOOKBACK_SECONDS", 86_400.0)?,
            cex_transfer_ingest_page: s.interval("MG_CEX_TRANSFER_INGEST_PAGE_SECONDS", 3_600.0)?,
            cex_transfer_ingest_overlap: s.interval("MG_CEX_TRANSFER_INGEST_OVERLAP_SECONDS", 600.0)?,
            cex_transfer_unexplained_grace: s.interval("MG_CEX_TRANSFER_UNEXPLAINED_GRACE_SECONDS", 900.0)?,
            callback_default_url,
            bootstrap_admin_key: s.secret("MG_API_BOOTSTRAP_ADMIN_KEY"),
            bootstrap_admin_key_ttl: s.opt_interval("MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS")?,
            shutdown_grace: s.interval("MG_SHUTDOWN_GRACE_SECONDS", 30.0)?,
            workers_enabled: s.flag("MG_WORKERS_ENABLED", true)?,
            strict_settings: s.flag("MG_STRICT_SETTINGS", false)?,
            key_creation_approvals: s.count("MG_API_KEY_CREATION_APPROVALS", 1, 2)? as u32,
            policy_change_approvals: s.count("MG_POLICY_CHANGE_APPROVALS", 1, 5)? as u32,
            address_book_cool_down: s.interval("MG_ADDRESS_BOOK_COOL_DOWN_SECONDS", 0.0)?,
            evm_nonce_reaper_age: s.interval("MG_EVM_NONCE_REAPER_AGE_SECONDS", 600.0)?,
            ccip_stranded_age: s.interval("MG_CCIP_STRANDED_REAPER_AGE_SECONDS", 7200.0)?,
            verify_drift_pause: s.flag("MG_VERIFY_DRIFT_PAUSE", false)?,
            verify_drift_concurrency: s.count("MG_VERIFY_DRIFT_CONCURRENCY", 4, 64)?,
            verify_drift_timeout: s.interval("MG_VERIFY_DRIFT_TIMEOUT_SECONDS", 30.0)?,
            balance_retention: s.interval("MG_BALANCE_SNAPSHOT_RETENTION_SECONDS", 7.0 * 86_400.0)?,
            balance_stale: s.interval("MG_BALANCE_STALE_THRESHOLD_SECONDS", 120.0)?,
            balance_fetch_timeout: s.interval("MG_BALANCE_FETCH_TIMEOUT_SECONDS", 10.0)?,
            notify_max_attempts: s.count("MG_NOTIFY_MAX_ATTEMPTS", 20, 100)? as i32,
            notify_timeout: s.interval("MG_NOTIFY_TIMEOUT_SECONDS", 10.0)?,
            notify_unknown_grace: s.interval("MG_NOTIFY_UNKNOWN_GRACE_SECONDS", 300.0)?,
            notify_max_in_flight: s.count("MG_NOTIFY_MAX_IN_FLIGHT", 8, 1024)? as u32,
            notify_link_base: s.url("MG_NOTIFY_LINK_BASE_URL")?,
            notify_retention: s.interval("MG_NOTIFY_RETENTION_SECONDS", 30.0 * 86_400.0)?,
            outbox_retention: s.interval("MG_OUTBOX_RETENTION_SECONDS", 90.0 * 86_400.0)?,
            balance_hourly_retention: s.interval("MG_BALANCE_HISTORY_HOURLY_RETENTION_SECONDS", 90.0 * 86_400.0)?,
            balance_daily_retention: s.interval("MG_BALANCE_HISTORY_DAILY_RETENTION_SECONDS", 1825.0 * 86_400.0)?,
            balance_fresh_min_interval: s.interval("MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS", 5.0)?,
            capital_transfer_stale: s.interval("MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS", 300.0)?,
            approval_health_gate_strict: match s.text("MG_APPROVAL_HEALTH_GATE").as_deref() {
                None | Some("strict") => true,
                Some("down-only") => false,
                Some(other) => {
                    return Err(Source::err("MG_APPROVAL_HEALTH_GATE", format!("{other:?} is not strict|down-only")))
                }
            },
            risk: risk_limits(&s)?,
            otlp_endpoint: s.url("OTEL_EXPORTER_OTLP_ENDPOINT")?,
            otel_service_name: s.text("OTEL_SERVICE_NAME"),
            effective: BTreeMap::new(),
        };
        s.note("MG_APPROVAL_HEALTH_GATE", if settings.approval_health_gate_strict { "strict" } else { "down-only" });
        s.note("MG_DB_SESSION_CHECK", if settings.db_refuse_weaker_session { "refuse" } else { "warn" });
        if settings.db_pool_size < 2 {
            return Err(Source::err(
                "MG_DB_POOL_SIZE",
                "must be at least 2 (one connection is the LISTEN/NOTIFY listener's)",
            ));
        }
        if settings.callback_signature == qtg_wire_auth::standard::Scheme::StandardWebhooks
            && settings.callback_webhook_secrets.is_empty()
        {
            return Err(Source::err(
                "MG_CALLBACK_SIGNATURE",
                "standard_webhooks needs MG_CALLBACK_WEBHOOK_SECRETS (whsec_…)",
            ));
        }
        settings.fence_times(&s)?;
        settings.heartbeat_times(&s)?;
        if let Some(k) = &settings.bootstrap_admin_key {
            if k.len() < 16 {
                return Err(Source::err("MG_API_BOOTSTRAP_ADMIN_KEY", "must be at least 16 characters"));
            }
        }
        settings.effective = s.seen.into_inner();
        Ok(settings)
    }

    /// `--print-config`: every effective setting as `KEY=value`, one per line, sorted.
    pub fn print_config(&self) -> String {
        self.effective.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    /// The `MG_*` variables of `vars` that neither these settings nor `read_elsewhere` (what
    /// the lanes and the registry read) use: most likely misspelt, so they do nothing.
    pub fn unknown_keys<'a>(&self, vars: &'a HashMap<String, String>, read_elsewhere: &[String]) -> Vec<&'a str> {
        let mut unknown: Vec<&str> = vars
            .keys()
            .map(String::as_str)
            .filter(|k| k.starts_with("MG_"))
            .filter(|k| !self.effective.contains_key(*k) && !read_elsewhere.iter().any(|r| r == k))
            .collect();
        unknown.sort_unstable();
        unknown
    }

    /// The settings of worker `name` (one of the table given to [`Settings::from_vars`]).
    pub fn worker(&self, name: &str) -> Option<&WorkerSettings> {
        self.workers.get(name)
    }

    /// The heartbeat period and the stale threshold that follows it: a process that dies is
    /// stale after a few periods, and one that lives is never stale between them.
    fn heartbeat_times(&mut self, s: &Source<'_>) -> Result<(), ConfigError> {
        let period = s.interval("MG_HEARTBEAT_INTERVAL_SECONDS", 10.0)?;
        if period < Duration::from_millis(100) {
            return Err(Source::err("MG_HEARTBEAT_INTERVAL_SECONDS", "must be at least 0.1 s"));
        }
        let stale = s.interval("MG_WORKER_STALE_SECONDS", period.saturating_mul(3).as_secs_f64())?;
        if stale < period.saturating_mul(2) {
            let (stale, period) = (stale.as_secs_f64(), period.as_secs_f64());
            return Err(Source::err(
                "MG_WORKER_STALE_SECONDS",
                format!(
                    "the stale threshold ({stale} s) must be at least two heartbeat intervals \
                     (MG_HEARTBEAT_INTERVAL_SECONDS = {period} s), or a live process reads as dead"
                ),
            ));
        }
        self.heartbeat_interval = period;
        self.worker_stale = stale;
        Ok(())
    }

    /// The lease, the submit window and the skew margin, which must nest (docs/architecture.md §6.4):
    /// every grace > submit window + skew; submit window > the largest submit deadline
    /// (`MG_EXECUTOR_TIMEOUT_MS`, which also caps every remote entry's `timeout_ms`) + skew;
    /// lease > preflight + prepare + sign deadlines + skew; idle-in-transaction timeout <
    /// lease. A binary refuses to start otherwise, naming the numbers.
    fn fence_times(&mut self, s: &Source<'_>) -> Result<(), ConfigError> {
        let deadline = self.executor_timeout;
        let skew = s.interval("MG_CLOCK_SKEW_MARGIN_SECONDS", 5.0)?;
        let window_default = deadline.saturating_add(skew.saturating_mul(2));
        let window = s.interval("MG_SUBMIT_WINDOW_SECONDS", window_default.as_secs_f64())?;
        let lease_default = (deadline * 3).saturating_add(skew.saturating_mul(2));
        let lease = s.interval("MG_DISPATCH_LEASE_SECONDS", lease_default.as_secs_f64())?;
        let idle_default = (lease / 2).min(Duration::from_secs(60));
        let idle = s.interval("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", idle_default.as_secs_f64())?;
        // The numbers as the messages name them, in seconds.
        let (deadline_s, skew_s, window_s, lease_s) =
            (deadline.as_secs_f64(), skew.as_secs_f64(), window.as_secs_f64(), lease.as_secs_f64());
        if window <= deadline.saturating_add(skew) {
            return Err(Source::err(
                "MG_SUBMIT_WINDOW_SECONDS",
                format!(
                    "the submit window ({window_s} s) must be above the largest submit deadline \
                     (MG_EXECUTOR_TIMEOUT_MS = {deadline_s} s) + the clock-skew margin ({skew_s} s)"
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
            if let Some(grace) = grace.filter(|g| *g <= window.saturating_add(skew)) {
                let grace_s = grace.as_secs_f64();
                return Err(Source::err(
                    key,
                    format!(
                        "the recovery grace ({grace_s} s) must be above the submit window ({window_s} s) + the \
                         clock-skew margin ({skew_s} s): recovery may not decide an attempt that can still start"
                    ),
                ));
            }
        }
        if lease <= (deadline * 3).saturating_add(skew) {
            return Err(Source::err(
                "MG_DISPATCH_LEASE_SECONDS",
                format!(
                    "the lease ({lease_s} s) must be above preflight + prepare + sign deadlines \
                     (3 × {deadline_s} s) + the clock-skew margin ({skew_s} s)"
                ),
            ));
        }
        if idle.is_zero() || idle >= lease {
            let idle_s = idle.as_secs_f64();
            return Err(Source::err(
                "MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
                format!("must be above 0 and below the lease ({lease_s} s), got {idle_s} s"),
            ));
        }
        self.clock_skew = skew;
        self.submit_window = window;
        self.lease = lease;
        self.db_idle_in_transaction_timeout = idle;
        Ok(())
    }
}

impl fmt::Debug for Settings {
    /// The effective settings (secrets redacted, the database password masked).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.effective.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{Flag, Group};

    const WORKERS: &[Worker<()>] = &[
        Worker {
            name: "node_dispatcher",
            binary: "qtg-dispatcher",
            summary: "",
            interval_key: "MG_NODE_DISPATCH_INTERVAL_SECONDS",
            default_interval: Duration::from_secs(2),
            concurrency_key: Some("MG_DISPATCHER_CONCURRENCY"),
            wake: None,
            group: Group::Core,
            enabled_by: None,
            requires: None,
            tick: (),
        },
        Worker {
            name: "evm_nonce_reaper",
            binary: "qtg-reaper",
            summary: "",
            interval_key: "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS",
            default_interval: Duration::from_secs(60),
            concurrency_key: None,
            wake: None,
            group: Group::Core,
            enabled_by: Some(Flag { key: "MG_EVM_NONCE_REAPER_ENABLED", default: true, list: false }),
            requires: Some("MG_EVM_CHAINS"),
            tick: (),
        },
    ];

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_follow_the_seed() {
        let s = Settings::from_vars(
            &vars(&[("DATABASE_URL", "postgres://u:pa55-w0rd@h/db"), ("MG_CALLBACK_SECRET", "whsec-do-not-print")]),
            false,
            WORKERS,
        )
        .unwrap();
        assert_eq!(s.worker("node_dispatcher").map(|w| w.interval), Some(Duration::from_secs(2)));
        assert_eq!(
            s.worker("evm_nonce_reaper").map(|w| (w.interval, w.concurrency, w.enabled)),
            Some((Duration::from_secs(60), 1, true))
        );
        assert_eq!(s.recovery_batch, 10);
        assert_eq!((s.grace_default, s.grace_cex), (Duration::from_secs(90), None));
        assert!(!s.observe_timeout_enforcement);
        assert_eq!(s.approval_ttl, Duration::from_secs(300));
        assert_eq!((s.heartbeat_interval, s.worker_stale), (Duration::from_secs(10), Duration::from_secs(30)));
        assert_eq!(s.bootstrap_admin_key_ttl, None);
        let printed = format!("{s:?}");
        assert!(!printed.contains("pa55-w0rd") && !printed.contains("whsec-do-not-print"), "{printed}");
        // --print-config: every setting read, defaults included, secrets masked.
        let config = s.print_config();
        for line in [
            "MG_DATABASE_URL=postgres://u:***@h/db",
            "MG_CALLBACK_SECRET=***",
            "MG_API_BOOTSTRAP_ADMIN_KEY=(unset)",
            "MG_NODE_DISPATCH_INTERVAL_SECONDS=2",
            "MG_DISPATCHER_CONCURRENCY=1",
            "MG_EVM_NONCE_REAPER_ENABLED=true",
            "MG_SUBMIT_WINDOW_SECONDS=40",
            "MG_DISPATCH_LEASE_SECONDS=100",
            "MG_WORKER_STALE_SECONDS=30",
            "MG_APPROVAL_TTL_SECONDS=300",
            "MG_BALANCE_SNAPSHOT_RETENTION_SECONDS=604800",
            "MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX=(unset)",
            "MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS=(unset)",
            "MG_RISK_HARD_CAP=(unset)",
        ] {
            assert!(config.lines().any(|l| l == line), "{line} missing from\n{config}");
        }
        assert!(!config.contains("pa55-w0rd") && !config.contains("whsec-do-not-print"), "{config}");
    }

    #[test]
    fn unknown_variables_are_named() {
        let v = vars(&[
            ("MG_DATABASE_URL", "postgres://h/db"),
            ("MG_NODE_DISPATCH_INTERVAL_SECOND", "1"),
            ("MG_CEX_SECRET", "s"),
            ("PATH", "/bin"),
        ]);
        let s = Settings::from_vars(&v, false, WORKERS).unwrap();
        assert!(!s.strict_settings);
        assert_eq!(s.unknown_keys(&v, &[]), vec!["MG_CEX_SECRET", "MG_NODE_DISPATCH_INTERVAL_SECOND"]);
        assert_eq!(s.unknown_keys(&v, &["MG_CEX_SECRET".into()]), vec!["MG_NODE_DISPATCH_INTERVAL_SECOND"]);
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let base = [("MG_DATABASE_URL", "postgres://h/db")];
        let e = Settings::from_vars(&vars(&[base[0], ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "-1")]), false, WORKERS)
            .unwrap_err();
        assert_eq!(e.key, "MG_NODE_DISPATCH_INTERVAL_SECONDS");
        let e = Settings::from_vars(&vars(&[base[0], ("MG_MIGRATE", "maybe")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_MIGRATE");
        let e = Settings::from_vars(&vars(&[base[0], ("MG_EVM_NONCE_REAPER_ENABLED", "sometimes")]), false, WORKERS)
            .unwrap_err();
        assert_eq!(e.key, "MG_EVM_NONCE_REAPER_ENABLED");
        let s =
            Settings::from_vars(&vars(&[base[0], ("MG_EVM_NONCE_REAPER_ENABLED", "false")]), false, WORKERS).unwrap();
        assert_eq!(s.worker("evm_nonce_reaper").map(|w| w.enabled), Some(false));
        let e = Settings::from_vars(&vars(&[base[0], ("MG_MIGRATE", "maybe")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_MIGRATE");
        let e = Settings::from_vars(&vars(&[base[0], ("MG_DISPATCHER_CONCURRENCY", "0")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_DISPATCHER_CONCURRENCY");
        assert!(Settings::from_vars(&vars(&[]), false, WORKERS).is_err());
        let s = Settings::from_vars(&vars(&[base[0], ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.25")]), true, WORKERS)
            .unwrap();
        assert_eq!(s.worker("node_dispatcher").map(|w| w.interval), Some(Duration::from_millis(250)));
        assert!(s.migrate);
        let s = Settings::from_vars(
            &vars(&[base[0], ("MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS", "1.5"), ("MG_APPROVAL_TTL_SECONDS", "1e30")]),
            false,
            WORKERS,
        )
        .unwrap();
        assert_eq!((s.bootstrap_admin_key_ttl, s.approval_ttl), (Some(Duration::from_millis(1500)), Duration::MAX));
        assert!(s.print_config().lines().any(|l| l == "MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS=1.5"));
        let e = Settings::from_vars(&vars(&[base[0], ("MG_APPROVAL_TTL_SECONDS", "-1")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_APPROVAL_TTL_SECONDS");
        let e = Settings::from_vars(&vars(&[base[0], ("MG_RISK_HARD_CAP", "-5")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_RISK_HARD_CAP");
        let s = Settings::from_vars(
            &vars(&[base[0], ("MG_RISK_HARD_CAP", "1000"), ("MG_RISK_DESTINATION_ALLOWLIST", "a, b")]),
            false,
            WORKERS,
        )
        .unwrap();
        assert_eq!(s.risk.hard_cap.as_ref().map(|c| c.to_string()).as_deref(), Some("1000"));
        assert_eq!(s.risk.destination_allowlist, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(s.risk.approvals_needed(&qtg_core::risk::Amount::parse("5").unwrap()), 1);
        let e = Settings::from_vars(&vars(&[base[0], ("MG_RISK_VELOCITY_WINDOW_SECONDS", "60")]), false, WORKERS)
            .unwrap_err();
        assert_eq!(e.key, "MG_RISK_VELOCITY_WINDOW_SECONDS");
    }

    #[test]
    fn lease_window_and_grace_must_nest() {
        let base = ("MG_DATABASE_URL", "postgres://h/db");
        let s = Settings::from_vars(&vars(&[base]), false, WORKERS).unwrap();
        assert_eq!(
            (s.clock_skew, s.submit_window, s.lease),
            (Duration::from_secs(5), Duration::from_secs(40), Duration::from_secs(100))
        );
        assert_eq!(s.db_idle_in_transaction_timeout, Duration::from_secs(50));
        // A grace recovery could reach while the attempt may still start: refused, with numbers.
        let e = Settings::from_vars(&vars(&[base, ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX", "30")]), false, WORKERS)
            .unwrap_err();
        assert_eq!(e.key, "MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX");
        assert!(e.reason.contains("30 s") && e.reason.contains("40 s") && e.reason.contains("5 s"), "{e}");
        let e = Settings::from_vars(&vars(&[base, ("MG_SUBMIT_WINDOW_SECONDS", "31")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_SUBMIT_WINDOW_SECONDS");
        let e = Settings::from_vars(&vars(&[base, ("MG_DISPATCH_LEASE_SECONDS", "60")]), false, WORKERS).unwrap_err();
        assert_eq!(e.key, "MG_DISPATCH_LEASE_SECONDS");
        let e =
            Settings::from_vars(&vars(&[base, ("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "100")]), false, WORKERS)
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
            WORKERS,
        )
        .unwrap();
        assert_eq!((s.submit_window, s.lease), (Duration::from_millis(1900), Duration::from_millis(4900)));
        assert_eq!(s.grace_default, Duration::from_secs(3));
    }
}
