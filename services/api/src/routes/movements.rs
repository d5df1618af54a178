//! Movements: created by a requester (idempotent by `idempotency_key`), approved or rejected
//! by approvers who did not create them, read by viewers.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_core::hash::canonical_hash;
use qtg_core::risk::Amount;
use qtg_core::RequestState;
use qtg_engine::callbacks::{Scheme, WebhookSecret};
use qtg_engine::movements::NewMovementInput;
use qtg_store::{NodeRow, RequestRow};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{
    parse_time_cursor, plain, time_cursor, Approver, Body, ListQuery, MovementId, OptBody, Page, Params, ReasonBody,
    Requester, TimePageQuery, Viewer,
};
use crate::openapi::Movement;
use crate::AppState;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMovementBody {
    #[schema(min_length = 1, max_length = 128)]
    template_key: String,
    /// The latest version when absent
    #[schema(minimum = 1)]
    #[serde(default)]
    template_version: Option<i32>,
    #[schema(value_type = crate::openapi::IntentDoc)]
    intent: Map<String, Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    input_params: Option<Map<String, Value>>,
    /// http(s) URL with a host; private addresses only where the deployment allows them
    #[schema(max_length = 2048, pattern = "^https?://[^/?#:\\s][^\\s]*$")]
    #[serde(default)]
    callback_url: Option<String>,
    /// Signs this movement's callbacks instead of MG_CALLBACK_SECRET (never returned); needs
    /// callback_url
    #[schema(min_length = 16, max_length = 256)]
    #[serde(default)]
    callback_secret: Option<String>,
    /// How this movement's callbacks are signed: `v3` (qtg's x-qtg-callback-* headers) or
    /// `standard_webhooks` (webhook-id / webhook-timestamp / webhook-signature; a
    /// callback_secret is then one or more whsec_ secrets). MG_CALLBACK_SIGNATURE when absent
    #[schema(value_type = Option<String>, pattern = "^(v3|standard_webhooks)$")]
    #[serde(default)]
    callback_signature: Option<String>,
    /// Retrying with the same key and body answers the same movement
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
    idempotency_key: String,
}

/// The longest string an intent (or `input_params`) may hold.
const INTENT_TEXT_MAX: usize = 4096;

impl CreateMovementBody {
    /// The scheme this movement's callbacks are signed with: its own choice, else the
    /// deployment's (recorded at creation, so a later change of the default does not change it).
    fn signature(&self, s: &AppState) -> Result<Scheme, ApiError> {
        match &self.callback_signature {
            Some(name) => Scheme::parse(name).map_err(|e| ApiError::validation(format!("callback_signature: {e}"))),
            None => Ok(s.engine.settings.callbacks.signature),
        }
    }

