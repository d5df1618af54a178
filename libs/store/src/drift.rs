//! verify_drift's tables (migration 0013): the baseline of on-chain facts per scope, the last
//! check per scope, and the alert a new set of differences raises (an audit row and a
//! `drift_detected` callback with no movement).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::PgConnection;

use crate::Result;

/// The last check of one scope.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Check {
    pub scope: String,
    /// `ok`, `drift`, `unbaselined` (nothing recorded yet) or `error`.
    pub status: String,
    pub checked_at: DateTime<Utc>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub observed: Value,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub differences: Value,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub executor_keys: Value,
    pub error: Option<String>,
    pub alerted_at: Option<DateTime<Utc>>,
    /// Facts in the baseline.
    pub baseline_facts: i64,
}

/// The baseline of `scope`: fact → value.
pub async fn baseline(conn: &mut PgConnection, scope: &str) -> Result<BTreeMap<String, String>> {
    let rows =
        sqlx::query!("SELECT fact, value FROM drift_baselines WHERE scope = $1", scope).fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(|r| (r.fact, r.value)).collect())
}

/// Replaces the baseline of `scope` with `facts`.
pub async fn set_baseline(
    conn: &mut PgConnection,
    scope: &str,
    facts: &BTreeMap<String, String>,
    actor: &str,
) -> Result<()> {
    sqlx::query!("DELETE FROM drift_baselines WHERE scope = $1", scope).execute(&mut *conn).await?;
    let (keys, values): (Vec<&str>, Vec<&str>) = facts.iter().map(|(k, v)| (k.as_str(), v.as_str())).unzip();
    sqlx::query!(
        "INSERT INTO drift_baselines (scope, fact, value, recorded_by)
         SELECT $1, f, v, $4 FROM unnest($2::text[], $3::text[]) AS t(f, v)",
        scope,
        &keys[..] as &[&str],
        &values[..] as &[&str],
        actor,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The database's clock.
pub async fn now(conn: &mut PgConnection) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar!(r#"SELECT now() AS "now!""#).fetch_one(&mut *conn).await?)
}

/// The last check of `scope`, locked (`FOR UPDATE`), if the scope was ever checked.
pub async fn lock_existing(conn: &mut PgConnection, scope: &str) -> Result<Option<Check>> {
    Ok(sqlx::query_as!(
        Check,
        r#"SELECT c.scope, c.status, c.checked_at, c.observed, c.differences, c.executor_keys, c.error, c.alerted_at,
                  (SELECT count(*) FROM drift_baselines b WHERE b.scope = c.scope) AS "baseline_facts!"
           FROM drift_checks c WHERE c.scope = $1 FOR UPDATE OF c"#,
        scope,
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// The last check of `scope`, locked (`FOR UPDATE`); a scope seen the first time gets its
/// row (checked "never": 1970).
pub async fn lock_check(conn: &mut PgConnection, scope: &str) -> Result<Option<Check>> {
    sqlx::query!(
        "INSERT INTO drift_checks (scope, status, checked_at) VALUES ($1, 'unbaselined', to_timestamp(0))
         ON CONFLICT (scope) DO NOTHING",
        scope,
    )
    .execute(&mut *conn)
    .await?;
    lock_existing(conn, scope).await
}

/// What one check of a scope found.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub scope: &'a str,
    pub status: &'a str,
    pub observed: Value,
    pub differences: Value,
    pub executor_keys: Vec<String>,
    pub error: Option<String>,
    /// Set `alerted_at` to now (an alert goes out with this check).
    pub alerted: bool,
}

pub async fn record_check(conn: &mut PgConnection, o: &Observation<'_>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO drift_checks (scope, status, checked_at, observed, differences, executor_keys, error, alerted_at)
         VALUES ($1, $2, now(), $3, $4, $5, $6, CASE WHEN $7 THEN now() END)
         ON CONFLICT (scope) DO UPDATE SET status = EXCLUDED.status, checked_at = now(),
             observed = EXCLUDED.observed, differences = EXCLUDED.differences,
             executor_keys = EXCLUDED.executor_keys, error = EXCLUDED.error,
             alerted_at = CASE WHEN $7 THEN now() WHEN EXCLUDED.status = 'drift' THEN drift_checks.alerted_at END",
        o.scope,
        o.status,
        o.observed,
        o.differences,
        json!(o.executor_keys),
        o.error,
        o.alerted,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// An executor whose facts were read again: its `executor:<key>` error row, if any, is over.
pub async fn clear_error(conn: &mut PgConnection, scope: &str) -> Result<()> {
    sqlx::query!(
        "UPDATE drift_checks SET status = 'ok', error = NULL, checked_at = now() WHERE scope = $1 AND status = 'error'",
        scope,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Every scope's last check, by scope.
pub async fn list(conn: &mut PgConnection) -> Result<Vec<Check>> {
    Ok(sqlx::query_as!(
        Check,
        r#"SELECT c.scope, c.status, c.checked_at, c.observed, c.differences, c.executor_keys, c.error, c.alerted_at,
                  (SELECT count(*) FROM drift_baselines b WHERE b.scope = c.scope) AS "baseline_facts!"
           FROM drift_checks c ORDER BY c.scope"#,
    )
    .fetch_all(&mut *conn)
    .await?)
}
