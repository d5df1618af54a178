//! The executor and signer roster: health as `qtg-health` last saw it, identity posture of
//! signers, and the worker heartbeats view.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use crate::Result;

/// Records an executor's health (creating its row on first sight).
pub async fn record_executor(
    conn: &mut PgConnection,
    key: &str,
    transport: &str,
    lane: &str,
    state: &str,
    error: Option<&str>,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO executors (executor_key, transport, lane, health_state, last_health_checked_at, last_error)
         VALUES ($1, $2, $3, $4, now(), $5)
         ON CONFLICT (executor_key) DO UPDATE SET transport = EXCLUDED.transport, lane = EXCLUDED.lane,
             health_state = EXCLUDED.health_state, last_health_checked_at = now(),
             last_error = EXCLUDED.last_error, updated_at = now()",
        key,
        transport,
        lane,
        state,
        error,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records a signer's health and the address it reports (`None` clears the observation).
/// Never touches `expected_signer_address`.
pub async fn record_signer(
    conn: &mut PgConnection,
    key: &str,
    transport: &str,
    state: &str,
    error: Option<&str>,
    observed_address: Option<&str>,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO signers (signer_key, transport, health_state, last_health_checked_at, last_error, \
         observed_signer_address)
         VALUES ($1, $2, $3, now(), $4, $5)
         ON CONFLICT (signer_key) DO UPDATE SET transport = EXCLUDED.transport, health_state = EXCLUDED.health_state,
             last_health_checked_at = now(), last_error = EXCLUDED.last_error,
             observed_signer_address = EXCLUDED.observed_signer_address, updated_at = now()",
        key,
        transport,
        state,
        error,
        observed_address,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Rows whose key is no longer registered become `orphan` (a signer's observation is
/// cleared). Returns how many changed.
pub async fn mark_orphans(conn: &mut PgConnection, executor_keys: &[String], signer_keys: &[String]) -> Result<u64> {
    let a = sqlx::query!(
        "UPDATE executors SET health_state = 'orphan', last_health_checked_at = now(), updated_at = now()
         WHERE NOT (executor_key = ANY($1)) AND health_state <> 'orphan'",
        executor_keys,
    )
    .execute(&mut *conn)
    .await?;
    let b = sqlx::query!(
        "UPDATE signers SET health_state = 'orphan', observed_signer_address = NULL, last_health_checked_at = \
         now(), updated_at = now()
         WHERE NOT (signer_key = ANY($1)) AND health_state <> 'orphan'",
        signer_keys,
    )
    .execute(&mut *conn)
    .await?;
    Ok(a.rows_affected() + b.rows_affected())
}

/// Sets a signer's expected address (admin enrolment). `false` if the signer is unknown.
pub async fn set_expected_identity(conn: &mut PgConnection, key: &str, address: &str) -> Result<bool> {
    let res = sqlx::query!(
        "UPDATE signers SET expected_signer_address = $2, updated_at = now() WHERE signer_key = $1",
        key,
        address,
    )
    .execute(&mut *conn)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// The address an admin enrolled as `key`'s identity, if any.
pub async fn expected_identity(conn: &mut PgConnection, key: &str) -> Result<Option<String>> {
    let v: Option<Option<String>> =
        sqlx::query_scalar!("SELECT expected_signer_address FROM signers WHERE signer_key = $1", key)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(v.flatten().filter(|a| !a.is_empty()))
}

/// `(expected, observed)`: the address an admin enrolled as `key`'s identity and the one its
/// last health check reported, each if any.
pub async fn identities(conn: &mut PgConnection, key: &str) -> Result<(Option<String>, Option<String>)> {
    let v = sqlx::query!(
        "SELECT expected_signer_address, observed_signer_address FROM signers WHERE signer_key = $1",
        key,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let (expected, observed) = v.map(|r| (r.expected_signer_address, r.observed_signer_address)).unwrap_or_default();
    Ok((expected.filter(|a| !a.is_empty()), observed.filter(|a| !a.is_empty())))
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutorHealth {
    pub executor_key: String,
    pub transport: String,
    pub lane: String,
    pub health_state: String,
    pub last_health_checked_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

pub async fn list_executors(conn: &mut PgConnection) -> Result<Vec<ExecutorHealth>> {
    Ok(sqlx::query_as!(
        ExecutorHealth,
        "SELECT executor_key, transport, lane, health_state, last_health_checked_at, last_error FROM executors \
         ORDER BY executor_key",
    )
    .fetch_all(&mut *conn)
    .await?)
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignerHealth {
    pub signer_key: String,
    pub transport: String,
    pub health_state: String,
    pub observed_signer_address: Option<String>,
    pub expected_signer_address: Option<String>,
    /// `match`, `mismatch` or `unverified` (derived when read).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub identity_posture: &'static str,
    pub last_health_checked_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

pub async fn list_signers(conn: &mut PgConnection) -> Result<Vec<SignerHealth>> {
    let rows = sqlx::query!(
        "SELECT signer_key, transport, health_state, observed_signer_address, expected_signer_address,
                last_health_checked_at, last_error FROM signers ORDER BY signer_key",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let identity_posture = match (&r.observed_signer_address, &r.expected_signer_address) {
                (Some(o), Some(e)) if o == e => "match",
                (Some(_), Some(_)) => "mismatch",
                _ => "unverified",
            };
            SignerHealth {
                signer_key: r.signer_key,
                transport: r.transport,
                health_state: r.health_state,
                observed_signer_address: r.observed_signer_address,
                expected_signer_address: r.expected_signer_address,
                identity_posture,
                last_health_checked_at: r.last_health_checked_at,
                last_error: r.last_error,
            }
        })
        .collect())
}

/// Health states of the given bindings that are not `up` (for the compile-time warning).
pub async fn not_up(
    conn: &mut PgConnection,
    executor_keys: &[String],
    signer_keys: &[String],
) -> Result<Vec<(String, String)>> {
    let rows = sqlx::query!(
        r#"SELECT k AS "key!", COALESCE(e.health_state, 'unknown') AS "health_state!" FROM unnest($1::text[]) k
             LEFT JOIN executors e ON e.executor_key = k
         WHERE COALESCE(e.health_state, 'unknown') <> 'up'
         UNION ALL
         SELECT k, COALESCE(s.health_state, 'unknown') FROM unnest($2::text[]) k LEFT JOIN signers s ON s.signer_key = k
         WHERE COALESCE(s.health_state, 'unknown') <> 'up'
         ORDER BY 1"#,
        executor_keys,
        signer_keys,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.key, r.health_state)).collect())
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerBeat {
    pub worker: String,
    pub network_class: String,
    pub instance_id: String,
    pub hostname: Option<String>,
    pub pid: Option<i32>,
    pub started_at: DateTime<Utc>,
    pub last_beat_at: DateTime<Utc>,
    pub age_seconds: f64,
    /// Past `MG_WORKER_STALE_SECONDS` (a few heartbeat periods): the process is likely gone.
    pub stale: bool,
    /// When the worker's loop last finished a tick and when its next is due, as of the last
    /// beat (none before its first tick).
    pub last_tick_at: Option<DateTime<Utc>>,
    pub next_tick_at: Option<DateTime<Utc>>,
}

/// Heartbeat rows with their age by the database's clock; `stale` past `stale_after_seconds`.
pub async fn list_workers(conn: &mut PgConnection, stale_after_seconds: f64) -> Result<Vec<WorkerBeat>> {
    let rows = sqlx::query!(
        r#"SELECT worker, network_class, instance_id, hostname, pid, started_at, last_beat_at,
                last_tick_at, next_tick_at, extract(epoch FROM now() - last_beat_at)::float8 AS "age!"
         FROM worker_heartbeats ORDER BY worker, network_class, instance_id"#,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| WorkerBeat {
            worker: r.worker,
            network_class: r.network_class,
            instance_id: r.instance_id,
            hostname: r.hostname,
            pid: r.pid,
            started_at: r.started_at,
            last_beat_at: r.last_beat_at,
            age_seconds: r.age,
            stale: r.age > stale_after_seconds,
            last_tick_at: r.last_tick_at,
            next_tick_at: r.next_tick_at,
        })
        .collect())
}