    /// Checks what the engine takes for granted; every problem is a 400 naming the field.
    fn validate(&self, s: &AppState) -> Result<(), ApiError> {
        plain("idempotency_key", &self.idempotency_key, 200)?;
        match self.intent.get("asset") {
            Some(Value::String(a)) => {
                plain("intent.asset", a, 64)?;
            }
            _ => return Err(ApiError::validation("intent.asset must be a non-empty string")),
        }
        // Every string an approver may be shown: printable, nothing hidden or reordered.
        for (field, v) in [("intent", Some(&self.intent)), ("input_params", self.input_params.as_ref())] {
            if let Some(m) = v {
                qtg_core::text::check_plain_json(field, &Value::Object(m.clone()), INTENT_TEXT_MAX)
                    .map_err(|e| ApiError::validation(e.to_string()))?;
            }
        }
        match self.intent.get("amount").and_then(Value::as_str).and_then(Amount::parse) {
            Some(a) if !a.is_zero() => {}
            _ => {
                return Err(ApiError::validation(
                    "intent.amount must be a decimal string greater than 0, e.g. \"100.50\"",
                ))
            }
        }
        for (field, v) in [("intent", Some(&self.intent)), ("input_params", self.input_params.as_ref())] {
            if let Some(path) = v.and_then(|m| qtg_core::protocol::inexact_integer(&Value::Object(m.clone()))) {
                return Err(ApiError::validation(qtg_core::plan::inexact(&format!("{field}{path}"))));
            }
        }
        for key in ["source", "destination"] {
            if self.intent.get(key).is_some_and(|v| !(v.is_string() || v.is_object() || v.is_null())) {
                return Err(ApiError::validation(format!("intent.{key} must be a string or an object")));
            }
        }
        if let Some(u) = &self.callback_url {
            // The delivery guard's own check: a URL it would always refuse is refused now.
            let st = &s.settings;
            qtg_engine::callbacks::check_url_syntax(u, st.callback_allow_private, &st.callback_allowed_hosts)
                .map_err(ApiError::validation)?;
        }
        if self.callback_secret.as_ref().is_some_and(|c| !(16..=256).contains(&c.chars().count())) {
            return Err(ApiError::validation("callback_secret must be 16-256 characters"));
        }
        if self.callback_secret.is_some() && self.callback_url.is_none() {
            return Err(ApiError::validation("callback_secret needs a callback_url"));
        }
        let scheme = self.signature(s)?;
        if scheme == Scheme::StandardWebhooks {
            match &self.callback_secret {
                Some(own) => {
                    WebhookSecret::parse_list(own)
                        .map_err(|e| ApiError::validation(format!("callback_secret: {e}")))?;
                }
                None if s.engine.settings.callbacks.webhook_secrets.is_empty() => {
                    return Err(ApiError::validation(
                        "callback_signature standard_webhooks needs a callback_secret (whsec_…): this deployment \
                         has no MG_CALLBACK_WEBHOOK_SECRETS",
                    ))
                }
                None => {}
            }
        }
        if self.template_version.is_some_and(|v| v < 1) {
            return Err(ApiError::validation("template_version must be >= 1"));
        }
        Ok(())
    }
}

#[utoipa::path(
    post,
    path = "/v3/movements",
    summary = "Create a movement: PENDING_APPROVAL, nodes BLOCKED. Same idempotency_key + same body answers 200 \
               with the same movement; another body 409 IDEMPOTENCY_CONFLICT. Risk limits answer 422 \
               RISK_LIMIT_EXCEEDED naming the limit",
    description = "Role: requester.",
    request_body = CreateMovementBody,
    responses(
        (status = 201, description = "the new movement", body = Movement, links(
            ("GetMovement" = (
                operation_id = "get_movement",
                parameters(("id" = "$response.body#/id")),
                description = "follow it"
            )),
            ("ApproveMovement" = (
                operation_id = "approve_movement",
                parameters(("id" = "$response.body#/id")),
                description = "another principal approves it"
            )),
            ("RejectMovement" = (
                operation_id = "reject_movement",
                parameters(("id" = "$response.body#/id")),
                description = "another principal rejects it"
            )),
            ("CancelMovement" = (
                operation_id = "cancel_movement",
                parameters(("id" = "$response.body#/id")),
                description = "an operator cancels it"
            )),
            ("ResumeMovement" = (
                operation_id = "resume_movement",
                parameters(("id" = "$response.body#/id")),
                description = "an operator resumes it from MANUAL_INTERVENTION"
            )),
            ("DiagnoseNode" = (
                operation_id = "diagnose_node",
                parameters(("id" = "$response.body#/id"), ("node_key" = "$response.body#/nodes/0/node_key")),
                description = "the runbook diagnosis of a node"
            )),
            ("RetryNode" = (
                operation_id = "retry_node",
                parameters(("id" = "$response.body#/id"), ("node_key" = "$response.body#/nodes/0/node_key")),
                description = "retry a FAILED node"
            )),
            ("CompleteManual" = (
                operation_id = "complete_manual",
                parameters(("id" = "$response.body#/id"), ("node_key" = "$response.body#/nodes/0/node_key")),
                description = "complete a manual node"
            )),
            ("MovementAudit" = (
                operation_id = "list_audit_events",
                parameters(("movement_id" = "$response.body#/id")),
                description = "its audit trail"
            )),
            ("MovementCallbacks" = (
                operation_id = "list_callbacks",
                parameters(("movement_id" = "$response.body#/id")),
                description = "its callbacks"
            )),
        )),
        (status = 200, description = "the movement this idempotency_key already created", body = Movement),
    ),
)]
pub async fn create_movement(
    State(s): State<AppState>,
    Requester(who): Requester,
    body: Body<CreateMovementBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    body.value.validate(&s)?;
    let callback_signature = body.value.signature(&s)?.as_str().to_string();
    let b = body.value;
    let input = NewMovementInput {
        template_key: b.template_key,
        template_version: b.template_version,
        intent: Value::Object(b.intent),
        input_params: Value::Object(b.input_params.unwrap_or_default()),
        callback_url: b.callback_url.or_else(|| s.settings.callback_default_url.clone()),
        callback_secret: b.callback_secret,
        callback_signature: Some(callback_signature),
        idempotency_key: b.idempotency_key,
        body_hash: canonical_hash(&body.raw),
        created_by_role: Some(who.highest.as_str().to_string()),
    };
    let (row, fresh) = s.engine.create_movement(&who.name, input, s.settings.approval_ttl).await?;
    let (row, nodes) = s.engine.movement(row.id).await?;
    let status = if fresh { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(movement_json(&row, Some(&nodes)))))
}

