//! The CEX lane's key store (docs/architecture.md §9.4): the fence of a venue with a deadline.
//! Every withdrawal key is recorded here (insert-if-absent, in the database every replica of
//! the lane shares) before the lane's first venue call for it; a key that is void, older
//! than an attempt already seen for its node, or late is refused without a venue call; a
//! key is `sent` only once the request was signed, and recovery voids a key it finds absent
//! — atomically against a submit that is about to send it.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// One key as the store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitKey {
    pub idempotency_key: String,
    pub venue: String,
    pub request_node_id: Uuid,
    pub attempt_no: i32,
    pub submit_by: Option<DateTime<Utc>>,
    pub status: KeyStatus,
    /// The venue's time the withdraw request was signed with.
    pub venue_time: Option<DateTime<Utc>>,
    pub recv_window_ms: Option<i32>,
    pub void_reason: Option<String>,
    /// The withdraw request as it may have reached the venue (set when the key is marked sent).
    pub request: Option<serde_json::Value>,
    /// The nonce the request was signed with (a venue fenced by nonce).
    pub nonce: Option<i64>,
    /// When a call with a nonce above it was accepted: the request can no longer act.
    pub fenced_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    Recorded,
    Sent,
    Void,
}

/// `cex_submit_keys.status` as the store reads it.
impl TryFrom<String> for KeyStatus {
    type Error = crate::StoreError;
    fn try_from(s: String) -> Result<KeyStatus> {
        match s.as_str() {
            "recorded" => Ok(KeyStatus::Recorded),
            "sent" => Ok(KeyStatus::Sent),
            "void" => Ok(KeyStatus::Void),
            other => Err(crate::StoreError::corrupt(format!("cex_submit_keys.status {other:?}"))),
        }
    }
}

/// What recording a key before the first venue call decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// New, or recorded before and never sent: the lane may read the venue's time and send.
    Fresh,
    /// This key was sent before (a repeated submit): the lane looks it up, it never re-sends.
    AlreadySent(SubmitKey),
    /// Refused without a venue call: the key is void.
    Void(Option<String>),
    /// Refused without a venue call: a newer attempt of this node was already seen.
    Superseded { newest: i32 },
    /// Refused without a venue call: the database's clock is past `submit_by`; the key is
    /// now void.
    Late,
}

/// A [`SubmitKey`] from the record of a query that reads a key's columns, its status parsed (a
/// status the store does not know is corrupt data).
macro_rules! submit_key {
    ($r:expr) => {{
        let r = $r;
        crate::rows::column::<KeyStatus>("status", r.status).map(|status| SubmitKey {
            idempotency_key: r.idempotency_key,
            venue: r.venue,
            request_node_id: r.request_node_id,
            attempt_no: r.attempt_no,
            submit_by: r.submit_by,
            status,
            venue_time: r.venue_time,
            recv_window_ms: r.recv_window_ms,
            void_reason: r.void_reason,
            request: r.request,
            nonce: r.nonce,
            fenced_at: r.fenced_at,
        })
    }};
}

/// Serialises the key store's decisions for one node (its attempts share one lock).
async fn lock_node(tx: &mut sqlx::PgConnection, node: Uuid) -> Result<()> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text, 13))", node).execute(&mut *tx).await?;
    Ok(())
}

