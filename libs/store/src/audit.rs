//! `audit_outbox` rows for mutations that are not state transitions (those write theirs in
//! the one door).

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone)]
pub struct AuditRecord<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub entity_type: &'a str,
    pub entity_id: String,
    pub movement_id: Option<Uuid>,
    pub data: Value,
}

impl<'a> AuditRecord<'a> {
    /// A row about `entity_type` `entity_id`, with no movement and empty data.
    pub fn new(actor: &'a str, action: &'a str, entity_type: &'a str, entity_id: impl ToString) -> Self {
        AuditRecord {
            actor,
            action,
            entity_type,
            entity_id: entity_id.to_string(),
            movement_id: None,
            data: Value::Object(Default::default()),
        }
    }

    pub fn movement(self, movement_id: Uuid) -> Self {
        AuditRecord { movement_id: Some(movement_id), ..self }
    }

    pub fn data(self, data: Value) -> Self {
        AuditRecord { data, ..self }
    }

    /// Writes the row in `conn`'s transaction (see [`record`]).
    pub async fn record(&self, conn: &mut PgConnection) -> Result<()> {
        record(conn, self).await
    }
}

pub async fn record(conn: &mut PgConnection, rec: &AuditRecord<'_>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
         VALUES (qtg_uuid7(), $1, $2, $3, $4, $5, $6)",
        rec.actor,
        rec.action,
        rec.entity_type,
        rec.entity_id,
        rec.movement_id,
        rec.data,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Promotes up to `limit` outbox rows into `audit_events`, in outbox order and exactly once.
/// One promoter at a time (a transaction-scoped advisory lock); the outbox row is marked in
/// the same transaction and `outbox_id` is unique. Outbox ids are handed out at insert but
/// rows become visible at commit, so a later id can be visible before an earlier one: the
/// promoter stops at such a hole and waits for it to fill, treating it as a rolled-back id
/// once the row after it is `HOLE_GRACE_SECONDS` old. Returns how many were promoted; 0
/// when another replica holds the lock.
pub async fn promote(conn: &mut PgConnection, limit: i64) -> Result<u64> {
    let locked: bool = sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "locked!""#, AUDIT_PROMOTER_LOCK)
        .fetch_one(&mut *conn)
        .await?;
    if !locked {
        return Ok(0);
    }
    let last: Option<i64> =
        sqlx::query_scalar!(r#"SELECT max(outbox_id) AS "last?" FROM audit_events"#).fetch_one(&mut *conn).await?;
    let rows = sqlx::query!(
        r#"SELECT id, extract(epoch FROM clock_timestamp() - created_at)::float8 AS "age!"
         FROM audit_outbox WHERE promoted_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE"#,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut expected = last.unwrap_or(0) + 1;
    let mut take: Vec<i64> = Vec::with_capacity(rows.len());
    for r in &rows {
        let (id, age) = (r.id, r.age);
        if id != expected && age < HOLE_GRACE_SECONDS {
            break;
        }
        take.push(id);
        expected = id + 1;
    }
    if take.is_empty() {
        return Ok(0);
    }
    let res = sqlx::query!(
        "WITH batch AS (
             UPDATE audit_outbox SET promoted_at = now() WHERE id = ANY($1)
             RETURNING id, event_id, actor, action, entity_type, entity_id, movement_id, data, created_at
         )
         INSERT INTO audit_events (outbox_id, event_id, actor, action, entity_type, entity_id, movement_id, \
             data, occurred_at)
         SELECT id, event_id, actor, action, entity_type, entity_id, movement_id, data, created_at FROM \
             batch ORDER BY id
         ON CONFLICT (outbox_id) DO NOTHING",
        &take,
    )
    .execute(&mut *conn)
    .await?;
    Ok(res.rows_affected())
}

/// How long a gap in outbox ids is waited for before it is taken as a rolled-back insert.
pub const HOLE_GRACE_SECONDS: f64 = 5.0;

/// The advisory-lock key of the audit promoter ("qtgaudit").
const AUDIT_PROMOTER_LOCK: i64 = 0x7174_6761_7564_6974;

#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEvent {
    pub id: i64,
    pub event_id: Uuid,
    pub actor: String,
    pub action: String,
    pub entity_type: String,
    pub entity_id: String,
    pub movement_id: Option<Uuid>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: Value,
    pub occurred_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub movement_id: Option<Uuid>,
    pub actor: Option<String>,
    pub action: Option<String>,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Events after this id (the cursor).
    pub after_id: Option<i64>,
}

/// Promoted audit events in order, filtered, at most `limit`.
pub async fn list(conn: &mut PgConnection, f: &AuditFilter, limit: i64) -> Result<Vec<AuditEvent>> {
    Ok(sqlx::query_as!(
        AuditEvent,
        "SELECT id, event_id, actor, action, entity_type, entity_id, movement_id, data, occurred_at FROM audit_events
         WHERE ($1::uuid IS NULL OR movement_id = $1) AND ($2::text IS NULL OR actor = $2)
           AND ($3::text IS NULL OR action = $3) AND ($4::timestamptz IS NULL OR occurred_at >= $4)
           AND ($5::timestamptz IS NULL OR occurred_at < $5) AND ($6::bigint IS NULL OR id > $6)
         ORDER BY id LIMIT $7",
        f.movement_id,
        f.actor,
        f.action,
        f.since,
        f.until,
        f.after_id,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?)
}