/// A movement with its nodes (each READY node held by a pause says so in `dispatch_hold`) and
/// its approvals: what every movement operation answers.
pub async fn full_movement(s: &AppState, id: Uuid) -> Result<Json<Value>, ApiError> {
    let (row, nodes) = s.engine.movement(id).await?;
    let mut conn = s.pool.acquire().await?;
    let approvals = qtg_store::movements::approvals(&mut conn, id).await?;
    let mut out = movement_json(&row, Some(&nodes));
    // What the policy that decided it asks, and how far the approvals go (each approver fills
    // one seat of one group).
    if let (Some(version), Some(groups)) = (row.policy_version, &row.policy_groups) {
        let policy = qtg_store::policy::get_version(&mut conn, version, false)
            .await?
            .and_then(|v| qtg_core::policy::Policy::from_json(&v.document).ok());
        let groups: Vec<qtg_core::policy::ApproverGroup> = serde_json::from_value(groups.clone()).unwrap_or_default();
        if let Some(policy) = policy {
            let given: Vec<(String, String)> = approvals
                .iter()
                .map(|a| (a.approver.clone(), a.approver_role.clone().unwrap_or_else(|| "approver".into())))
                .collect();
            out["policy"] = json!({"version": version, "rule": row.policy_rule,
                                   "progress": policy.progress(&groups, &given, &row.created_by)});
        }
    }
    out["approvals"] = json!(approvals);
    Ok(Json(out))
}

/// The ids a search by `prefix` covers: a movement id, or its first 4 or more hex digits (dashes
/// ignored), as the range from the prefix padded with 0 to the prefix padded with f.
fn id_prefix_range(prefix: &str) -> Result<(uuid::Uuid, uuid::Uuid), ApiError> {
    let bad = || ApiError::validation("id must be a movement id or its first 4 or more hex digits");
    let hex: String = prefix.chars().filter(|c| *c != '-').collect::<String>().to_ascii_lowercase();
    if hex.len() < 4 || hex.len() > 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let pad = |c: char| format!("{hex}{}", c.to_string().repeat(32 - hex.len()));
    let lo = uuid::Uuid::parse_str(&pad('0')).map_err(|_| bad())?;
    let hi = uuid::Uuid::parse_str(&pad('f')).map_err(|_| bad())?;
    Ok((lo, hi))
}

