//! What advancing and deriving read about a request: its nodes and its plan's edges — a fixed
//! number of queries whatever the plan's shape. (A claim reads the nodes and the
//! predecessors' artifacts an execution context needs in its own statement:
//! `rows::CLAIM_CONTEXT_COLUMNS`.)

use qtg_core::PlanEdge;
use sqlx::PgConnection;
use uuid::Uuid;

use qtg_core::RequestState;

use crate::rows::{column, NodeRecord};
use crate::{NodeBrief, Result};

/// Every node of a request (keys, kinds, states, refs).
pub async fn request_nodes(conn: &mut PgConnection, request_id: Uuid) -> Result<Vec<NodeBrief>> {
    Ok(request_snapshot(conn, request_id).await?.1)
}

/// The request's state and every one of its nodes, in one query.
pub async fn request_snapshot(conn: &mut PgConnection, request_id: Uuid) -> Result<(RequestState, Vec<NodeBrief>)> {
    snapshot(conn, request_id).await
}

/// [`request_snapshot`], locking the request row (waiting): what derivation reads. A worker
/// that has just written its node takes the request lock this way (node before request).
///
/// The lock is taken by one statement and the nodes are read by the next (both in the
/// function `qtg_locked_snapshot`, one round trip, migration 0035). One statement that
/// waited for the lock (`… FOR UPDATE OF r`) would return the nodes as they were when it
/// started, before the wait: a parallel branch that completed and committed while this one
/// waited would still read as running, and neither branch would see both done — the fan-in
/// never activated, the movement never derived.
pub async fn request_snapshot_for_update(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> Result<(RequestState, Vec<NodeBrief>)> {
    let records = sqlx::query_as!(
        NodeRecord,
        r#"SELECT request_state AS "request_state!", id AS "id!", node_key AS "node_key!", node_kind AS "node_kind!",
                node_state AS "node_state!", provider_refs AS "provider_refs!", error_code,
                submit_accepted AS "submit_accepted!"
         FROM qtg_locked_snapshot($1)"#,
        request_id
    )
    .fetch_all(&mut *conn)
    .await?;
    briefs(request_id, records)
}

async fn snapshot(conn: &mut PgConnection, request_id: Uuid) -> Result<(RequestState, Vec<NodeBrief>)> {
    let records = sqlx::query_as!(
        NodeRecord,
        r#"SELECT r.request_state, n.id, n.node_key, n.node_kind, n.node_state, n.provider_refs, n.error_code,
                (n.submit_accepted_at IS NOT NULL) AS "submit_accepted!"
         FROM movement_requests r JOIN movement_request_nodes n ON n.request_id = r.id
         WHERE r.id = $1 ORDER BY n.node_key"#,
        request_id
    )
    .fetch_all(&mut *conn)
    .await?;
    briefs(request_id, records)
}

fn briefs(request_id: Uuid, records: Vec<NodeRecord>) -> Result<(RequestState, Vec<NodeBrief>)> {
    let state = match records.first() {
        Some(r) => column("request_state", r.request_state.clone())?,
        None => return Err(crate::StoreError::corrupt(format!("movement {request_id} has no nodes"))),
    };
    let nodes = records.into_iter().map(NodeRecord::brief).collect::<Result<Vec<_>>>()?;
    Ok((state, nodes))
}

pub async fn plan_edges(conn: &mut PgConnection, plan_version_id: Uuid) -> Result<Vec<PlanEdge>> {
    let rows = sqlx::query!(
        "SELECT from_node_key, to_node_key FROM plan_edges WHERE plan_version_id = $1
         ORDER BY from_node_key, to_node_key",
        plan_version_id
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| PlanEdge { from: r.from_node_key, to: r.to_node_key }).collect())
}
