//! The callback outbox: pickup, delivery outcomes (sent / retry with backoff / dlq), replay
//! of dead letters and the operator's list. Rows are never deleted.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
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
    /// Shown with its credentials masked (`qtg_core::urls::redact`); sent as stored.
    #[serde(serialize_with = "redacted")]
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
    /// The movement's signature scheme, if it chose one (`v3`, `standard_webhooks`).
    #[serde(skip)]
    pub movement_signature: Option<String>,
    /// The claim this row was read under (only from [`claim`]; absent from other reads).
    #[serde(skip)]
    pub claim_token: Option<Uuid>,
}

fn redacted<S: serde::Serializer>(url: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&qtg_core::urls::redact(url))
}

/// Dead-letters rows that have used every attempt and are not in flight — their last claim's
/// lease ran out without an outcome (the sender died or hung), or none is held: a send that
/// never records still ends on schedule, and a row [`claim`] no longer takes is never left
/// pending. Returns how many.
pub async fn dead_letter_abandoned(conn: &mut PgConnection) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE movement_callback_outbox SET status = 'dlq', claim_token = NULL, lease_expires_at = NULL,
             last_error = left('no outcome recorded within the lease of attempt ' || attempts
                               || COALESCE(' (last error: ' || last_error || ')', ''), 2000),
             updated_at = now()
         WHERE status = 'pending' AND (lease_expires_at IS NULL OR lease_expires_at <= now())
           AND attempts >= max_attempts"
    )
    .execute(&mut *conn)
    .await?
    .rows_affected())
}

