//! What building an execution context, advancing and deriving read about a request: its
//! nodes, its plan's edges and its predecessors' artifacts — a fixed number of queries
//! whatever the plan's shape.

use qtg_core::PlanEdge;
use serde_json::Value;
use sqlx::{FromRow, PgConnection, Row};
use uuid::Uuid;

use qtg_core::RequestState;

use crate::rows::parse_request_state;
use crate::{NodeBrief, Result};

/// Every node of a request (keys, kinds, states, refs).
pub async fn request_nodes(conn: &mut PgConnection, request_id: Uuid) -> Result<Vec<NodeBrief>> {
    Ok(request_snapshot(conn, request_id).await?.1)
}

/// The request's state and every one of its nodes, in one query.
pub async fn request_snapshot(conn: &mut PgConnection, request_id: Uuid) -> Result<(RequestState, Vec<NodeBrief>)> {
    snapshot(conn, request_id, SNAPSHOT).await
}

/// [`request_snapshot`], locking the request row (waiting): what derivation reads. A worker
/// that has just written its node takes the request lock this way (node before request).
pub async fn request_snapshot_for_update(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> Result<(RequestState, Vec<NodeBrief>)> {
    snapshot(conn, request_id, SNAPSHOT_FOR_UPDATE).await
}

macro_rules! snapshot_sql {
    ($tail:literal) => {
        concat!(
            "SELECT r.request_state, n.id, n.node_key, n.node_kind, n.node_state, n.provider_refs, n.error_code,
                    (n.submit_accepted_at IS NOT NULL) AS submit_accepted
             FROM movement_requests r JOIN movement_request_nodes n ON n.request_id = r.id
             WHERE r.id = $1 ORDER BY n.node_key",
            $tail
        )
    };
}

const SNAPSHOT: &str = snapshot_sql!("");
const SNAPSHOT_FOR_UPDATE: &str = snapshot_sql!(" FOR UPDATE OF r");

async fn snapshot(
    conn: &mut PgConnection,
    request_id: Uuid,
    sql: &'static str,
) -> Result<(RequestState, Vec<NodeBrief>)> {
    let rows = sqlx::query(sql).bind(request_id).fetch_all(&mut *conn).await?;
    let state = match rows.first() {
        Some(r) => parse_request_state(r.try_get("request_state")?)?,
        None => return Err(crate::StoreError::corrupt(format!("movement {request_id} has no nodes"))),
    };
    let nodes = rows.iter().map(NodeBrief::from_row).collect::<Result<Vec<_>, _>>()?;
    Ok((state, nodes))
}

pub async fn plan_edges(conn: &mut PgConnection, plan_version_id: Uuid) -> Result<Vec<PlanEdge>> {
    let rows = sqlx::query(
        "SELECT from_node_key, to_node_key FROM plan_edges WHERE plan_version_id = $1
         ORDER BY from_node_key, to_node_key",
    )
    .bind(plan_version_id)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(|r| Ok(PlanEdge { from: r.try_get(0)?, to: r.try_get(1)? })).collect()
}

/// The artifacts of the given nodes' current attempts, oldest first, as
/// `{node_key, kind, attempt_no, payload, payload_hash}` objects.
pub async fn node_artifacts(conn: &mut PgConnection, node_ids: &[Uuid]) -> Result<Vec<Value>> {
    if node_ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(
        "SELECT jsonb_build_object('node_key', n.node_key, 'kind', a.kind,
                'attempt_no', a.attempt_no, 'payload', a.payload, 'payload_hash', a.payload_hash)
         FROM artifacts a JOIN movement_request_nodes n ON n.id = a.request_node_id
         WHERE a.request_node_id = ANY($1) AND a.attempt_no = n.attempt_no
         ORDER BY a.created_at, a.id",
    )
    .bind(node_ids)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}
