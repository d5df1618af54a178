//! Schemas of the answers and enumerations the handlers build as JSON (documentation types,
//! read by utoipa's derive; `openapi.rs` collects them).

#![allow(dead_code)] // documentation-only types: never constructed

use serde_json::Value;
use utoipa::ToSchema;

use crate::openapi::{PlanEdgeDoc, PlanNodeDoc, RiskControlsDoc};

/// A movement's state.
#[derive(ToSchema)]
#[schema(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MovementState {
    PendingApproval,
    Approved,
    Executing,
    WaitingManualAction,
    ManualIntervention,
    Completed,
    Failed,
    Expired,
    Rejected,
    Cancelled,
}

/// The stuck-node runbook's cases (docs/architecture.md §13).
#[derive(ToSchema)]
pub struct RunbookCase(String);

/// A role; each includes the ones before it.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum RoleName {
    Viewer,
    Requester,
    Approver,
    Operator,
    Admin,
}

/// A callback outbox row's status.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum CallbackStatus {
    Pending,
    Sent,
    Dlq,
}

/// What a pause applies to, with its target: every submit, one recovery lane, or one
/// executor key of the registry (an unknown key is a 404).
#[derive(ToSchema)]
#[serde(tag = "scope", rename_all = "lowercase", deny_unknown_fields)]
pub enum PauseRequest {
    Global {
        #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
        reason: String,
    },
    Lane {
        target: LaneName,
        #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
        reason: String,
    },
    Executor {
        #[schema(min_length = 1, max_length = 128)]
        target: String,
        #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
        reason: String,
    },
}

/// A recovery lane.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum LaneName {
    Ccip,
    Stargate,
    Cex,
    Other,
}

/// A reviewed template proposal; an approval adds the template version it created.
#[derive(ToSchema)]
pub struct ProposalReview {
    id: uuid::Uuid,
    /// approved or rejected
    status: String,
    template_key: Option<String>,
    version: Option<i32>,
    compiled_plan_hash: Option<String>,
}

/// A template with its versions, newest first.
#[derive(ToSchema)]
pub struct Template {
    template_key: String,
    latest_version: i32,
    versions: Vec<TemplateVersion>,
}

#[derive(ToSchema)]
pub struct TemplateVersion {
    version: i32,
    compiled_plan_hash: String,
    description: Option<String>,
    created_at: String,
    nodes: Vec<PlanNodeDoc>,
    edges: Vec<PlanEdgeDoc>,
    risk_controls: RiskControlsDoc,
    /// When the version was retired (a successor approved, or an admin): it takes no new
    /// movement or capital transfer.
    retired_at: Option<String>,
}

/// The runbook's reading of a stuck node: never resolves anything itself.
#[derive(ToSchema)]
pub struct Diagnosis {
    movement_id: uuid::Uuid,
    node_key: String,
    /// C1, C2, C3a, C3b, C5, C6, C7, or null when the node is not stuck
    case: Option<String>,
    title: String,
    required_action: String,
    also_consider: Vec<String>,
    /// Always false: the operator acts
    automatic_resolution: bool,
    evidence: DiagnosisEvidence,
}

#[derive(ToSchema)]
pub struct DiagnosisEvidence {
    request_state: String,
    /// The node row as JSON (state, attempt, refs, error, timestamps)
    #[schema(value_type = Object)]
    node: Value,
    #[schema(value_type = Object)]
    markers: Value,
    /// The reconciliation matcher's evidence an executor's recover left (`__reconciliation`):
    /// window, client id, candidates considered, outcome (matched, ambiguous, no_match,
    /// absent_fenced, absent_never_sent); null if it left none
    #[schema(value_type = Option<Object>)]
    reconciliation: Value,
    seconds_since_started: Option<f64>,
    lane: String,
    grace_seconds: f64,
    submit_transport_failures: i64,
    #[schema(value_type = Vec<Object>)]
    recent_events: Value,
}

/// A decided key request, with the key an approval created (its secret shown once).
#[derive(ToSchema)]
pub struct KeyDecisionDoc {
    request: qtg_store::api_keys::KeyRequest,
    key: Option<crate::openapi::ApiKeyCreated>,
}

/// `GET /v3/me`: who the key is.
#[derive(ToSchema)]
pub struct Me {
    principal: String,
    /// The key's highest role
    role: RoleName,
    /// Every role it holds (its highest and the ones before it)
    roles: Vec<RoleName>,
}

/// A node with its whole history and its artifacts (`GET /v3/movements/{id}/nodes/{node_key}`).
#[derive(ToSchema)]
pub struct NodeDetail {
    movement_id: uuid::Uuid,
    node: qtg_store::NodeRow,
    /// Its calls and transitions (`node_events`), oldest first; the newest 1000
    events: Vec<NodeEventDoc>,
    artifacts: Vec<ArtifactDoc>,
}

/// One row of a node's history: a call (`method`, `outcome`) or a transition (`from` → `to`).
#[derive(ToSchema)]
pub struct NodeEventDoc {
    at: String,
    /// call or transition
    kind: String,
    method: Option<String>,
    outcome: Option<String>,
    from: Option<String>,
    to: Option<String>,
    error_code: Option<String>,
    error_detail: Option<String>,
    attempt_no: i32,
    duration_ms: Option<i32>,
    actor: Option<String>,
}

/// What a node's step produced.
#[derive(ToSchema)]
pub struct ArtifactDoc {
    attempt_no: i32,
    /// prepared_action, sign_result, proof, generated, manual_evidence
    kind: String,
    payload_hash: Option<String>,
    created_at: String,
    /// null for a sign_result (a signed transaction is not shown)
    #[schema(value_type = Option<Object>)]
    payload: Value,
}