/// Claims up to `limit` due rows with a lease of `lease_seconds`, counting the attempt (a
/// committed claim is the attempt: a send cut off by a crash is not resent forever). Fair
/// between receivers: a receiver host never has more than `per_receiver` rows in flight (its
/// unexpired leases, every replica's), rows are taken round-robin across receivers, alerts
/// first within each. Row locks are taken with SKIP LOCKED and released at once: nothing is
/// held while the rows are sent.
///
/// Alerts are the event types that alert a person rather than report a movement's progress
/// (`drift_detected`, `capital_transfer_attention`, `request_attention`,
/// `venue_transfer_unexplained`): claimed first within their receiver, so they never wait
/// behind a requester's backlog.
pub async fn claim(
    conn: &mut PgConnection,
    limit: i64,
    per_receiver: i64,
    lease_seconds: f64,
) -> Result<Vec<CallbackRow>> {
    Ok(sqlx::query_as!(
        CallbackRow,
        r#"WITH in_flight AS (
             SELECT receiver, count(*) AS n FROM movement_callback_outbox
             WHERE status = 'pending' AND lease_expires_at > now() GROUP BY receiver
         ), due AS (
             SELECT id, receiver,
                    event_type IN ('drift_detected', 'capital_transfer_attention', 'request_attention',
                                   'venue_transfer_unexplained') AS alert,
                    created_at,
                    row_number() OVER (PARTITION BY receiver
                                       ORDER BY event_type IN ('drift_detected', 'capital_transfer_attention',
                                                               'request_attention', 'venue_transfer_unexplained')
                                                DESC, created_at, id) AS rn
             FROM movement_callback_outbox
             WHERE status = 'pending' AND next_attempt_at <= now() AND attempts < max_attempts
               AND (lease_expires_at IS NULL OR lease_expires_at <= now())
         ), picked AS (
             SELECT d.id FROM due d LEFT JOIN in_flight f ON f.receiver IS NOT DISTINCT FROM d.receiver
             WHERE d.rn + COALESCE(f.n, 0) <= $2
             ORDER BY d.rn, d.alert DESC, d.created_at, d.id LIMIT $1
         ), locked AS (
             -- Checked again on the row as locked (PostgreSQL re-reads a row another claimer
             -- changed and committed meanwhile): a row claimed, sent, dead-lettered or backed off
             -- since this statement's snapshot is not claimed again.
             SELECT o.id AS claimed FROM movement_callback_outbox o WHERE o.id IN (SELECT id FROM picked)
               AND o.status = 'pending' AND o.attempts < o.max_attempts AND o.next_attempt_at <= now()
               AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
             FOR UPDATE SKIP LOCKED
         )
         UPDATE movement_callback_outbox o SET
             claim_token = gen_random_uuid(),
             lease_expires_at = now() + make_interval(secs => $3),
             next_attempt_at = now() + make_interval(secs => $3),
             attempts = o.attempts + 1,
             updated_at = now()
         FROM locked WHERE o.id = locked.claimed
         RETURNING id, request_id, event_id, event_type, sequence, payload, callback_url, status, attempts,
             max_attempts, next_attempt_at, last_error, callback_timestamp, callback_nonce, replay_of, sent_at,
             created_at, traceparent,
             (SELECT r.callback_secret FROM movement_requests r WHERE r.id = request_id) AS "movement_secret?",
             (SELECT r.callback_signature FROM movement_requests r WHERE r.id = request_id) AS "movement_signature?",
             o.claim_token"#,
        limit,
        per_receiver,
        lease_seconds
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Records a delivery: `sent`, whoever's lease it is now (the receiver has the event).
pub async fn record_sent(conn: &mut PgConnection, id: Uuid) -> Result<()> {
    sqlx::query!(
        "UPDATE movement_callback_outbox SET status = 'sent', sent_at = now(), last_error = NULL,
             claim_token = NULL, lease_expires_at = NULL, updated_at = now()
         WHERE id = $1 AND status = 'pending'",
        id
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records a failed attempt of claim `token`: `dlq` once `max_attempts` are used, else the
/// next attempt after `max(2^min(attempts,6), min(retry_after, 64))` seconds. Returns the new
/// status, or `None` when the claim was lost (its lease ran out and another took the row).
pub async fn record_failed(
    conn: &mut PgConnection,
    id: Uuid,
    token: Uuid,
    max_attempts: i32,
    error: &str,
    retry_after_seconds: Option<f64>,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "UPDATE movement_callback_outbox SET
             last_error = left($4, 2000),
             max_attempts = $3,
             status = CASE WHEN attempts >= $3 THEN 'dlq' ELSE 'pending' END,
             next_attempt_at = now() + make_interval(secs => GREATEST(
                 power(2, LEAST(attempts, 6))::float8, LEAST(COALESCE($5::float8, 0), 64))),
             claim_token = NULL, lease_expires_at = NULL,
             updated_at = now()
         WHERE id = $1 AND claim_token = $2 AND status = 'pending' RETURNING status",
        id,
        token,
        max_attempts,
        error,
        retry_after_seconds
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Replays a dead letter once: a new pending row with the same event (same `event_id` and
/// payload), a fresh timestamp and nonce, `replay_of` → the old row, which stays `dlq`.
/// `None` when `id` is not a `dlq` row.
pub async fn replay(conn: &mut PgConnection, id: Uuid) -> Result<Option<CallbackRow>> {
    // The dead letter's row lock serializes replays of it; the insert, a statement of its own,
    // then sees a replay another transaction committed while this one waited.
    let locked = sqlx::query_scalar!("SELECT id FROM movement_callback_outbox WHERE id = $1 FOR UPDATE", id)
        .fetch_optional(&mut *conn)
        .await?;
    if locked.is_none() {
        return Ok(None);
    }
    let row = sqlx::query_as!(
        CallbackRow,
        r#"INSERT INTO movement_callback_outbox
             (id, request_id, event_id, event_type, sequence, payload, callback_url, max_attempts,
              callback_timestamp, callback_nonce, replay_of, traceparent)
         SELECT qtg_uuid7(), request_id, event_id, event_type, sequence, payload, callback_url, max_attempts,
                extract(epoch FROM now())::bigint, gen_random_uuid()::text, id, traceparent
         FROM movement_callback_outbox d WHERE d.id = $1 AND d.status = 'dlq'
           AND NOT EXISTS (SELECT 1 FROM movement_callback_outbox r WHERE r.replay_of = $1)
         RETURNING id, request_id, event_id, event_type, sequence, payload, callback_url, status, attempts,
             max_attempts, next_attempt_at, last_error, callback_timestamp, callback_nonce, replay_of, sent_at,
             created_at, traceparent,
             (SELECT r.callback_secret FROM movement_requests r WHERE r.id = request_id) AS "movement_secret?",
             (SELECT r.callback_signature FROM movement_requests r WHERE r.id = request_id) AS "movement_signature?",
             NULL::uuid AS "claim_token?""#,
        id
    )
    .fetch_optional(&mut *conn)
    .await?;
    if row.is_some() {
        crate::transition::wake(conn, crate::transition::CHANNEL_CALLBACK).await?;
    }
    Ok(row)
}

/// What an outbox list is narrowed to; `None` is no filter.
#[derive(Debug, Default)]
pub struct CallbackFilter<'a> {
    pub status: Option<&'a str>,
    pub request_id: Option<Uuid>,
    pub event_type: Option<&'a str>,
    /// Created at or after / before.
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// `Some(false)`: only rows never replayed; `Some(true)`: only rows that were.
    pub replayed: Option<bool>,
}

/// Outbox rows, newest first, narrowed by `filter`, after a `(created_at, id)`.
pub async fn list(
    conn: &mut PgConnection,
    filter: &CallbackFilter<'_>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<CallbackRow>> {
    let (at, aid) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    Ok(sqlx::query_as!(
        CallbackRow,
        r#"SELECT id, request_id, event_id, event_type, sequence, payload, callback_url, status, attempts,
                  max_attempts, next_attempt_at, last_error, callback_timestamp, callback_nonce, replay_of, sent_at,
                  created_at, traceparent,
                  (SELECT r.callback_secret FROM movement_requests r WHERE r.id = request_id) AS "movement_secret?",
             (SELECT r.callback_signature FROM movement_requests r WHERE r.id = request_id) AS "movement_signature?",
                  NULL::uuid AS "claim_token?"
             FROM movement_callback_outbox c
            WHERE ($1::text IS NULL OR status = $1) AND ($2::uuid IS NULL OR request_id = $2)
              AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
              AND ($6::text IS NULL OR event_type = $6)
              AND ($7::timestamptz IS NULL OR created_at >= $7)
              AND ($8::timestamptz IS NULL OR created_at < $8)
              AND ($9::bool IS NULL
                   OR $9 = EXISTS (SELECT 1 FROM movement_callback_outbox r WHERE r.replay_of = c.id))
            ORDER BY created_at DESC, id DESC LIMIT $5"#,
        filter.status,
        filter.request_id,
        at,
        aid,
        limit,
        filter.event_type,
        filter.since,
        filter.until,
        filter.replayed,
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// The replay of dead letter `id`, if it was replayed.
pub async fn replayed_as(conn: &mut PgConnection, id: Uuid) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM movement_callback_outbox WHERE replay_of = $1 ORDER BY created_at, id LIMIT 1",
        id
    )
    .fetch_optional(&mut *conn)
    .await?)
}

pub async fn exists(conn: &mut PgConnection, id: Uuid) -> Result<bool> {
    Ok(sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM movement_callback_outbox WHERE id = $1) AS "exists!""#, id)
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
    sqlx::query!(
        "WITH ev AS (SELECT qtg_uuid7() AS event_id)
         INSERT INTO movement_callback_outbox
             (id, request_id, event_id, event_type, sequence, payload, callback_url, callback_timestamp, callback_nonce,
              traceparent)
         SELECT qtg_uuid7(), $1, ev.event_id, $2, 0,
             qtg_callback_envelope(ev.event_id, $2::text, $1::uuid, NULL, $4::jsonb),
             $3, extract(epoch FROM now())::bigint, gen_random_uuid()::text, $5::text
         FROM ev",
        movement,
        event_type,
        url,
        data,
        // The receiver joins the trace of the step that raised the alert, as for every callback.
        qtg_telemetry::traceparent()
    )
    .execute(&mut *conn)
    .await?;
    crate::transition::wake(conn, crate::transition::CHANNEL_CALLBACK).await?;
    Ok(())
}
