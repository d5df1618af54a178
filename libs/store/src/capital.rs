//! capital_transfer_requests (migration 0014): a treasury's request to move funds, the
//! movement it creates, and what capital_transfer_followup decides about it. Every change of
//! state is a compare-and-set on the state it was read in.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapitalTransfer {
    pub id: Uuid,
    pub requested_by: String,
    pub idempotency_key: String,
    #[serde(skip)]
    pub body_hash: String,
    pub source: String,
    pub destination: String,
    pub asset: String,
    /// Decimal string.
    pub amount: String,
    pub reason: String,
    pub template_key: String,
    pub template_version: Option<i32>,
    pub callback_url: Option<String>,
    /// PENDING → MOVEMENT_CREATED → COMPLETED | FAILED | NEEDS_ATTENTION.
    pub state: String,
    pub movement_id: Option<Uuid>,
    /// The movement's state now (absent before it exists).
    pub movement_state: Option<String>,
    /// Why it is closed or handed to a person.
    pub outcome: Option<String>,
    /// Once COMPLETED: what the movement's nodes recorded about the money under the venue's
    /// fee model — `fee_model`, `amount_applied`, `debit`, `fee_priced`, `fee_charged`,
    /// `expected_arrival`, `arrived` (those the lane reports).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub settlement: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
}

/// A new request (PENDING).
pub struct NewTransfer<'a> {
    pub requested_by: &'a str,
    pub idempotency_key: &'a str,
    pub body_hash: &'a str,
    pub source: &'a str,
    pub destination: &'a str,
    pub asset: &'a str,
    pub amount: &'a str,
    pub reason: &'a str,
    pub template_key: &'a str,
    pub template_version: Option<i32>,
    pub callback_url: Option<&'a str>,
}

/// `query_as!(CapitalTransfer, …)`: a transfer's columns `FROM capital_transfer_requests c`, then
/// `$tail` (a literal: sqlx joins it to the checked text) — one column list for every read.
macro_rules! transfers {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            CapitalTransfer,
            r#"SELECT c.id, c.requested_by, c.idempotency_key, c.body_hash, c.source, c.destination, c.asset,
                    c.amount::text AS "amount!", c.reason, c.template_key, c.template_version, c.callback_url, c.state,
                    c.movement_id,
                    (SELECT r.request_state FROM movement_requests r WHERE r.id = c.movement_id) AS "movement_state?",
                    c.outcome, c.settlement, c.created_at, c.updated_at, c.closed_at
               FROM capital_transfer_requests c "# + $tail
            $(, $arg)*
        )
    };
}

/// Inserts the request, or answers the one this principal made with the same idempotency key
/// (`false`).
pub async fn insert(conn: &mut PgConnection, t: &NewTransfer<'_>) -> Result<(CapitalTransfer, bool)> {
    let id: Option<Uuid> = sqlx::query_scalar!(
        "INSERT INTO capital_transfer_requests
             (id, requested_by, idempotency_key, body_hash, source, destination, asset, amount, reason,
              template_key, template_version, callback_url, state)
         VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, $7::text::numeric, $8, $9, $10, $11, 'PENDING')
         ON CONFLICT (requested_by, idempotency_key) DO NOTHING RETURNING id",
        t.requested_by,
        t.idempotency_key,
        t.body_hash,
        t.source,
        t.destination,
        t.asset,
        t.amount,
        t.reason,
        t.template_key,
        t.template_version,
        t.callback_url
    )
    .fetch_optional(&mut *conn)
    .await?;
    let fresh = id.is_some();
    let existing =
        transfers!(r#"WHERE c.requested_by = $1 AND c.idempotency_key = $2"#, t.requested_by, t.idempotency_key)
            .fetch_one(&mut *conn)
            .await?;
    Ok((existing, fresh))
}

