//! The callback outbox: pickup, delivery outcomes (sent / retry with backoff / dlq), replay
//! of dead letters and the operator's list. Rows are never deleted.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackRow {
    pub id: Uuid,
    /// The movement, or none for an alert about no movement (`drift_detected`).
    pub request_id: Option<Uuid>,
    pub event_id: Uuid,
    pub event_type: String,
    pub sequence: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payload: Value,
    pub callback_url: String,
    pub status: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub callback_timestamp: i64,
    pub callback_nonce: String,
    pub replay_of: Option<Uuid>,
    pub sent_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// W3C trace context of the step that produced the event (sent as `traceparent`).
    pub traceparent: Option<String>,
    /// The movement's own signing secret, if it has one (never serialized).
    #[serde(skip)]
    pub movement_secret: Option<String>,
}

const COLUMNS: &str = "id, request_id, event_id, event_type, sequence, payload, callback_url, status, attempts,
    max_attempts, next_attempt_at, last_error, callback_timestamp, callback_nonce, replay_of, sent_at, created_at,
    traceparent, (SELECT r.callback_secret FROM movement_requests r WHERE r.id = request_id) AS movement_secret";

fn from_row(r: &sqlx::postgres::PgRow) -> Result<CallbackRow> {
    Ok(CallbackRow {
        id: r.try_get("id")?,
        request_id: r.try_get("request_id")?,
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        sequence: r.try_get("sequence")?,
        payload: r.try_get("payload")?,
        callback_url: r.try_get("callback_url")?,
        status: r.try_get("status")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        next_attempt_at: r.try_get("next_attempt_at")?,
        last_error: r.try_get("last_error")?,
        callback_timestamp: r.try_get("callback_timestamp")?,
        callback_nonce: r.try_get("callback_nonce")?,
        replay_of: r.try_get("replay_of")?,
        sent_at: r.try_get("sent_at")?,
        created_at: r.try_get("created_at")?,
        traceparent: r.try_get("traceparent")?,
        movement_secret: r.try_get("movement_secret")?,
    })
}

/// Locks up to `limit` due pending rows, oldest first (seed: 5 per pass).
pub async fn pickup(conn: &mut PgConnection, limit: i64) -> Result<Vec<CallbackRow>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM movement_callback_outbox
         WHERE status = 'pending' AND next_attempt_at <= now()
         ORDER BY created_at, id LIMIT $1 FOR UPDATE SKIP LOCKED"
    )))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(from_row).collect()
}

pub async fn mark_sent(conn: &mut PgConnection, id: Uuid) -> Result<()> {
    sqlx::query(
        "UPDATE movement_callback_outbox SET status = 'sent', attempts = attempts + 1, sent_at = now(),
             last_error = NULL, updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records a failed attempt: `dlq` once `max_attempts` is reached, else the next attempt
/// after `max(2^min(attempts,6), min(retry_after, 64))` seconds. Returns the new status.
pub async fn mark_failed(
    conn: &mut PgConnection,
    id: Uuid,
    max_attempts: i32,
    error: &str,
    retry_after_seconds: Option<f64>,
) -> Result<String> {
    Ok(sqlx::query_scalar(
        "UPDATE movement_callback_outbox SET
             attempts = attempts + 1,
             last_error = left($3, 2000),
             max_attempts = $2,
             status = CASE WHEN attempts + 1 >= $2 THEN 'dlq' ELSE 'pending' END,
             next_attempt_at = now() + make_interval(secs => GREATEST(
                 power(2, LEAST(attempts + 1, 6))::float8, LEAST(COALESCE($4, 0), 64))),
             updated_at = now()
         WHERE id = $1 RETURNING status",
    )
    .bind(id)
    .bind(max_attempts)
    .bind(error)
    .bind(retry_after_seconds)
    .fetch_one(&mut *conn)
    .await?)
}

/// Replays a dead letter: a new pending row with the same event (same `event_id` and
/// payload), a fresh timestamp and nonce, `replay_of` → the old row, which stays `dlq`.
/// `None` when `id` is not a `dlq` row.
pub async fn replay(conn: &mut PgConnection, id: Uuid) -> Result<Option<CallbackRow>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO movement_callback_outbox
             (id, request_id, event_id, event_type, sequence, payload, callback_url, max_attempts,
              callback_timestamp, callback_nonce, replay_of, traceparent)
         SELECT gen_random_uuid(), request_id, event_id, event_type, sequence, payload, callback_url, max_attempts,
                extract(epoch FROM now())::bigint, gen_random_uuid()::text, id, traceparent
         FROM movement_callback_outbox WHERE id = $1 AND status = 'dlq'
         RETURNING {COLUMNS}"
    )))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    if row.is_some() {
        sqlx::query("SELECT pg_notify('qtg_callback', '')").execute(&mut *conn).await?;
    }
    row.as_ref().map(from_row).transpose()
}

/// Outbox rows, newest first, optionally by status and movement, after a `(created_at, id)`.
pub async fn list(
    conn: &mut PgConnection,
    status: Option<&str>,
    request_id: Option<Uuid>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<CallbackRow>> {
    let (at, aid) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM movement_callback_outbox
         WHERE ($1::text IS NULL OR status = $1) AND ($2::uuid IS NULL OR request_id = $2)
           AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
         ORDER BY created_at DESC, id DESC LIMIT $5"
    )))
    .bind(status)
    .bind(request_id)
    .bind(at)
    .bind(aid)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(from_row).collect()
}

pub async fn exists(conn: &mut PgConnection, id: Uuid) -> Result<bool> {
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM movement_callback_outbox WHERE id = $1)")
        .bind(id)
        .fetch_one(&mut *conn)
        .await?)
}

/// A callback outside a movement's own event sequence (sequence 0): an alert about no
/// movement (`drift_detected`, `movement` None) or about one (`capital_transfer_attention`).
/// Delivered like any other row: signed, retried, dead-lettered, never lost.
pub async fn enqueue_event(
    conn: &mut PgConnection,
    movement: Option<Uuid>,
    event_type: &str,
    url: &str,
    data: &Value,
) -> Result<()> {
    sqlx::query(
        "WITH ev AS (SELECT gen_random_uuid() AS event_id)
         INSERT INTO movement_callback_outbox
             (id, request_id, event_id, event_type, sequence, payload, callback_url, callback_timestamp, callback_nonce)
         SELECT gen_random_uuid(), $1, ev.event_id, $2, 0,
             jsonb_build_object('event_id', ev.event_id, 'event_type', $2::text,
                 'occurred_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                 'data', $4::jsonb)
               || CASE WHEN $1::uuid IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('movement_id', $1::uuid) END,
             $3, extract(epoch FROM now())::bigint, gen_random_uuid()::text
         FROM ev",
    )
    .bind(movement)
    .bind(event_type)
    .bind(url)
    .bind(data)
    .execute(&mut *conn)
    .await?;
    sqlx::query("SELECT pg_notify('qtg_callback', '')").execute(&mut *conn).await?;
    Ok(())
}