/// A movement as the API shows it; lists leave the nodes out.
pub fn movement_json(r: &RequestRow, nodes: Option<&[NodeRow]>) -> Value {
    let mut v = json!({
        "id": r.id,
        "template_key": r.template_key,
        "template_version": r.template_version,
        "compiled_plan_hash": r.compiled_plan_hash,
        "request_state": r.request_state,
        "approval_status": r.approval_status,
        "approved_by": r.approved_by,
        "approved_at": r.approved_at,
        "review_reason": r.review_reason,
        "approvals_required": r.approvals_required,
        "policy_version": r.policy_version,
        "policy_rule": r.policy_rule,
        "intent": r.intent,
        "intent_hash": r.intent_hash,
        "input_params": r.input_params,
        "callback_url": r.callback_url.as_deref().map(qtg_core::urls::redact),
        "idempotency_key": r.idempotency_key,
        "created_by": r.created_by,
        "current_frontier": r.current_frontier,
        "expires_at": r.expires_at,
        "completed_at": r.completed_at,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
    });
    if let Some(nodes) = nodes {
        v["nodes"] = json!(nodes);
    }
    v
}

#[utoipa::path(
    get,
    path = "/v3/movements/{id}",
    summary = "A movement with its nodes (a READY node held by a pause carries dispatch_hold) and approvals",
    description = "Role: viewer.",
    params(("id" = uuid::Uuid, Path, description = "the movement id")),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn get_movement(
    State(s): State<AppState>,
    _: Viewer,
    MovementId(id): MovementId,
) -> Result<Json<Value>, ApiError> {
    full_movement(&s, id).await
}

