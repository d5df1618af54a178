//! Row types the store hands back. States are parsed into `qtg_core` enums at the edge.

use chrono::{DateTime, Utc};
use qtg_core::{Lane, NodeKind, NodeState, NodeView, RequestState};
use serde_json::Value;
use uuid::Uuid;

use crate::StoreError;

/// A text column parsed through `TryFrom<String>` (a state, a kind, a lane, a key status): a
/// value the store does not know is corrupt data, named by its column.
pub(crate) fn column<T>(name: &str, text: String) -> Result<T, StoreError>
where
    T: TryFrom<String>,
    T::Error: std::fmt::Display,
{
    T::try_from(text).map_err(|e| StoreError::corrupt(format!("column {name}: {e}")))
}

/// A claimed node with everything a worker needs to build its execution context: the node,
/// its plan node, its request and the request's plan version ([`WORK_ITEM_COLUMNS`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WorkItem {
    pub node_id: Uuid,
    pub request_id: Uuid,
    pub node_key: String,
    #[sqlx(try_from = "String")]
    pub node_kind: NodeKind,
    #[sqlx(try_from = "String")]
    pub lane: Lane,
    #[sqlx(try_from = "String")]
    pub node_state: NodeState,
    pub attempt_no: i32,
    pub provider_state: Option<String>,
    pub provider_refs: Value,
    pub provider_ref_id: Option<String>,
    pub error_code: Option<String>,
    pub submit_accepted: bool,
    pub observe_count: i32,
    /// `timeout_policy.observe_seconds` is positive and has passed since `started_at`.
    pub observe_timed_out: bool,
    pub plan_node_id: Uuid,
    pub action_type: String,
    pub executor_key: String,
    pub signer_key: Option<String>,
    pub signing_required: bool,
    pub config: Value,
    pub timeout_policy: Value,
    #[sqlx(try_from = "String")]
    pub request_state: RequestState,
    pub compiled_plan_hash: String,
    pub current_plan_hash: String,
    pub approved_plan_hash: Option<String>,
    pub intent_hash: String,
    pub approved_intent_hash: Option<String>,
    pub plan_version_id: Uuid,
    pub template_key: String,
    pub template_version: i32,
    pub intent: Value,
    pub input_params: Value,
    pub risk_controls: Value,
    /// The approval policy's fee cap, where its rule set one (`movement_requests.policy_max_fee`).
    pub policy_max_fee: Option<String>,
    /// What the execution context is built from, read by the claim's statement.
    #[sqlx(skip)]
    pub context: ClaimContext,
}

/// The request's nodes and the direct predecessors' artifacts, as the claim read them (one
/// statement, one snapshot, with the claimed row).
#[derive(Debug, Clone, Default)]
pub struct ClaimContext {
    /// Every node of the request, in `node_key` order.
    pub nodes: Vec<NodeBrief>,
    /// The current attempt's artifacts of the direct predecessors that completed, oldest first,
    /// as `{node_key, kind, attempt_no, payload, payload_hash}` objects.
    pub prior_artifacts: Vec<Value>,
}

/// A node of a movement with the movement's state — kind and states as text, as the database
/// has them: a row of a snapshot (`context.rs`), or an element of the claim's `context_nodes`.
#[derive(serde::Deserialize)]
pub(crate) struct NodeRecord {
    pub(crate) request_state: String,
    pub(crate) id: Uuid,
    pub(crate) node_key: String,
    pub(crate) node_kind: String,
    pub(crate) node_state: String,
    pub(crate) provider_refs: Value,
    pub(crate) error_code: Option<String>,
    pub(crate) submit_accepted: bool,
}

impl NodeRecord {
    /// The node, its kind and state parsed.
    pub(crate) fn brief(self) -> Result<NodeBrief, StoreError> {
        Ok(NodeBrief {
            id: self.id,
            node_key: self.node_key,
            node_kind: column("node_kind", self.node_kind)?,
            node_state: column("node_state", self.node_state)?,
            provider_refs: self.provider_refs,
            error_code: self.error_code,
            submit_accepted: self.submit_accepted,
        })
    }
}

impl ClaimContext {
    /// From the claim's two JSON columns.
    pub(crate) fn from_json(nodes: Value, prior_artifacts: Value) -> Result<Self, StoreError> {
        let nodes: Vec<NodeRecord> = serde_json::from_value(nodes).map_err(StoreError::corrupt)?;
        let nodes = nodes.into_iter().map(NodeRecord::brief).collect::<Result<_, StoreError>>()?;
        let prior_artifacts = serde_json::from_value(prior_artifacts).map_err(StoreError::corrupt)?;
        Ok(ClaimContext { nodes, prior_artifacts })
    }
}

