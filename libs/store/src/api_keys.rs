//! API keys, stored only as sha256 hashes.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{Result, StoreError};

#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: Uuid,
    pub principal: String,
    pub roles: Vec<String>,
}

/// The live (not revoked, not expired) key with this hash.
pub async fn find_by_hash(pool: &PgPool, key_hash: &str) -> Result<Option<ApiKey>> {
    Ok(sqlx::query_as!(
        ApiKey,
        "SELECT id, principal, roles FROM api_keys
         WHERE key_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())",
        key_hash,
    )
    .fetch_optional(pool)
    .await?)
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
/// Whether a key with this hash is registered (revoked or not).
pub async fn hash_known(conn: &mut PgConnection, key_hash: &str) -> Result<bool> {
    Ok(sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM api_keys WHERE key_hash = $1) AS "known!""#, key_hash)
        .fetch_one(&mut *conn)
        .await?)
}

pub async fn insert(conn: &mut PgConnection, key: &NewKey<'_>) -> Result<bool> {
    let res = sqlx::query!(
        "INSERT INTO api_keys (id, principal, roles, key_hash, created_by, expires_at, bootstrap)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7)
         ON CONFLICT (key_hash) DO NOTHING",
        key.id,
        key.principal,
        key.roles,
        key.key_hash,
        key.created_by,
        key.ttl_seconds,
        key.bootstrap,
    )
    .execute(&mut *conn)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Every principal that holds a key or has one requested, live or not (a revoked key's
/// principal is still in the audit trail). Serialised against a concurrent creation by a
/// transaction-scoped advisory lock, so two lookalikes cannot be minted at once.
pub async fn principals_locked(conn: &mut PgConnection) -> Result<Vec<String>> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('qtg.api_keys.principals'))").fetch_one(&mut *conn).await?;
    Ok(sqlx::query_scalar!(
        r#"SELECT principal AS "principal!" FROM api_keys
           UNION SELECT principal FROM api_key_requests WHERE status <> 'rejected'"#,
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Revokes a key; `false` if there is no live key with this id.
pub async fn revoke(conn: &mut PgConnection, id: Uuid) -> Result<bool> {
    let res = sqlx::query!("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", id)
        .execute(&mut *conn)
        .await?;
    Ok(res.rows_affected() == 1)
}

/// A key as an admin lists it: never the hash.
#[derive(Debug, Clone, serde::Serialize)]
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
    Ok(sqlx::query_as!(
        ApiKeyInfo,
        "SELECT id, principal, roles, created_by, created_at, revoked_at, expires_at, bootstrap FROM api_keys
         WHERE ($1::timestamptz IS NULL OR (created_at, id) < ($1, $2))
         ORDER BY created_at DESC, id DESC LIMIT $3",
        at,
        id,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// A request for a key awaiting a second admin (`MG_API_KEY_CREATION_APPROVALS=2`).
#[derive(Debug, Clone, serde::Serialize)]
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

pub async fn insert_request(
    conn: &mut PgConnection,
    id: Uuid,
    principal: &str,
    roles: &[String],
    requested_by: &str,
) -> Result<KeyRequest> {
    Ok(sqlx::query_as!(
        KeyRequest,
        "INSERT INTO api_key_requests (id, principal, roles, requested_by) VALUES ($1, $2, $3, $4)
         RETURNING id, principal, roles, requested_by, status, decided_by, key_id, created_at",
        id,
        principal,
        roles,
        requested_by,
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// Key requests newest first, by status, after the `(created_at, id)` cursor.
pub async fn list_requests(
    conn: &mut PgConnection,
    status: Option<&str>,
    after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<KeyRequest>> {
    let (at, aid) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    Ok(sqlx::query_as!(
        KeyRequest,
        "SELECT id, principal, roles, requested_by, status, decided_by, key_id, created_at FROM api_key_requests
         WHERE ($1::text IS NULL OR status = $1) AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3))
         ORDER BY created_at DESC, id DESC LIMIT $4",
        status,
        at,
        aid,
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// The request `id`, locked for its decision.
pub async fn request_for_update(conn: &mut PgConnection, id: Uuid) -> Result<Option<KeyRequest>> {
    Ok(sqlx::query_as!(
        KeyRequest,
        "SELECT id, principal, roles, requested_by, status, decided_by, key_id, created_at FROM api_key_requests
         WHERE id = $1 FOR UPDATE",
        id,
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Records the decision on a pending request.
pub async fn decide_request(
    conn: &mut PgConnection,
    id: Uuid,
    status: &str,
    decided_by: &str,
    key_id: Option<Uuid>,
) -> Result<KeyRequest> {
    sqlx::query_as!(
        KeyRequest,
        "UPDATE api_key_requests SET status = $2, decided_by = $3, key_id = $4, decided_at = now()
         WHERE id = $1 AND status = 'pending'
         RETURNING id, principal, roles, requested_by, status, decided_by, key_id, created_at",
        id,
        status,
        decided_by,
        key_id,
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| StoreError::StaleState {
        entity: "api key request",
        id: id.to_string(),
        expected: "pending".into(),
    })
}
