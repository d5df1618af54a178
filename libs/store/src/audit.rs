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

pub async fn record(conn: &mut PgConnection, rec: &AuditRecord<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
         VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6)",
    )
    .bind(rec.actor)
    .bind(rec.action)
    .bind(rec.entity_type)
    .bind(&rec.entity_id)
    .bind(rec.movement_id)
    .bind(&rec.data)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
