//! `node_events`: one row per executor call (transitions write theirs in the one door). The
//! observe history diagnosis reads.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone)]
pub struct CallEvent<'a> {
    pub request_id: Uuid,
    pub node_id: Uuid,
    pub attempt_no: i32,
    pub method: &'a str,
    /// e.g. `ok`, `pass`, `result:SUBMITTED`, `transport_error`, `timeout`, `protocol_error`.
    pub outcome: &'a str,
    pub error_code: Option<&'a str>,
    pub error_detail: Option<&'a str>,
    pub duration_ms: i32,
    pub actor: &'a str,
}

pub async fn record_call(conn: &mut PgConnection, ev: &CallEvent<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome,
             error_code, error_detail, duration_ms, actor)
         VALUES ($1, $2, $3, 'call', $4, $5, $6, left($7, 2000), $8, $9)",
    )
    .bind(ev.request_id)
    .bind(ev.node_id)
    .bind(ev.attempt_no)
    .bind(ev.method)
    .bind(ev.outcome)
    .bind(ev.error_code)
    .bind(ev.error_detail)
    .bind(ev.duration_ms)
    .bind(ev.actor)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