/// The fence's checks and the key recorded, in one short transaction, before any venue call.
pub async fn record(
    pool: &PgPool,
    idempotency_key: &str,
    venue: &str,
    node: Uuid,
    attempt_no: i32,
    submit_by: DateTime<Utc>,
) -> Result<Recorded> {
    let mut tx = pool.begin().await?;
    lock_node(&mut tx, node).await?;
    let existing = sqlx::query!(
        "SELECT idempotency_key, venue, request_node_id, attempt_no, submit_by, status, venue_time, recv_window_ms,
                void_reason, request, nonce, fenced_at
           FROM cex_submit_keys WHERE idempotency_key = $1",
        idempotency_key
    )
    .fetch_optional(&mut *tx)
    .await?
    .map(|r| submit_key!(r))
    .transpose()?;
    let newest: Option<i32> =
        sqlx::query_scalar!("SELECT max(attempt_no) FROM cex_submit_keys WHERE request_node_id = $1", node)
            .fetch_one(&mut *tx)
            .await?;
    let late: bool =
        sqlx::query_scalar!(r#"SELECT clock_timestamp() > $1 AS "late!""#, submit_by).fetch_one(&mut *tx).await?;
    let outcome = match existing {
        Some(k) if k.status == KeyStatus::Void => Recorded::Void(k.void_reason),
        Some(k) if k.status == KeyStatus::Sent => Recorded::AlreadySent(k),
        _ if newest.is_some_and(|n| n > attempt_no) => Recorded::Superseded { newest: newest.unwrap_or(attempt_no) },
        _ if late => {
            upsert_void(&mut tx, idempotency_key, venue, node, attempt_no, "received after submit_by").await?;
            Recorded::Late
        }
        Some(_) => Recorded::Fresh,
        None => {
            sqlx::query!(
                "INSERT INTO cex_submit_keys (idempotency_key, venue, request_node_id, attempt_no, submit_by, status)
                 VALUES ($1, $2, $3, $4, $5, 'recorded')",
                idempotency_key,
                venue,
                node,
                attempt_no,
                submit_by
            )
            .execute(&mut *tx)
            .await?;
            Recorded::Fresh
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

async fn upsert_void(
    conn: &mut sqlx::PgConnection,
    idempotency_key: &str,
    venue: &str,
    node: Uuid,
    attempt_no: i32,
    reason: &str,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO cex_submit_keys (idempotency_key, venue, request_node_id, attempt_no, status, void_reason)
         VALUES ($1, $2, $3, $4, 'void', $5)
         ON CONFLICT (idempotency_key) DO UPDATE SET status = 'void', void_reason = $5, updated_at = now()",
        idempotency_key,
        venue,
        node,
        attempt_no,
        reason
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `recorded` → `sent`, before the venue's time is read for the request: from here on a
/// request with this key may reach the venue (until its `recvWindow`, at most `submit_by`).
/// `request` is what may reach the venue, kept for recovery to match the venue's history against.
/// `false`: the key was voided meanwhile (recovery concluded it absent): nothing may be sent.
pub async fn mark_sent(pool: &PgPool, idempotency_key: &str, request: &serde_json::Value) -> Result<bool> {
    let moved = sqlx::query!(
        "UPDATE cex_submit_keys SET status = 'sent', request = $2, updated_at = now()
          WHERE idempotency_key = $1 AND status = 'recorded'",
        idempotency_key,
        request
    )
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Notes the venue's time T and the `recvWindow` the request is signed with (evidence).
pub async fn note_signature(
    pool: &PgPool,
    idempotency_key: &str,
    venue_time: DateTime<Utc>,
    recv_window_ms: i32,
) -> Result<()> {
    sqlx::query!(
        "UPDATE cex_submit_keys SET venue_time = $2, recv_window_ms = $3, updated_at = now() WHERE \
         idempotency_key = $1",
        idempotency_key,
        venue_time,
        recv_window_ms
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A venue fenced by nonce: notes the venue's time and the nonce the request is about to be
/// signed with — only while recovery has not asked for the fence. `false`: it has; nothing may
/// be signed with this key.
pub async fn note_nonce(pool: &PgPool, idempotency_key: &str, venue_time: DateTime<Utc>, nonce: i64) -> Result<bool> {
    let noted = sqlx::query!(
        "UPDATE cex_submit_keys SET venue_time = $2, nonce = $3, updated_at = now()
          WHERE idempotency_key = $1 AND status = 'sent' AND fence_requested_at IS NULL",
        idempotency_key,
        venue_time,
        nonce
    )
    .execute(pool)
    .await?;
    Ok(noted.rows_affected() == 1)
}

/// Recovery asks for the fence of a `sent` key: from here on no request is signed with it
/// ([`note_nonce`] refuses). Answers the key as it is now — with the nonce its request was
/// signed with, if it got that far.
pub async fn request_fence(pool: &PgPool, idempotency_key: &str) -> Result<Option<SubmitKey>> {
    sqlx::query!(
        "UPDATE cex_submit_keys SET fence_requested_at = COALESCE(fence_requested_at, now()), updated_at = now()
          WHERE idempotency_key = $1 AND status = 'sent'
         RETURNING idempotency_key, venue, request_node_id, attempt_no, submit_by, status, venue_time, recv_window_ms,
                   void_reason, request, nonce, fenced_at",
        idempotency_key
    )
    .fetch_optional(pool)
    .await?
    .map(|r| submit_key!(r))
    .transpose()
}

/// The venue accepted a call with a nonce above the key's at `at` (the venue's time).
pub async fn note_fenced(pool: &PgPool, idempotency_key: &str, at: DateTime<Utc>) -> Result<()> {
    sqlx::query!(
        "UPDATE cex_submit_keys SET fenced_at = COALESCE(fenced_at, $2), updated_at = now() WHERE idempotency_key = $1",
        idempotency_key,
        at
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Voids a key that can no longer reach the venue (the venue refused it, or the venue's time
/// was too close to `submit_by` to send it).
pub async fn void(
    pool: &PgPool,
    idempotency_key: &str,
    venue: &str,
    node: Uuid,
    attempt_no: i32,
    reason: &str,
) -> Result<()> {
    let mut conn = pool.acquire().await?;
    upsert_void(&mut conn, idempotency_key, venue, node, attempt_no, reason).await
}

/// Recovery found the key absent at the venue. A key never sent (absent or `recorded`) is
/// voided at once — a submit about to send it then finds it void — and `None` is answered;
/// a key already `sent` is left alone and returned: its absence is conclusive only once the
/// venue's time is past its `submit_by` (and margins), which the lane decides.
pub async fn void_unsent(
    pool: &PgPool,
    idempotency_key: &str,
    venue: &str,
    node: Uuid,
    attempt_no: i32,
    reason: &str,
) -> Result<Option<SubmitKey>> {
    // One statement: a key a submit marks sent meanwhile is never voided here (the conflict
    // update re-checks the row's current status).
    let voided = sqlx::query_scalar!(
        "INSERT INTO cex_submit_keys (idempotency_key, venue, request_node_id, attempt_no, status, void_reason)
         VALUES ($1, $2, $3, $4, 'void', $5)
         ON CONFLICT (idempotency_key) DO UPDATE SET status = 'void', void_reason = $5, updated_at = now()
          WHERE cex_submit_keys.status <> 'sent'
         RETURNING status",
        idempotency_key,
        venue,
        node,
        attempt_no,
        reason
    )
    .fetch_optional(pool)
    .await?;
    if voided.is_some() {
        return Ok(None);
    }
    let sent = get(pool, idempotency_key).await?;
    Ok(sent.filter(|k| k.status == KeyStatus::Sent))
}

/// `sent` → `void`: the venue's time is past the key's deadline and its history has no such
/// withdrawal. `false` if the key was not `sent`.
pub async fn void_sent(pool: &PgPool, idempotency_key: &str, reason: &str) -> Result<bool> {
    let moved = sqlx::query!(
        "UPDATE cex_submit_keys SET status = 'void', void_reason = $2, updated_at = now()
          WHERE idempotency_key = $1 AND status = 'sent'",
        idempotency_key,
        reason
    )
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// The key, if the store has it.
pub async fn get(pool: &PgPool, idempotency_key: &str) -> Result<Option<SubmitKey>> {
    sqlx::query!(
        "SELECT idempotency_key, venue, request_node_id, attempt_no, submit_by, status, venue_time, recv_window_ms,
                void_reason, request, nonce, fenced_at
           FROM cex_submit_keys WHERE idempotency_key = $1",
        idempotency_key
    )
    .fetch_optional(pool)
    .await?
    .map(|r| submit_key!(r))
    .transpose()
}
