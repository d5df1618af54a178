//! Policy versions and the address book (docs/architecture.md §15): every version kept with
//! its approvals; book entries proposed, decided by a second admin, usable after a cool-down.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyVersion {
    pub version: i32,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub document: Value,
    pub document_hash: String,
    pub description: Option<String>,
    /// pending, approved, rejected
    pub status: String,
    pub proposed_by: String,
    /// Approvals by admins other than the proposer it needs.
    pub approvals_required: i32,
    /// In force from (once approved; an approval after it moves it to the approval).
    pub effective_at: DateTime<Utc>,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub review_reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One admin's approval of a version.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyApproval {
    pub approver: String,
    pub reason: Option<String>,
    pub approved_at: DateTime<Utc>,
}

macro_rules! versions {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            PolicyVersion,
            r#"SELECT version, document, document_hash, description, status, proposed_by, approvals_required,
                   effective_at, decided_by, decided_at, review_reason, created_at
               FROM policy_versions "# + $tail
            $(, $arg)*
        )
    };
}

/// Whether the rules are governed: a policy version has been approved or an address-book
/// entry activated. From then on a new API key needs a second admin (docs/architecture.md
/// §15): one admin could otherwise mint a second identity and approve their own change.
pub async fn governed(conn: &mut PgConnection) -> Result<bool> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM policy_versions WHERE status = 'approved')
               OR EXISTS (SELECT 1 FROM address_book WHERE decided_by IS NOT NULL AND status IN ('active', 'removed'))
               AS "governed!""#
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// Adds a pending version, numbered after every other (numbers are never reused).
pub async fn insert_version(
    conn: &mut PgConnection,
    document: &Value,
    document_hash: &str,
    description: Option<&str>,
    proposed_by: &str,
    approvals_required: i32,
    effective_at: Option<DateTime<Utc>>,
) -> Result<PolicyVersion> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('qtg.policy_versions'))").execute(&mut *conn).await?;
    Ok(sqlx::query_as!(
        PolicyVersion,
        r#"INSERT INTO policy_versions (version, document, document_hash, description, proposed_by,
               approvals_required, effective_at)
           SELECT COALESCE(max(version), 0) + 1, $1, $2, $3, $4, $5, COALESCE($6, now()) FROM policy_versions
           RETURNING version, document, document_hash, description, status, proposed_by, approvals_required,
               effective_at, decided_by, decided_at, review_reason, created_at"#,
        document,
        document_hash,
        description,
        proposed_by,
        approvals_required,
        effective_at
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// A version; with `lock`, its row locked for a decision.
pub async fn get_version(conn: &mut PgConnection, version: i32, lock: bool) -> Result<Option<PolicyVersion>> {
    Ok(if lock {
        versions!("WHERE version = $1 FOR UPDATE", version).fetch_optional(&mut *conn).await?
    } else {
        versions!("WHERE version = $1", version).fetch_optional(&mut *conn).await?
    })
}

/// Versions newest first, before `before` (a version number), at most `limit`.
pub async fn list_versions(conn: &mut PgConnection, before: Option<i32>, limit: i64) -> Result<Vec<PolicyVersion>> {
    Ok(versions!("WHERE ($1::int IS NULL OR version < $1) ORDER BY version DESC LIMIT $2", before, limit)
        .fetch_all(&mut *conn)
        .await?)
}

/// The version in force at `at` (now when `None`): the newest approved version whose
/// `effective_at` has come (a newer version supersedes an older one, whatever their dates).
pub async fn in_force(conn: &mut PgConnection, at: Option<DateTime<Utc>>) -> Result<Option<PolicyVersion>> {
    Ok(versions!(
        "WHERE status = 'approved' AND effective_at <= COALESCE($1, now())
         ORDER BY version DESC LIMIT 1",
        at
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Records `approver`'s approval; `false` if they already approved.
pub async fn add_approval(conn: &mut PgConnection, version: i32, approver: &str, reason: Option<&str>) -> Result<bool> {
    let done = sqlx::query!(
        "INSERT INTO policy_approvals (version, approver, reason) VALUES ($1, $2, $3)
         ON CONFLICT (version, approver) DO NOTHING",
        version,
        approver,
        reason
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn approvals(conn: &mut PgConnection, version: i32) -> Result<Vec<PolicyApproval>> {
    Ok(sqlx::query_as!(
        PolicyApproval,
        "SELECT approver, reason, approved_at FROM policy_approvals WHERE version = $1 ORDER BY approved_at, approver",
        version
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Ends a pending version: `approved` (in force from its effective_at, or now if that has
/// passed) or `rejected`.
pub async fn decide_version(
    conn: &mut PgConnection,
    version: i32,
    approved: bool,
    decided_by: &str,
    reason: Option<&str>,
) -> Result<PolicyVersion> {
    Ok(sqlx::query_as!(
        PolicyVersion,
        r#"UPDATE policy_versions
              SET status = CASE WHEN $2 THEN 'approved' ELSE 'rejected' END, decided_by = $3, decided_at = now(),
                  review_reason = $4, effective_at = CASE WHEN $2 THEN GREATEST(effective_at,
                      now()) ELSE effective_at END
            WHERE version = $1 AND status = 'pending'
        RETURNING version, document, document_hash, description, status, proposed_by, approvals_required,
                  effective_at, decided_by, decided_at, review_reason, created_at"#,
        version,
        approved,
        decided_by,
        reason
    )
    .fetch_one(&mut *conn)
    .await?)
}

// ---- the address book ------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BookEntry {
    pub id: Uuid,
    pub name: String,
    pub lane: String,
    /// Empty: any network of the lane.
    pub network: String,
    pub address: String,
    /// The memo or tag beside the address (empty: none).
    pub memo: String,
    pub tags: Vec<String>,
    /// pending, active, rejected, removed
    pub status: String,
    pub proposed_by: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub cool_down_seconds: f64,
    /// From when an active entry may be used (its activation plus the cool-down).
    pub usable_at: Option<DateTime<Utc>>,
    /// The entry this one changes (it is removed when this one is activated).
    pub replaces: Option<Uuid>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Active and past its cool-down.
    pub usable: bool,
}

macro_rules! entries {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            BookEntry,
            r#"SELECT id, name, lane, network, address, memo, tags, status, proposed_by, decided_by, decided_at,
                   cool_down_seconds, usable_at, replaces, reason, created_at,
                   (status = 'active' AND usable_at <= now()) AS "usable!"
               FROM address_book "# + $tail
            $(, $arg)*
        )
    };
}

/// A proposed entry (pending), or a change of entry `replaces`.
pub struct NewEntry<'a> {
    pub name: &'a str,
    pub lane: &'a str,
    pub network: &'a str,
    pub address: &'a str,
    pub memo: &'a str,
    pub tags: &'a [String],
    pub proposed_by: &'a str,
    pub cool_down_seconds: f64,
    pub replaces: Option<Uuid>,
    pub reason: Option<&'a str>,
}

pub async fn insert_entry(conn: &mut PgConnection, e: &NewEntry<'_>) -> Result<BookEntry> {
    let id = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO address_book (id, name, lane, network, address, memo, tags, proposed_by, cool_down_seconds,
             replaces, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        id,
        e.name,
        e.lane,
        e.network,
        e.address,
        e.memo,
        e.tags,
        e.proposed_by,
        e.cool_down_seconds,
        e.replaces,
        e.reason
    )
    .execute(&mut *conn)
    .await?;
    Ok(entries!("WHERE id = $1", id).fetch_one(&mut *conn).await?)
}

pub async fn get_entry(conn: &mut PgConnection, id: Uuid, lock: bool) -> Result<Option<BookEntry>> {
    Ok(if lock {
        entries!("WHERE id = $1 FOR UPDATE", id).fetch_optional(&mut *conn).await?
    } else {
        entries!("WHERE id = $1", id).fetch_optional(&mut *conn).await?
    })
}

/// Entries by status (all when `None`), by name.
pub async fn list_entries(conn: &mut PgConnection, status: Option<&str>, limit: i64) -> Result<Vec<BookEntry>> {
    Ok(entries!("WHERE ($1::text IS NULL OR status = $1) ORDER BY lower(name), created_at LIMIT $2", status, limit)
        .fetch_all(&mut *conn)
        .await?)
}

/// Activates (usable after its cool-down; the entry it replaces removed) or rejects a pending
/// entry.
pub async fn decide_entry(conn: &mut PgConnection, id: Uuid, approve: bool, decided_by: &str) -> Result<BookEntry> {
    if approve {
        sqlx::query!(
            "UPDATE address_book SET status = 'removed'
              WHERE id = (SELECT replaces FROM address_book WHERE id = $1) AND status = 'active'",
            id
        )
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query!(
        "UPDATE address_book
            SET status = CASE WHEN $2 THEN 'active' ELSE 'rejected' END, decided_by = $3, decided_at = now(),
                usable_at = CASE WHEN $2 THEN now() + make_interval(secs => cool_down_seconds) END
          WHERE id = $1 AND status = 'pending'",
        id,
        approve,
        decided_by
    )
    .execute(&mut *conn)
    .await?;
    Ok(entries!("WHERE id = $1", id).fetch_one(&mut *conn).await?)
}

/// Removes an active entry (a change of its own: decided by the caller's four-eyes rule).
pub async fn remove_entry(conn: &mut PgConnection, id: Uuid) -> Result<bool> {
    let done = sqlx::query!("UPDATE address_book SET status = 'removed' WHERE id = $1 AND status = 'active'", id)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The active entries for `address` (any case) past their cool-down, by name: the caller
/// keeps those whose lane, network and memo match (`qtg_core::policy::Payee::matches`). An
/// entry still cooling down is not among them (it may not be used yet).
pub async fn usable_entries(conn: &mut PgConnection, address: &str) -> Result<Vec<BookEntry>> {
    Ok(entries!(
        "WHERE status = 'active' AND lower(address) = lower($1) AND usable_at <= now() ORDER BY lower(name)",
        address
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// The active entries for these addresses (any case), usable or not: what the console shows
/// beside a raw address.
pub async fn names_of(conn: &mut PgConnection, addresses: &[String]) -> Result<Vec<BookEntry>> {
    let lower: Vec<String> = addresses.iter().map(|a| a.to_lowercase()).collect();
    Ok(entries!("WHERE status = 'active' AND lower(address) = ANY($1) ORDER BY lower(name)", &lower)
        .fetch_all(&mut *conn)
        .await?)
}
