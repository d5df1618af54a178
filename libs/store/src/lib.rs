//! Every SQL statement qtg runs, as small functions that take the caller's connection or
//! transaction. The one door for state changes lives in [`transition`].

pub mod api_keys;
pub mod artifacts;
pub mod attention;
pub mod audit;
pub mod balances;
pub mod callbacks;
pub mod capital;
pub mod ccip;
pub mod cctp;
pub mod cex;
pub mod claims;
pub mod context;
pub mod controls;
pub mod diagnosis;
pub mod drift;
pub mod error;
pub mod events;
pub mod evm;
pub mod expiry;
pub mod health;
pub mod heartbeats;
pub mod movements;
pub mod notify;
mod params;
pub mod policy;
pub mod retention;
pub mod rows;
pub mod session;
pub mod signals;
pub mod sim;
pub mod templates;
pub mod transition;
pub mod venue_transfers;

use std::str::FromStr;
use std::time::Duration;

pub use error::StoreError;
pub use rows::*;
pub use sqlx::postgres::{PgConnection, PgListener, PgPool};
pub use sqlx::{Acquire, Connection, Postgres, Transaction};
pub use transition::{Cas, Stale};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Bounds on what a frozen process can hold (docs/architecture.md §6.6).
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// `lock_timeout`: no statement waits longer for a row lock.
    pub lock_timeout: Duration,
    /// `idle_in_transaction_session_timeout` (below the lease): a transaction left open by
    /// a frozen process is ended by the server, releasing its locks.
    pub idle_in_transaction: Duration,
}

/// Opens a pool of at most `max_connections`.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool> {
    connect_limited(url, max_connections, None, "qtg").await
}

/// Opens a pool whose connections carry `limits` and keep `synchronous_commit` on (a commit
/// is durable before a worker acts on it; failover must go to a synchronous standby).
/// `application_name` is the binary's name, so `pg_stat_activity` tells the workers apart.
pub async fn connect_limited(
    url: &str,
    max_connections: u32,
    limits: Option<SessionLimits>,
    application_name: &str,
) -> Result<PgPool> {
    let options = connect_options(url, limits, application_name)?;
    Ok(pool_options(max_connections).connect_with(options).await?)
}

/// A pool for workers: every connection asks for the guard's limits, and is checked by it
/// where it is made — at start and on every reconnect ([`session::SessionGuard`]); a
/// connection made before the server went away or turned read-only is dropped when next
/// acquired, so the pool reconnects through the same URL to the primary it reaches now.
pub async fn connect_guarded(
    url: &str,
    max_connections: u32,
    guard: session::SessionGuard,
    application_name: &str,
) -> Result<PgPool> {
    let options = connect_options(url, Some(guard.policy().limits), application_name)?;
    let pool = pool_options(max_connections)
        .after_connect(move |conn, _meta| {
            let guard = guard.clone();
            Box::pin(async move { guard.check(conn).await })
        })
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if session::stale(meta.age) {
                    return Ok(false);
                }
                ping_if_idle(conn, meta.idle_for).await.map(|()| true)
            })
        })
        .connect_with(options)
        .await?;
    Ok(pool)
}

fn connect_options(
    url: &str,
    limits: Option<SessionLimits>,
    application_name: &str,
) -> Result<sqlx::postgres::PgConnectOptions> {
    let mut options = sqlx::postgres::PgConnectOptions::from_str(url)?.application_name(application_name);
    if let Some(l) = limits {
        options = options.options([
            ("lock_timeout", format!("{}ms", l.lock_timeout.as_millis().max(1))),
            ("idle_in_transaction_session_timeout", format!("{}ms", l.idle_in_transaction.as_millis().max(1))),
            ("synchronous_commit", "on".to_string()),
        ]);
    }
    Ok(options)
}

fn pool_options(max_connections: u32) -> sqlx::postgres::PgPoolOptions {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        // sqlx pings every connection it hands out: a round trip per acquire, several per node
        // step, on the same cores as the database. Only a connection that sat idle is pinged.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| Box::pin(async move { ping_if_idle(conn, meta.idle_for).await.map(|()| true) }))
}

/// How long a pooled connection may sit idle and still be handed out without a ping.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Pings a pooled connection that sat idle for `idle_for` before it is handed out: one in use
/// a moment ago is not (the ping would cost a round trip per acquire); one idle for longer
/// must answer (the server may have restarted or failed over meanwhile), else the pool drops
/// it hard and opens another. A connection that breaks between two uses fails its
/// statement, as it could right after any ping.
async fn ping_if_idle(conn: &mut PgConnection, idle_for: Duration) -> std::result::Result<(), sqlx::Error> {
    if idle_for < PING_AFTER_IDLE {
        return Ok(());
    }
    conn.ping().await
}

/// Applies pending migrations (idempotent; safe under concurrent starters thanks to sqlx's
/// advisory lock).
pub async fn migrate(pool: &PgPool) -> Result<()> {
    MIGRATOR.run(pool).await.map_err(|e| StoreError::Migrate(e.to_string()))
}

/// Round trip to the database (readiness).
pub async fn ping(pool: &PgPool) -> Result<()> {
    sqlx::query!("SELECT 1 AS one").fetch_one(pool).await?;
    Ok(())
}

/// `true` when the error is Postgres' "could not obtain lock" (NOWAIT).
pub fn is_lock_not_available(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
}
