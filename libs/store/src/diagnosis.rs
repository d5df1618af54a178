//! What diagnosis reads about a node: its row, its movement's state, timing by the
//! database's clock, and its recent history.

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::rows::column;
use crate::Result;

#[derive(Debug, Clone)]
pub struct NodeEvidence {
    pub node_id: Uuid,
    pub lane: String,
    pub facts_state: qtg_core::NodeState,
    pub request_state: qtg_core::RequestState,
    /// The node row as JSON (state, attempt, refs, error, timestamps).
    pub node: Value,
    pub provider_refs: Value,
    pub provider_ref_id: Option<String>,
    pub seconds_since_started: Option<f64>,
    pub observe_count: i32,
    pub submit_transport_failures: i64,
    /// The last node events, newest first (read apart).
    pub recent_events: Vec<Value>,
}

pub async fn node_evidence(conn: &mut PgConnection, request_id: Uuid, node_key: &str) -> Result<Option<NodeEvidence>> {
    let row = sqlx::query!(
        r#"SELECT n.id, n.lane, n.node_state, r.request_state, n.provider_refs, n.provider_ref_id, n.observe_count,
                extract(epoch FROM now() - n.started_at)::float8 AS since_started,
                jsonb_build_object('node_key', n.node_key, 'node_state', n.node_state, 'attempt_no', n.attempt_no,
                    'provider_state', n.provider_state, 'provider_ref_id', n.provider_ref_id,
                    'provider_refs', n.provider_refs,
                    'error_code', n.error_code, 'error_detail', n.error_detail, 'started_at', n.started_at,
                    'updated_at', n.updated_at, 'last_observed_at', n.last_observed_at,
                    'next_observe_at', n.next_observe_at,
                    'observe_count', n.observe_count) AS "node!",
                (SELECT count(*) FROM node_events e WHERE e.request_node_id = n.id AND e.attempt_no = n.attempt_no
                   AND e.method = 'submit' AND e.outcome IN ('transport_error', 'timeout')) AS "submit_failures!"
         FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
         WHERE n.request_id = $1 AND n.node_key = $2"#,
        request_id,
        node_key
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(r) = row else { return Ok(None) };
    let mut evidence = NodeEvidence {
        node_id: r.id,
        lane: r.lane,
        facts_state: column("node_state", r.node_state)?,
        request_state: column("request_state", r.request_state)?,
        node: r.node,
        provider_refs: r.provider_refs,
        provider_ref_id: r.provider_ref_id,
        seconds_since_started: r.since_started,
        observe_count: r.observe_count,
        submit_transport_failures: r.submit_failures,
        recent_events: Vec::new(),
    };
    evidence.recent_events = crate::events::history(&mut *conn, evidence.node_id, 25, true).await?;
    Ok(Some(evidence))
}