pub async fn get(conn: &mut PgConnection, id: Uuid) -> Result<Option<CapitalTransfer>> {
    Ok(transfers!(r#"WHERE c.id = $1"#, id).fetch_optional(&mut *conn).await?)
}

/// Newest first, optionally in one state; `before` = the created_at/id cursor.
pub async fn list(
    conn: &mut PgConnection,
    state: Option<&str>,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<CapitalTransfer>> {
    Ok(transfers!(
        r#"
            WHERE ($1::text IS NULL OR c.state = $1) AND ($2::timestamptz IS NULL OR (c.created_at, c.id) < ($2, $3))
            ORDER BY c.created_at DESC, c.id DESC LIMIT $4"#,
        state,
        before.map(|b| b.0),
        before.map(|b| b.1),
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// What a completed movement's nodes recorded about the money (the CEX lane's refs: the fee
/// model, what was applied for and debited, the fee priced and charged, what was to arrive and
/// what did), stored on the request; each field from the first node (by node key) that reports
/// it; `None` when no node reports any of it.
pub async fn record_settlement(
    conn: &mut PgConnection,
    id: Uuid,
    movement_id: Uuid,
) -> Result<Option<serde_json::Value>> {
    let settlement: Option<serde_json::Value> = sqlx::query_scalar!(
        "WITH s AS (
           SELECT jsonb_strip_nulls(jsonb_build_object(
                    'fee_model', (array_agg(n.provider_refs->>'fee_model' ORDER BY n.node_key) FILTER (WHERE \
                        n.provider_refs ? 'fee_model'))[1],
                    'amount_applied', (array_agg(n.provider_refs->>'amount_applied' ORDER BY n.node_key) FILTER (WHERE \
                        n.provider_refs ? 'amount_applied'))[1],
                    'debit', (array_agg(n.provider_refs->>'debit' ORDER BY n.node_key) FILTER (WHERE \
                        n.provider_refs ? 'debit'))[1],
                    'fee_priced', (array_agg(n.provider_refs->>'withdrawal_fee' ORDER BY n.node_key) FILTER (WHERE \
                        n.provider_refs ? 'withdrawal_fee'))[1],
                    'fee_charged', (array_agg(n.provider_refs->>'withdrawal_fee_charged' ORDER BY n.node_key) FILTER \
                        (WHERE n.provider_refs ? 'withdrawal_fee_charged'))[1],
                    'expected_arrival', (array_agg(n.provider_refs->>'expected_arrival' ORDER BY n.node_key) FILTER \
                        (WHERE n.provider_refs ? 'expected_arrival'))[1],
                    'arrived', (array_agg(n.provider_refs->>'deposit_amount' ORDER BY n.node_key) FILTER (WHERE \
                        n.provider_refs ? 'deposit_amount'))[1])) AS v
             FROM movement_request_nodes n
            WHERE n.request_id = $2 AND n.node_state = 'COMPLETED')
         UPDATE capital_transfer_requests c SET settlement = s.v
           FROM s
          WHERE c.id = $1 AND s.v <> '{}'::jsonb
         RETURNING c.settlement AS \"settlement!\"",
        id,
        movement_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(settlement)
}

/// Moves the request from `from` to `to` (with its movement, outcome, and `closed_at` for a
/// closed state); `false` when it is no longer in `from`.
pub async fn set_state(
    conn: &mut PgConnection,
    id: Uuid,
    from: &str,
    to: &str,
    movement_id: Option<Uuid>,
    outcome: Option<&str>,
) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE capital_transfer_requests
            SET state = $3, movement_id = COALESCE($4, movement_id), outcome = COALESCE($5, outcome),
                updated_at = now(), closed_at = CASE WHEN $3 IN ('COMPLETED', 'FAILED') THEN now() END
          WHERE id = $1 AND state = $2",
        id,
        from,
        to,
        movement_id,
        outcome
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Looked at, nothing to do yet: not stale again before the threshold.
pub async fn touch(conn: &mut PgConnection, id: Uuid) -> Result<()> {
    sqlx::query!("UPDATE capital_transfer_requests SET updated_at = now() WHERE id = $1", id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Up to `limit` due requests, oldest first (not locked: each is locked on its own).
///
/// Which requests the follow-up takes (`$1` = the stale threshold): open ones untouched that
/// long, open ones whose movement finished or needs a person, and closed-FAILED ones whose
/// movement was retried to completion (the same condition as in [`lock_due`]).
pub async fn due(conn: &mut PgConnection, stale_seconds: f64, limit: i64) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!(
        "SELECT c.id FROM capital_transfer_requests c
          WHERE (c.state IN ('PENDING', 'MOVEMENT_CREATED', 'NEEDS_ATTENTION')
                 AND c.updated_at < now() - make_interval(secs => $1))
             OR EXISTS (SELECT 1 FROM movement_requests r WHERE r.id = c.movement_id AND (
                    (c.state IN ('MOVEMENT_CREATED', 'NEEDS_ATTENTION', 'FAILED') AND r.request_state = 'COMPLETED')
                 OR (c.state IN ('MOVEMENT_CREATED', 'NEEDS_ATTENTION') AND r.request_state IN ('FAILED', 'CANCELLED'))
                 OR (c.state = 'MOVEMENT_CREATED'
                     AND r.request_state IN ('EXPIRED', 'REJECTED', 'MANUAL_INTERVENTION'))))
          ORDER BY c.updated_at LIMIT $2",
        stale_seconds,
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Request `id`, locked, if it is still due (the condition of [`due`], `$1` = the stale
/// threshold) and no other replica holds it.
pub async fn lock_due(conn: &mut PgConnection, id: Uuid, stale_seconds: f64) -> Result<Option<CapitalTransfer>> {
    Ok(transfers!(
        r#"
            WHERE c.id = $2
              AND ((c.state IN ('PENDING', 'MOVEMENT_CREATED', 'NEEDS_ATTENTION')
                    AND c.updated_at < now() - make_interval(secs => $1))
                OR EXISTS (SELECT 1 FROM movement_requests r WHERE r.id = c.movement_id AND (
                       (c.state IN ('MOVEMENT_CREATED', 'NEEDS_ATTENTION', 'FAILED') AND r.request_state = 'COMPLETED')
                    OR (c.state IN ('MOVEMENT_CREATED', 'NEEDS_ATTENTION')
                        AND r.request_state IN ('FAILED', 'CANCELLED'))
                    OR (c.state = 'MOVEMENT_CREATED'
                        AND r.request_state IN ('EXPIRED', 'REJECTED', 'MANUAL_INTERVENTION')))))
              FOR UPDATE OF c SKIP LOCKED"#,
        stale_seconds,
        id
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Request `id`, locked (waiting), for an operator's decision.
pub async fn lock(conn: &mut PgConnection, id: Uuid) -> Result<Option<CapitalTransfer>> {
    Ok(transfers!(r#"WHERE c.id = $1 FOR UPDATE OF c"#, id).fetch_optional(&mut *conn).await?)
}
