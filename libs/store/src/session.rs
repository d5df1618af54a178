//! What every pooled connection must run with, checked where the connection is made — at
//! start and on every reconnect (docs/architecture.md §16, "Durability and failover"):
//!
//! - a read-write primary: a connection to a standby (in recovery, or read-only by default) is
//!   refused, so nothing is decided from a read-only copy;
//! - the money-safety limits the process asked for (`lock_timeout`,
//!   `idle_in_transaction_session_timeout`, `synchronous_commit`), as the server reports them:
//!   a pooler that drops the startup `options`, or a role or database default, can leave them
//!   missing or weaker;
//! - durability: whether a commit is on a synchronous standby before it returns
//!   (`synchronous_commit` `on`/`remote_apply` with `synchronous_standby_names` set).
//!
//! And after a connection answers that the server has become read-only (a switchover), or dies
//! with the server, every connection made before is dropped when next acquired: the pool
//! reconnects through the same URL to whatever primary it now reaches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::PgConnection;

use crate::SessionLimits;

/// What a connection must hold, and what happens when it does not.
#[derive(Debug, Clone, Copy)]
pub struct SessionPolicy {
    /// The limits asked for in the connection's startup options.
    pub limits: SessionLimits,
    /// Refuse a connection whose limits are missing or weaker (`false`: warn, loudly).
    pub refuse_weaker_limits: bool,
    /// Refuse a connection whose commits are not synchronously replicated (`false`: warn).
    pub require_sync_replication: bool,
}

/// A connection's session as the server reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionReport {
    pub lock_timeout_ms: i64,
    pub idle_in_transaction_session_timeout_ms: i64,
    pub synchronous_commit: String,
    pub synchronous_standby_names: String,
    /// The server is a standby (`pg_is_in_recovery()`).
    pub in_recovery: bool,
    /// New transactions are read-only (`default_transaction_read_only`, or a standby).
    pub read_only: bool,
}

impl SessionReport {
    /// A commit returns only once a synchronous standby has flushed it: what survives the
    /// loss of the primary.
    pub fn synchronous(&self) -> bool {
        matches!(self.synchronous_commit.as_str(), "on" | "remote_apply")
            && !self.synchronous_standby_names.trim().is_empty()
    }

    /// `"synchronous"`, `"local"` (durable on the primary only) or `"none"` (a commit may be
    /// lost on a crash of the primary itself).
    pub fn durability(&self) -> &'static str {
        match self.synchronous_commit.as_str() {
            _ if self.synchronous() => "synchronous",
            "off" => "none",
            _ => "local",
        }
    }

    /// Where the session is weaker than `limits` asks: each a sentence an operator can act on.
    pub fn weaker_than(&self, limits: &SessionLimits) -> Vec<String> {
        let mut out = Vec::new();
        let mut bound = |name: &str, setting: &str, got: i64, want: Duration| {
            let want = want.as_millis().max(1) as i64;
            if got == 0 {
                out.push(format!("{name} is 0 (no bound) where {setting} asks {want} ms"));
            } else if got > want {
                out.push(format!("{name} is {got} ms, above the {want} ms {setting} asks"));
            }
        };
        bound("lock_timeout", "MG_DB_LOCK_TIMEOUT_MS", self.lock_timeout_ms, limits.lock_timeout);
        bound(
            "idle_in_transaction_session_timeout",
            "MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
            self.idle_in_transaction_session_timeout_ms,
            limits.idle_in_transaction,
        );
        if !matches!(self.synchronous_commit.as_str(), "on" | "remote_apply") {
            out.push(format!(
                "synchronous_commit is {:?} where qtg asks \"on\" (a commit it acts on could be lost)",
                self.synchronous_commit
            ));
        }
        out
    }
}

