//! Operator actions on movements and nodes (cancel, resume, retry, complete-manual) and the
//! runbook diagnosis of a stuck node. Each action needs a reason (or evidence) and answers
//! the movement.

use axum::extract::State;
use axum::Json;
use qtg_core::codes::RunbookCase;
use serde::Deserialize;
use serde_json::{json, Value};

use super::movements::full_movement;
use crate::error::ApiError;
use crate::extract::{required_reason, Body, MovementId, NodeRef, Operator, Viewer};
use crate::openapi::Movement;
use crate::AppState;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
    reason: String,
    /// The runbook case that justifies cancelling a movement whose node may have a side
    /// effect in flight (C6 needs evidence)
    #[schema(value_type = Option<crate::openapi::RunbookCase>)]
    #[serde(default)]
    runbook_case: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    evidence: Option<Value>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionBody {
    #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
    pub(crate) reason: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceBody {
    /// What was done, by whom, references (not empty)
    #[schema(schema_with = crate::openapi::evidence_schema)]
    evidence: Value,
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/actions/cancel",
    summary = "Cancel; refused (409) while a node may have a side effect in flight unless runbook_case \
               C6 with evidence",
    description = "Role: operator.",
    request_body = CancelBody,
    params(("id" = uuid::Uuid, Path, description = "the movement id")),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn cancel_movement(
    State(s): State<AppState>,
    Operator(who): Operator,
    MovementId(id): MovementId,
    body: Body<CancelBody>,
) -> Result<Json<Value>, ApiError> {
    let b = body.value;
    let reason = required_reason(&b.reason)?;
    let runbook_case = match b.runbook_case.as_deref() {
        None => None,
        Some(c) => Some(RunbookCase::parse(c).ok_or_else(|| {
            let cases: Vec<&str> = RunbookCase::ALL.iter().map(|c| c.as_str()).collect();
            ApiError::validation(format!("runbook_case must be one of {}", cases.join(", ")))
        })?),
    };
    let input = qtg_engine::operator::CancelInput { reason, runbook_case, evidence: b.evidence.as_ref() };
    s.engine.cancel_movement(&who.name, id, input).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/actions/resume",
    summary = "Resume a MANUAL_INTERVENTION movement: clears the hand-off mark so recovery sweeps again",
    description = "Role: operator.",
    request_body = ActionBody,
    params(("id" = uuid::Uuid, Path, description = "the movement id")),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn resume_movement(
    State(s): State<AppState>,
    Operator(who): Operator,
    MovementId(id): MovementId,
    body: Body<ActionBody>,
) -> Result<Json<Value>, ApiError> {
    s.engine.resume_movement(&who.name, id, required_reason(&body.value.reason)?).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/nodes/{node_key}/actions/retry",
    summary = "Retry a FAILED node as a new attempt; 409 SUBMIT_ATTEMPT_PENDING on UNKNOWN/SUBMITTING with the \
               pending marker",
    description = "Role: operator.",
    request_body = ActionBody,
    params(
        ("id" = uuid::Uuid, Path, description = "the movement id"),
        ("node_key" = String, Path, description = "the node's key in the plan")
    ),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn retry_node(
    State(s): State<AppState>,
    Operator(who): Operator,
    NodeRef { movement, node_key }: NodeRef,
    body: Body<ActionBody>,
) -> Result<Json<Value>, ApiError> {
    s.engine.retry_node(&who.name, movement, &node_key, required_reason(&body.value.reason)?).await?;
    full_movement(&s, movement).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/nodes/{node_key}/actions/complete-manual",
    summary = "Complete a manual_* node waiting for a person, with evidence",
    description = "Role: operator.",
    request_body = EvidenceBody,
    params(
        ("id" = uuid::Uuid, Path, description = "the movement id"),
        ("node_key" = String, Path, description = "the node's key in the plan")
    ),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn complete_manual(
    State(s): State<AppState>,
    Operator(who): Operator,
    NodeRef { movement, node_key }: NodeRef,
    body: Body<EvidenceBody>,
) -> Result<Json<Value>, ApiError> {
    let evidence = body.value.evidence;
    if evidence.is_null() || evidence == json!({}) || evidence.as_str().is_some_and(|e| e.trim().is_empty()) {
        return Err(ApiError::validation("evidence is required (what was done, by whom, references)"));
    }
    s.engine.complete_manual(&who.name, movement, &node_key, &evidence).await?;
    full_movement(&s, movement).await
}

#[utoipa::path(
    get,
    path = "/v3/movements/{id}/nodes/{node_key}/diagnosis",
    summary = "Runbook case (C1, C2, C3a, C3b, C5, C6, C7) of a stuck node with its evidence and the required \
               action; never resolves anything",
    description = "Role: operator.",
    params(
        ("id" = uuid::Uuid, Path, description = "the movement id"),
        ("node_key" = String, Path, description = "the node's key in the plan")
    ),
    responses((status = 200, description = "the diagnosis", body = crate::openapi::Diagnosis)),
)]
pub async fn diagnose_node(
    State(s): State<AppState>,
    _: Operator,
    NodeRef { movement, node_key }: NodeRef,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(s.engine.diagnose_node(movement, &node_key).await?))
}

#[utoipa::path(
    get,
    path = "/v3/movements/{id}/nodes/{node_key}",
    summary = "A node: its row (state, markers, provider refs), its whole history of calls and transitions from \
               node_events (oldest first, the newest 1000) and its artifacts (a signature's payload left out)",
    description = "Role: viewer.",
    params(
        ("id" = uuid::Uuid, Path, description = "the movement id"),
        ("node_key" = String, Path, description = "the node's key in the plan")
    ),
    responses((status = 200, description = "the node", body = crate::openapi::NodeDetail)),
)]
pub async fn get_node(
    State(s): State<AppState>,
    _: Viewer,
    NodeRef { movement, node_key }: NodeRef,
) -> Result<Json<Value>, ApiError> {
    let (_, nodes) = s.engine.movement(movement).await?;
    let node = nodes.into_iter().find(|n| n.node_key == node_key).ok_or_else(|| ApiError::not_found("node"))?;
    let mut conn = s.pool.acquire().await?;
    let events = qtg_store::events::history(&mut conn, node.id, 1000, false).await?;
    let artifacts = qtg_store::artifacts::of_node(&mut conn, node.id).await?;
    Ok(Json(json!({"movement_id": movement, "node": node, "events": events, "artifacts": artifacts})))
}