/// The claim's context columns for the node `n` of request `r` (a [`ClaimContext`]): every
/// node of the request, and the current attempt's artifacts of the direct predecessors that
/// completed — what `context::request_nodes` and `context::node_artifacts` read, in the
/// claim's own statement.
pub(crate) const CLAIM_CONTEXT_COLUMNS: &str = "
    COALESCE((SELECT jsonb_agg(jsonb_build_object('request_state', r.request_state, 'id', m.id,
                  'node_key', m.node_key, 'node_kind', m.node_kind,
                  'node_state', m.node_state, 'provider_refs', m.provider_refs, 'error_code', m.error_code,
                  'submit_accepted', m.submit_accepted_at IS NOT NULL) ORDER BY m.node_key)
              FROM movement_request_nodes m WHERE m.request_id = n.request_id), '[]') AS context_nodes,
    COALESCE((SELECT jsonb_agg(jsonb_build_object('node_key', m.node_key, 'kind', a.kind,
                  'attempt_no', a.attempt_no, 'payload', a.payload, 'payload_hash', a.payload_hash)
                  ORDER BY a.created_at, a.id)
              FROM plan_edges e
              JOIN movement_request_nodes m ON m.request_id = n.request_id AND m.node_key = e.from_node_key
              JOIN artifacts a ON a.request_node_id = m.id AND a.attempt_no = m.attempt_no
              WHERE e.plan_version_id = r.plan_version_id AND e.to_node_key = n.node_key
                AND m.node_state = 'COMPLETED'), '[]') AS context_artifacts";

pub(crate) const WORK_ITEM_COLUMNS: &str = "
    n.id AS node_id, n.request_id, n.node_key, n.node_kind, n.lane, n.node_state, n.attempt_no,
    n.provider_state, n.provider_refs, n.provider_ref_id, n.error_code,
    (n.submit_accepted_at IS NOT NULL) AS submit_accepted, n.observe_count,
    COALESCE(jsonb_typeof(p.timeout_policy->'observe_seconds') = 'number'
             AND (p.timeout_policy->>'observe_seconds')::float8 > 0
             AND n.started_at IS NOT NULL
             AND n.started_at + make_interval(secs => LEAST((p.timeout_policy->>'observe_seconds')::float8, \
                 31536000)) < now(),
             false) AS observe_timed_out,
    p.id AS plan_node_id, p.action_type, p.executor_key, p.signer_key, p.signing_required,
    p.config, p.timeout_policy,
    r.request_state, r.compiled_plan_hash, v.compiled_plan_hash AS current_plan_hash,
    r.approved_plan_hash, r.intent_hash, r.approved_intent_hash, r.plan_version_id,
    r.template_key, r.template_version, r.intent, r.input_params, v.risk_controls, r.policy_max_fee";

pub(crate) const WORK_ITEM_FROM: &str = "
    FROM movement_request_nodes n
    JOIN movement_requests r ON r.id = n.request_id
    JOIN plan_nodes p ON p.id = n.plan_node_id
    JOIN plan_versions v ON v.id = r.plan_version_id";

/// One node of a request as derivation, advance and context building see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeBrief {
    pub id: Uuid,
    pub node_key: String,
    #[sqlx(try_from = "String")]
    pub node_kind: NodeKind,
    #[sqlx(try_from = "String")]
    pub node_state: NodeState,
    pub provider_refs: Value,
    pub error_code: Option<String>,
    pub submit_accepted: bool,
}

impl NodeBrief {
    pub fn view(&self) -> NodeView {
        NodeView {
            kind: self.node_kind,
            state: self.node_state,
            error_code: self.error_code.clone(),
            manual_review_required: self
                .provider_refs
                .get(qtg_core::markers::MANUAL_REVIEW_REQUIRED)
                .is_some_and(|v| !v.is_null() && v != &Value::Bool(false)),
            submit_accepted: self.submit_accepted,
            late_effect: self.provider_refs.get(qtg_core::markers::LATE_EFFECT).is_some(),
        }
    }
}

/// A movement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RequestRow {
    pub id: Uuid,
    pub template_id: Uuid,
    pub plan_version_id: Uuid,
    pub template_key: String,
    pub template_version: i32,
    pub compiled_plan_hash: String,
    pub intent: Value,
    pub intent_hash: String,
    pub input_params: Value,
    pub request_state: RequestState,
    pub approval_status: String,
    pub approved_by: Option<String>,
    pub approved_at: Option<DateTime<Utc>>,
    pub review_reason: Option<String>,
    pub created_by: String,
    pub idempotency_key: String,
    pub body_hash: String,
    pub callback_url: Option<String>,
    pub current_frontier: Value,
    pub expires_at: Option<DateTime<Utc>>,
    /// `expires_at` has passed by the database's clock.
    pub expired: bool,
    pub completed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Distinct approvers needed (m-of-n).
    pub approvals_required: i32,
    /// The approval policy version and rule that decided it, and the approver groups they
    /// require (none: no policy was in force).
    pub policy_version: Option<i32>,
    pub policy_rule: Option<String>,
    pub policy_groups: Option<Value>,
    /// The requester's role when it was created.
    pub created_by_role: Option<String>,
}

/// A node as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeRow {
    pub id: Uuid,
    pub node_key: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub node_kind: NodeKind,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub node_state: NodeState,
    pub action_type: String,
    pub executor_key: String,
    pub signer_key: Option<String>,
    pub attempt_no: i32,
    pub provider_state: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub provider_refs: Value,
    pub provider_ref_id: Option<String>,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub last_observed_at: Option<DateTime<Utc>>,
    pub observe_count: i32,
    pub next_observe_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// Why a READY node is not being dispatched: the pause that holds it.
    pub dispatch_hold: Option<crate::controls::Pause>,
}