/// Reads the session of `conn`.
pub async fn report(conn: &mut PgConnection) -> crate::Result<SessionReport> {
    Ok(sqlx::query_as!(
        SessionReport,
        r#"SELECT (SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout') AS "lock_timeout_ms!",
                  (SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout')
                      AS "idle_in_transaction_session_timeout_ms!",
                  current_setting('synchronous_commit') AS "synchronous_commit!",
                  current_setting('synchronous_standby_names') AS "synchronous_standby_names!",
                  pg_is_in_recovery() AS "in_recovery!",
                  (pg_is_in_recovery() OR current_setting('default_transaction_read_only') = 'on') AS "read_only!""#
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// The verdict on one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionState {
    /// `None` when the check itself could not run (the refusal says why).
    pub report: Option<SessionReport>,
    /// Why the connection was refused (`None`: accepted).
    pub refused: Option<String>,
    /// What is weaker than asked but accepted (warn mode).
    pub warnings: Vec<String>,
}

/// Checks every new connection of a pool against a [`SessionPolicy`] and keeps the latest
/// verdict for `/readyz` and `/metrics`.
#[derive(Clone)]
pub struct SessionGuard {
    policy: SessionPolicy,
    last: Arc<Mutex<Option<SessionState>>>,
}

impl SessionGuard {
    pub fn new(policy: SessionPolicy) -> Self {
        SessionGuard { policy, last: Arc::new(Mutex::new(None)) }
    }

    pub fn policy(&self) -> &SessionPolicy {
        &self.policy
    }

    /// The verdict on the newest connection (`None` before the first).
    pub fn last(&self) -> Option<SessionState> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records a refusal that has no session report (the check itself could not run).
    fn refuse(&self, why: String) {
        self.record(SessionState { report: None, refused: Some(why), warnings: Vec::new() });
    }

    /// Keeps `state` as the newest verdict; a change of verdict is logged once.
    fn record(&self, state: SessionState) {
        let changed = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let changed = last.as_ref() != Some(&state);
            *last = Some(state.clone());
            changed
        };
        if !changed {
            return;
        }
        let Some(r) = &state.report else {
            tracing::error!(refused = ?state.refused, "database connection refused");
            return;
        };
        match (&state.refused, state.warnings.is_empty()) {
            (Some(why), _) => tracing::error!(
                refused = %why, durability = r.durability(), lock_timeout_ms = r.lock_timeout_ms,
                idle_in_transaction_session_timeout_ms = r.idle_in_transaction_session_timeout_ms,
                synchronous_commit = %r.synchronous_commit,
                synchronous_standby_names = %r.synchronous_standby_names,
                in_recovery = r.in_recovery, "database connection refused"
            ),
            (None, false) => tracing::warn!(
                warnings = ?state.warnings, durability = r.durability(), lock_timeout_ms = r.lock_timeout_ms,
                idle_in_transaction_session_timeout_ms = r.idle_in_transaction_session_timeout_ms,
                synchronous_commit = %r.synchronous_commit,
                synchronous_standby_names = %r.synchronous_standby_names,
                "database session is weaker than money safety needs"
            ),
            (None, true) => tracing::info!(
                durability = r.durability(), lock_timeout_ms = r.lock_timeout_ms,
                idle_in_transaction_session_timeout_ms = r.idle_in_transaction_session_timeout_ms,
                synchronous_commit = %r.synchronous_commit,
                synchronous_standby_names = %r.synchronous_standby_names,
                "database session checked"
            ),
        }
    }

    /// Checks the server again on a pooled connection: what is checked where a connection is
    /// made can change under it (`synchronous_standby_names` emptied, the server turned
    /// read-only). A refusal drops every connection made before, so the next ones are checked.
    pub async fn recheck(&self, pool: &sqlx::PgPool) -> crate::Result<()> {
        let mut conn = pool.acquire().await?;
        let state = self.judge(report(&mut conn).await?);
        drop(conn);
        if state.refused.is_some() {
            invalidate();
        }
        self.record(state);
        Ok(())
    }

    /// Judges `report`: refused for a standby, for weaker limits (unless warned only) and for
    /// asynchronous durability when synchronous replication is required.
    pub fn judge(&self, report: SessionReport) -> SessionState {
        let weaker = report.weaker_than(&self.policy.limits);
        let mut refusals = Vec::new();
        let mut warnings = Vec::new();
        if report.read_only {
            refusals.push(if report.in_recovery {
                "the server is a standby (in recovery): nothing is decided from a read-only copy".to_string()
            } else {
                "new transactions are read-only on this server (default_transaction_read_only)".to_string()
            });
        }
        if self.policy.refuse_weaker_limits {
            refusals.extend(weaker)
        } else {
            warnings.extend(weaker)
        }
        if !report.synchronous() {
            let why = format!(
                "commits are not synchronously replicated (synchronous_commit {:?}, synchronous_standby_names {:?}): \
                 a failover to an asynchronous standby can lose an arm qtg has acted on",
                report.synchronous_commit, report.synchronous_standby_names
            );
            if self.policy.require_sync_replication {
                refusals.push(why)
            } else {
                warnings.push(why)
            }
        }
        let refused = (!refusals.is_empty()).then(|| refusals.join("; "));
        SessionState { report: Some(report), refused, warnings }
    }

    /// Checks a new connection: `Err` refuses it (the pool does not hand it out). A change of
    /// verdict is logged once.
    pub async fn check(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let report = report(conn).await.map_err(|e| match e {
            // Another client's prepared statement on this server connection (or ours gone):
            // the connection is shared between clients — a transaction or statement pooler.
            crate::StoreError::Sqlx(sqlx::Error::Database(db))
                if matches!(db.code().as_deref(), Some("42P05" | "26000")) =>
            {
                let why = format!(
                    "{db}: this server connection is shared with other clients — a transaction or statement pooler \
                     (PgBouncer pool_mode = transaction)? qtg needs session pooling or a direct connection"
                );
                self.refuse(why.clone());
                sqlx::Error::Configuration(why.into())
            }
            crate::StoreError::Sqlx(e) => e,
            other => sqlx::Error::Protocol(other.to_string()),
        })?;
        let state = self.judge(report);
        self.record(state.clone());
        match state.refused {
            Some(why) => Err(sqlx::Error::Configuration(why.into())),
            None => Ok(()),
        }
    }
}

/// Sends `payload` on `channel` (the probe that LISTEN/NOTIFY works through the pool).
pub async fn notify(pool: &sqlx::PgPool, channel: &str, payload: &str) -> crate::Result<()> {
    sqlx::query!("SELECT pg_notify($1, $2) AS sent", channel, payload).fetch_one(pool).await?;
    Ok(())
}

// ---- dropping connections made before a switchover -------------------------------------------

fn epoch() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`] before which every connection is stale (0: none is).
static STALE_BEFORE_MS: AtomicU64 = AtomicU64::new(0);

/// SQLSTATEs that say the server a connection reached is no longer a usable primary: it
/// became read-only (25006), is shutting down or crashed (57P01–57P03), or the connection
/// failed (class 08).
fn server_gone(code: &str) -> bool {
    matches!(code, "25006" | "57P01" | "57P02" | "57P03") || code.starts_with("08")
}

/// Every connection made before now is dropped when it is next acquired.
fn invalidate() {
    // One past now: a connection made in this very millisecond may predate the cause.
    let now = epoch().elapsed().as_millis() as u64 + 1;
    STALE_BEFORE_MS.fetch_max(now, Ordering::SeqCst);
}

/// Called for every database error: after one that says the server went away (or an I/O
/// error), every connection made before now is dropped when it is next acquired.
pub fn observe_error(e: &sqlx::Error) {
    let gone = match e {
        sqlx::Error::Database(db) => db.code().is_some_and(|c| server_gone(&c)),
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        _ => false,
    };
    if gone {
        // One past now: a connection made in this very millisecond may predate the error.
        let now = epoch().elapsed().as_millis() as u64 + 1;
        if STALE_BEFORE_MS.fetch_max(now, Ordering::SeqCst) < now {
            tracing::warn!(error = %e, "the database server went away or turned read-only: reconnecting");
        }
    }
}

/// Whether a connection of this age was made before the last server change (drop it).
pub fn stale(age: Duration) -> bool {
    let made_at = epoch().elapsed().saturating_sub(age).as_millis() as u64;
    made_at < STALE_BEFORE_MS.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(lock: i64, idle: i64, commit: &str, names: &str) -> SessionReport {
        SessionReport {
            lock_timeout_ms: lock,
            idle_in_transaction_session_timeout_ms: idle,
            synchronous_commit: commit.into(),
            synchronous_standby_names: names.into(),
            in_recovery: false,
            read_only: false,
        }
    }

    const LIMITS: SessionLimits =
        SessionLimits { lock_timeout: Duration::from_millis(5000), idle_in_transaction: Duration::from_secs(50) };

    #[test]
    fn dropped_options_and_weaker_defaults_are_named() {
        // PgBouncer without the options: the server's defaults.
        let dropped = report(0, 0, "on", "");
        let why = dropped.weaker_than(&LIMITS);
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].contains("lock_timeout is 0"), "{why:?}");
        assert!(report(5000, 50_000, "off", "").weaker_than(&LIMITS)[0].contains("synchronous_commit is \"off\""));
        assert!(report(6000, 50_000, "on", "").weaker_than(&LIMITS)[0].contains("above the 5000 ms"));
        assert!(report(5000, 50_000, "on", "").weaker_than(&LIMITS).is_empty());
        assert!(report(100, 1000, "remote_apply", "").weaker_than(&LIMITS).is_empty(), "stricter is fine");
    }

    #[test]
    fn durability_needs_a_synchronous_standby_and_a_synchronous_commit() {
        assert_eq!(report(1, 1, "on", "ANY 1 (a, b)").durability(), "synchronous");
        assert_eq!(report(1, 1, "remote_apply", "*").durability(), "synchronous");
        assert_eq!(report(1, 1, "on", "").durability(), "local");
        assert_eq!(report(1, 1, "local", "*").durability(), "local");
        assert_eq!(report(1, 1, "remote_write", "*").durability(), "local");
        assert_eq!(report(1, 1, "off", "*").durability(), "none");
    }

    #[test]
    fn a_standby_is_always_refused_and_the_rest_as_configured() {
        let strict = SessionGuard::new(SessionPolicy {
            limits: LIMITS,
            refuse_weaker_limits: true,
            require_sync_replication: true,
        });
        let lenient = SessionGuard::new(SessionPolicy {
            limits: LIMITS,
            refuse_weaker_limits: false,
            require_sync_replication: false,
        });
        let standby = SessionReport { in_recovery: true, read_only: true, ..report(5000, 50_000, "on", "*") };
        assert!(strict.judge(standby.clone()).refused.is_some_and(|w| w.contains("standby")));
        assert!(lenient.judge(standby).refused.is_some_and(|w| w.contains("standby")));
        let async_ok = report(5000, 50_000, "on", "");
        assert!(strict.judge(async_ok.clone()).refused.is_some_and(|w| w.contains("not synchronously")));
        let warned = lenient.judge(async_ok);
        assert_eq!((warned.refused, warned.warnings.len()), (None, 1));
        let dropped = lenient.judge(report(0, 0, "on", "*"));
        assert_eq!((dropped.refused, dropped.warnings.len()), (None, 2));
        assert!(strict.judge(report(5000, 50_000, "on", "*")).refused.is_none());
    }

    #[test]
    fn connections_made_before_a_switchover_are_stale() {
        assert!(server_gone("25006") && server_gone("57P01") && server_gone("08006"));
        assert!(!server_gone("40001") && !server_gone("55P03"));
        epoch();
        std::thread::sleep(Duration::from_millis(5));
        let old = epoch().elapsed();
        let e = sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        observe_error(&e);
        assert!(stale(old), "made before the error");
        std::thread::sleep(Duration::from_millis(2));
        assert!(!stale(Duration::ZERO), "made after it");
    }
}
