//! Artifacts: what a node's steps produced (prepared action, signature, proofs, evidence).

use qtg_core::PreparedAction;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{Result, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactKind {
    PreparedAction,
    SignResult,
    Proof,
    Generated,
    ManualEvidence,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::PreparedAction => "prepared_action",
            ArtifactKind::SignResult => "sign_result",
            ArtifactKind::Proof => "proof",
            ArtifactKind::Generated => "generated",
            ArtifactKind::ManualEvidence => "manual_evidence",
        }
    }
}

/// Stores an artifact of a node's attempt, from the node row itself (migration 0039):
/// `StoreError::NoNode` and nothing written when the node is not there or not of `request_id`.
pub async fn insert(
    conn: &mut PgConnection,
    request_id: Uuid,
    node_id: Uuid,
    attempt_no: i32,
    kind: ArtifactKind,
    payload: &Value,
    payload_hash: Option<&str>,
) -> Result<()> {
    let written = sqlx::query!(
        "INSERT INTO artifacts (id, request_id, request_node_id, attempt_no, kind, payload, payload_hash)
         SELECT qtg_uuid7(), n.request_id, n.id, $3, $4, $5, $6
         FROM movement_request_nodes n WHERE n.id = $2 AND n.request_id = $1",
        request_id,
        node_id,
        attempt_no,
        kind.as_str(),
        payload,
        payload_hash,
    )
    .execute(&mut *conn)
    .await?;
    StoreError::node_found(written.rows_affected(), 1, node_id, request_id, "artifact")
}

/// The prepared action (and its stored hash) and the sign result of an attempt.
pub async fn submission(
    conn: &mut PgConnection,
    node_id: Uuid,
    attempt_no: i32,
) -> Result<(Option<(PreparedAction, String)>, Option<Value>)> {
    let rows = sqlx::query!(
        "SELECT kind, payload, payload_hash FROM artifacts
         WHERE request_node_id = $1 AND attempt_no = $2 AND kind IN ('prepared_action', 'sign_result')
         ORDER BY created_at DESC, id DESC",
        node_id,
        attempt_no,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut prepared = None;
    let mut signed = None;
    for row in rows {
        if row.kind == "prepared_action" && prepared.is_none() {
            let action: PreparedAction = serde_json::from_value(row.payload).map_err(StoreError::corrupt)?;
            prepared = Some((action, row.payload_hash.unwrap_or_default()));
        } else if row.kind == "sign_result" && signed.is_none() {
            signed = Some(row.payload);
        }
    }
    Ok((prepared, signed))
}

/// A node's artifacts, oldest first, as the API shows them. A signature's payload (a signed
/// transaction anyone could broadcast) is left out; its hash stays.
pub async fn of_node(conn: &mut PgConnection, node_id: Uuid) -> Result<Vec<Value>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT jsonb_build_object('attempt_no', attempt_no, 'kind', kind, 'payload_hash', payload_hash,
                    'created_at', created_at, 'payload', CASE WHEN kind = 'sign_result' THEN NULL ELSE payload END)
                    AS "artifact!"
         FROM artifacts WHERE request_node_id = $1 ORDER BY created_at, id"#,
        node_id,
    )
    .fetch_all(&mut *conn)
    .await?)
}
