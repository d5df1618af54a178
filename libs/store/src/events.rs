//! `node_events`: one row per executor call (transitions write theirs in the one door). The
//! observe history diagnosis reads.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{Result, StoreError};

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

/// Appends one call's event, from the node row itself (migration 0039): `StoreError::NoNode`
/// and nothing written when the node is not there or not of `ev.request_id`.
pub async fn record_call(conn: &mut PgConnection, ev: &CallEvent<'_>) -> Result<()> {
    let written = sqlx::query!(
        "INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome,
             error_code, error_detail, duration_ms, actor)
         SELECT n.request_id, n.id, $3, 'call', $4, $5, $6, left($7, 2000), $8, $9
         FROM movement_request_nodes n WHERE n.id = $2 AND n.request_id = $1",
        ev.request_id,
        ev.node_id,
        ev.attempt_no,
        ev.method,
        ev.outcome,
        ev.error_code,
        ev.error_detail,
        ev.duration_ms,
        ev.actor,
    )
    .execute(&mut *conn)
    .await?;
    StoreError::node_found(written.rows_affected(), 1, ev.node_id, ev.request_id, "call event")
}

/// One executor call of a step, as [`record_calls`] writes it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub outcome: String,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
    pub duration_ms: i32,
}

impl Call {
    pub fn ok(method: &'static str, outcome: &str, duration_ms: i32) -> Call {
        Call { method, outcome: storable_text(outcome), error_code: None, error_detail: None, duration_ms }
    }

    /// Texts from outside (an executor's code, a transport's message) are made storable.
    pub fn failed(method: &'static str, outcome: &str, code: &str, detail: &str, duration_ms: i32) -> Call {
        Call {
            method,
            outcome: storable_text(outcome),
            error_code: Some(storable_text(code)),
            error_detail: Some(storable_text(detail)),
            duration_ms,
        }
    }
}

/// `text` as PostgreSQL can hold it: a NUL (U+0000) becomes U+FFFD.
pub fn storable_text(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

/// Records the calls of one attempt (in call order) in one statement, from the node row as
/// [`record_call`] does; nothing when empty.
pub async fn record_calls(
    conn: &mut PgConnection,
    request_id: Uuid,
    node_id: Uuid,
    attempt_no: i32,
    calls: &[Call],
    actor: &str,
) -> Result<()> {
    if calls.is_empty() {
        return Ok(());
    }
    let methods: Vec<&str> = calls.iter().map(|c| c.method).collect();
    let outcomes: Vec<&str> = calls.iter().map(|c| c.outcome.as_str()).collect();
    let codes: Vec<Option<&str>> = calls.iter().map(|c| c.error_code.as_deref()).collect();
    let details: Vec<Option<&str>> = calls.iter().map(|c| c.error_detail.as_deref()).collect();
    let durations: Vec<i32> = calls.iter().map(|c| c.duration_ms).collect();
    let written = sqlx::query!(
        "INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome,
             error_code, error_detail, duration_ms, actor)
         SELECT n.request_id, n.id, $3, 'call', m, o, c, left(d, 2000), ms, $9
         FROM movement_request_nodes n,
             unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::int[]) WITH ORDINALITY AS x(m, o, c, d, ms, i)
         WHERE n.id = $2 AND n.request_id = $1
         ORDER BY i",
        request_id,
        node_id,
        attempt_no,
        &methods[..] as &[&str],
        &outcomes[..] as &[&str],
        &codes[..] as &[Option<&str>],
        &details[..] as &[Option<&str>],
        &durations,
        actor,
    )
    .execute(&mut *conn)
    .await?;
    StoreError::node_found(written.rows_affected(), calls.len() as u64, node_id, request_id, "call events")
}

/// A node's history — its calls and transitions — as the API shows it: the `limit` newest
/// events, newest first or (with `newest_first = false`) in the order they happened.
pub async fn history(
    conn: &mut PgConnection,
    node_id: Uuid,
    limit: i64,
    newest_first: bool,
) -> Result<Vec<serde_json::Value>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT jsonb_build_object('at', created_at, 'kind', kind, 'method', method, 'outcome', outcome,
                    'from', from_state, 'to', to_state, 'error_code', error_code, 'error_detail', error_detail,
                    'attempt_no', attempt_no, 'duration_ms', duration_ms, 'actor', actor) AS "event!"
         FROM (SELECT * FROM node_events WHERE request_node_id = $1 ORDER BY id DESC LIMIT $2) e
         ORDER BY CASE WHEN $3 THEN -id ELSE id END"#,
        node_id,
        limit,
        newest_first,
    )
    .fetch_all(&mut *conn)
    .await?)
}
