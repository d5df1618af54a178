//! API keys, stored only as sha256 hashes.

use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: Uuid,
    pub principal: String,
    pub roles: Vec<String>,
}

/// The live (not revoked, not expired) key with this hash.
pub async fn find_by_hash(pool: &PgPool, key_hash: &str) -> Result<Option<ApiKey>> {
    let row = sqlx::query(
        "SELECT id, principal, roles FROM api_keys
         WHERE key_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())",
    )
    .bind(key_hash)
    .fetch_optional(pool)
    .await?;
    row.map(|r| Ok(ApiKey { id: r.try_get("id")?, principal: r.try_get("principal")?, roles: r.try_get("roles")? }))
        .transpose()
}

/// A key to insert.
#[derive(Debug, Clone)]
pub struct NewKey<'a> {
    pub id: Uuid,
    pub principal: &'a str,
    pub roles: &'a [String],
    pub key_hash: &'a str,
    pub created_by: Option<&'a str>,
    /// Seconds from now until the key stops working; `None` = no expiry.
    pub ttl_seconds: Option<f64>,
    pub bootstrap: bool,
}

/// Inserts a key; `false` if a key with this hash already exists.
pub async fn insert(conn: &mut PgConnection, key: &NewKey<'_>) -> Result<bool> {
    let res = sqlx::query(
        "INSERT INTO api_keys (id, principal, roles, key_hash, created_by, expires_at, bootstrap)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7)
         ON CONFLICT (key_hash) DO NOTHING",
    )
    .bind(key.id)
    .bind(key.principal)
    .bind(key.roles)
    .bind(key.key_hash)
    .bind(key.created_by)
    .bind(key.ttl_seconds)
    .bind(key.bootstrap)
    .execute(&mut *conn)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Every principal that holds a key or has one requested, live or not (a revoked key's
/// principal is still in the audit trail). Serialised against a concurrent creation by a
/// transaction-scoped advisory lock, so two lookalikes cannot be minted at once.
pub async fn principals_locked(conn: &mut PgConnection) -> Result<Vec<String>> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('qtg.api_keys.principals'))").execute(&mut *conn).await?;
    Ok(sqlx::query_scalar(
        "SELECT principal FROM api_keys UNION SELECT principal FROM api_key_requests WHERE status <> 'rejected'",
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Revokes a key; `false` if there is no live key with this id.
pub async fn revoke(conn: &mut PgConnection, id: Uuid) -> Result<bool> {
    let res = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(res.rows_affected() == 1)
}

/// A key as an admin lists it: never the hash.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiKeyInfo {
    pub id: Uuid,
    pub principal: String,
    pub roles: Vec<String>,
    pub created_by: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it stops working, if it expires.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The one-time bootstrap admin key of `MG_API_BOOTSTRAP_ADMIN_KEY`.
    pub bootstrap: bool,
}

/// Keys newest first after the `(created_at, id)` cursor.
pub async fn list(
    conn: &mut PgConnection,
    after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<ApiKeyInfo>> {
    let (at, id) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    let rows = sqlx::query(
        "SELECT id, principal, roles, created_by, created_at, revoked_at, expires_at, bootstrap FROM api_keys
         WHERE ($1::timestamptz IS NULL OR (created_at, id) < ($1, $2))
         ORDER BY created_at DESC, id DESC LIMIT $3",
    )
    .bind(at)
    .bind(id)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(|r| Ok(<ApiKeyInfo as sqlx::FromRow<'_, sqlx::postgres::PgRow>>::from_row(r)?)).collect()
}

/// A request for a key awaiting a second admin (`MG_API_KEY_CREATION_APPROVALS=2`).
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyRequest {
    pub id: Uuid,
    pub principal: String,
    pub roles: Vec<String>,
    pub requested_by: String,
    /// pending, approved, rejected
    pub status: String,
    pub decided_by: Option<String>,
    pub key_id: Option<Uuid>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

fn key_request(r: &sqlx::postgres::PgRow) -> Result<KeyRequest> {
    Ok(<KeyRequest as sqlx::FromRow<'_, sqlx::postgres::PgRow>>::from_row(r)?)
}

const KEY_REQUEST_COLUMNS: &str = "id, principal, roles, requested_by, status, decided_by, key_id, created_at";

pub async fn insert_request(
    conn: &mut PgConnection,
    id: Uuid,
    principal: &str,
    roles: &[String],
    requested_by: &str,
) -> Result<KeyRequest> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO api_key_requests (id, principal, roles, requested_by) VALUES ($1, $2, $3, $4)
         RETURNING {KEY_REQUEST_COLUMNS}"
    )))
    .bind(id)
    .bind(principal)
    .bind(roles)
    .bind(requested_by)
    .fetch_one(&mut *conn)
    .await?;
    key_request(&row)
}

/// The request `id`, locked for its decision.
pub async fn request_for_update(conn: &mut PgConnection, id: Uuid) -> Result<Option<KeyRequest>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {KEY_REQUEST_COLUMNS} FROM api_key_requests WHERE id = $1 FOR UPDATE"
    )))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(key_request).transpose()
}

/// Records the decision on a pending request.
pub async fn decide_request(
    conn: &mut PgConnection,
    id: Uuid,
    status: &str,
    decided_by: &str,
    key_id: Option<Uuid>,
) -> Result<KeyRequest> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE api_key_requests SET status = $2, decided_by = $3, key_id = $4, decided_at = now()
         WHERE id = $1 AND status = 'pending' RETURNING {KEY_REQUEST_COLUMNS}"
    )))
    .bind(id)
    .bind(status)
    .bind(decided_by)
    .bind(key_id)
    .fetch_one(&mut *conn)
    .await?;
    key_request(&row)
}