#[utoipa::path(
    get,
    path = "/v3/movements",
    summary = "List and search movements, newest first (state, template, creator, time, id, idempotency key, \
               destination, asset, amount range, a node's state, waiting for my approval; cursor paging)",
    description = "Role: viewer. Each item carries approvals_given (of approvals_required).",
    params(
        ("state" = Option<crate::openapi::MovementState>, Query, description = "only movements in this state"),
        ("template_key" = Option<String>, Query, description = "only movements of this template"),
        ("created_by" = Option<String>, Query, description = "only movements created by this principal"),
        (
            "since" = Option<chrono::DateTime<chrono::Utc>>,
            Query,
            description = "only movements created at or after this RFC 3339 time"
        ),
        (
            "until" = Option<chrono::DateTime<chrono::Utc>>,
            Query,
            description = "only movements created before this time"
        ),
        ("id" = Option<String>, Query, description = "a movement id or its first characters (at least 4 hex digits)"),
        ("idempotency_key" = Option<String>, Query, description = "the idempotency key it was created with"),
        ("destination" = Option<String>, Query, description = "the intent's destination (any case)"),
        ("asset" = Option<String>, Query, description = "the intent's asset (any case)"),
        ("amount_min" = Option<String>, Query, description = "the intent's amount at least (a decimal)"),
        ("amount_max" = Option<String>, Query, description = "the intent's amount at most (a decimal)"),
        (
            "node_state" = Option<String>,
            Query,
            description = "only movements with a node in this state (UNKNOWN: recovery's or a person's)"
        ),
        (
            "awaiting_approval" = Option<String>,
            Query,
            description = "`me`: only PENDING_APPROVAL movements the caller may still approve (not theirs, not \
                           approved by them)"
        ),
        TimePageQuery
    ),
    responses((status = 200, description = "a page of movements (without nodes)", body = Page<Movement>)),
)]
pub async fn list_movements(
    State(s): State<AppState>,
    Viewer(who): Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<Value>>, ApiError> {
    let q = q.allow(&[
        "state",
        "template_key",
        "created_by",
        "since",
        "until",
        "id",
        "idempotency_key",
        "destination",
        "asset",
        "amount_min",
        "amount_max",
        "node_state",
        "awaiting_approval",
    ])?;
    let limit = q.limit()?;
    let (since, until) = (q.time("since")?, q.time("until")?);
    if let Some(st) = &q.state {
        st.parse::<RequestState>()
            .map_err(|_| ApiError::validation(format!("state {st:?} is not a movement state")))?;
    }
    if let Some(st) = &q.node_state {
        st.parse::<qtg_core::NodeState>()
            .map_err(|_| ApiError::validation(format!("node_state {st:?} is not a node state")))?;
    }
    let id_range = q.id.as_deref().map(id_prefix_range).transpose()?;
    for (name, v) in [("amount_min", &q.amount_min), ("amount_max", &q.amount_max)] {
        if v.as_deref().is_some_and(|a| qtg_core::risk::Amount::parse(a).is_none()) {
            return Err(ApiError::validation(format!("{name} must be a decimal amount, e.g. 125.50")));
        }
    }
    let awaiting = match q.awaiting_approval.as_deref() {
        None | Some("") => None,
        Some("me") => Some(who.name.as_str()),
        Some(other) => return Err(ApiError::validation(format!("awaiting_approval takes `me`, not {other:?}"))),
    };
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let filter = qtg_store::movements::MovementFilter {
        state: q.state.as_deref(),
        template_key: q.template_key.as_deref(),
        created_by: q.created_by.as_deref(),
        since,
        until,
        id_range,
        idempotency_key: q.idempotency_key.as_deref(),
        destination: q.destination.as_deref(),
        asset: q.asset.as_deref(),
        amount_min: q.amount_min.as_deref(),
        amount_max: q.amount_max.as_deref(),
        node_state: q.node_state.as_deref(),
        awaiting_approval_by: awaiting,
    };
    let rows = qtg_store::movements::list(&mut conn, &filter, after, limit + 1).await?;
    let page = Page::from_rows(rows, limit, |r| time_cursor(r.created_at, r.id)).0;
    let ids: Vec<uuid::Uuid> = page.items.iter().map(|r| r.id).collect();
    let given: std::collections::HashMap<uuid::Uuid, i64> =
        qtg_store::movements::approval_counts(&mut conn, &ids).await?.into_iter().collect();
    let items = page
        .items
        .iter()
        .map(|r| {
            let mut v = movement_json(r, None);
            v["approvals_given"] = json!(given.get(&r.id).copied().unwrap_or(0));
            v
        })
        .collect();
    Ok(Json(Page { items, next_cursor: page.next_cursor }))
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/approve",
    summary = "Approve (not your own; bound to the intent and plan hashes shown). Risk limits are checked again; \
               above the template's threshold m distinct approvers are needed (the movement stays PENDING_APPROVAL \
               until then). 409 EXECUTOR_DOWN when a bound executor or signer is down",
    description = "Role: approver.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the movement id")),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn approve_movement(
    State(s): State<AppState>,
    Approver(who): Approver,
    MovementId(id): MovementId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    review(&s, &who, id, &b, true).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/reject",
    summary = "Reject a PENDING_APPROVAL movement",
    description = "Role: approver.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the movement id")),
    responses((status = 200, description = "the movement", body = Movement)),
)]
pub async fn reject_movement(
    State(s): State<AppState>,
    Approver(who): Approver,
    MovementId(id): MovementId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    review(&s, &who, id, &b, false).await
}

/// An approver's decision on movement `id`; answers the movement.
async fn review(
    s: &AppState,
    who: &crate::auth::Principal,
    id: Uuid,
    b: &ReasonBody,
    approve: bool,
) -> Result<Json<Value>, ApiError> {
    if approve {
        s.engine.approve_movement(&who.name, who.highest.as_str(), id, b.reason()?).await?;
    } else {
        s.engine.reject_movement(&who.name, id, b.reason()?).await?;
    }
    full_movement(s, id).await
}
