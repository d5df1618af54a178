//! What building an execution context, advancing and deriving read about a request: its
//! nodes, its plan's edges and its predecessors' artifacts — a fixed number of queries
//! whatever the plan's shape.

use qtg_core::PlanEdge;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use qtg_core::RequestState;

use crate::rows::column;
use crate::{NodeBrief, Result};

/// Every node of a request (keys, kinds, states, refs).
pub async fn request_nodes(conn: &mut PgConnection, request_id: Uuid) -> Result<Vec<NodeBrief>> {
    Ok(request_snapshot(conn, request_id).await?.1)
}

/// The request's state and every one of its nodes, in one query.
pub async fn request_snapshot(conn: &mut PgConnection, request_id: Uuid) -> Result<(RequestState, Vec<NodeBrief>)> {
    snapshot(conn, request_id, false).await
}

/// [`request_snapshot`], locking the request row (waiting): what derivation reads. A worker
/// that has just written its node takes the request lock this way (node before request).
pub async fn request_snapshot_for_update(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> Result<(RequestState, Vec<NodeBrief>)> {
    snapshot(conn, request_id, true).await
}

/// One row of a snapshot: the request's state and one of its nodes, states and kind as text.
struct SnapshotRecord {
    request_state: String,
    id: Uuid,
    node_key: String,
    node_kind: String,
    node_state: String,
    provider_refs: Value,
    error_code: Option<String>,
    submit_accepted: bool,
}

/// The snapshot statement with `$tail` appended (the macros take literals joined by `+`).
macro_rules! snapshot_query {
    ($tail:literal, $request_id:expr) => {
        sqlx::query_as!(
            SnapshotRecord,
            r#"SELECT r.request_state, n.id, n.node_key, n.node_kind, n.node_state, n.provider_refs, n.error_code,
                    (n.submit_accepted_at IS NOT NULL) AS "submit_accepted!"
             FROM movement_requests r JOIN movement_request_nodes n ON n.request_id = r.id
             WHERE r.id = $1 ORDER BY n.node_key"#
                + $tail,
            $request_id
        )
    };
}

async fn snapshot(
    conn: &mut PgConnection,
    request_id: Uuid,
    for_update: bool,
) -> Result<(RequestState, Vec<NodeBrief>)> {
    let records = if for_update {
        snapshot_query!(" FOR UPDATE OF r", request_id).fetch_all(&mut *conn).await?
    } else {
        snapshot_query!("", request_id).fetch_all(&mut *conn).await?
    };
    let state = match records.first() {
        Some(r) => column("request_state", r.request_state.clone())?,
        None => return Err(crate::StoreError::corrupt(format!("movement {request_id} has no nodes"))),
    };
    let nodes = records
        .into_iter()
        .map(|r| {
            Ok(NodeBrief {
                id: r.id,
                node_key: r.node_key,
                node_kind: column("node_kind", r.node_kind)?,
                node_state: column("node_state", r.node_state)?,
                provider_refs: r.provider_refs,
                error_code: r.error_code,
                submit_accepted: r.submit_accepted,
            })
        })
        .collect::<Result<Vec<_>>>()?;
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

/// The artifacts of the given nodes' current attempts, oldest first, as
/// `{node_key, kind, attempt_no, payload, payload_hash}` objects.
pub async fn node_artifacts(conn: &mut PgConnection, node_ids: &[Uuid]) -> Result<Vec<Value>> {
    if node_ids.is_empty() {
        return Ok(Vec::new());
    }
    // Each node by its key, then its current attempt's artifacts by theirs (`OFFSET 0` keeps
    // both probes: on a table whose statistics lag its growth the planner scanned every node).
    Ok(sqlx::query_scalar!(
        r#"SELECT jsonb_build_object('node_key', n.node_key, 'kind', a.kind,
                'attempt_no', a.attempt_no, 'payload', a.payload, 'payload_hash', a.payload_hash) AS "artifact!"
         FROM (SELECT DISTINCT unnest($1::uuid[]) AS id) k
         CROSS JOIN LATERAL (SELECT n0.id, n0.node_key, n0.attempt_no FROM movement_request_nodes n0
                             WHERE n0.id = k.id OFFSET 0) n
         JOIN artifacts a ON a.request_node_id = n.id AND a.attempt_no = n.attempt_no
         ORDER BY a.created_at, a.id"#,
        node_ids
    )
    .fetch_all(&mut *conn)
    .await?)
}
