//! Templates: proposals (operator) reviewed by an admin who is not the proposer; approved
//! proposals become template versions (viewer reads).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_core::{PlanDefinition, PlanEdge, PlanNode};
use qtg_engine::templates::Proposal;
use qtg_store::templates::{ProposalRow, TemplateSummary};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{
    free_text, Admin, Body, KeyParam, ListQuery, Operator, OptBody, Page, PageQuery, Params, ProposalId, ReasonBody,
    Viewer,
};
use crate::AppState;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeBody {
    #[schema(min_length = 1, max_length = 128)]
    template_key: String,
    #[schema(max_length = 2000)]
    #[serde(default)]
    description: Option<String>,
    #[schema(value_type = Vec<crate::openapi::PlanNodeDoc>, min_items = 1)]
    nodes: Vec<PlanNode>,
    #[serde(default)]
    #[schema(value_type = Vec<crate::openapi::PlanEdgeDoc>)]
    edges: Vec<PlanEdge>,
    #[serde(default)]
    #[schema(value_type = Option<crate::openapi::RiskControlsDoc>)]
    risk_controls: Option<Value>,
}

#[utoipa::path(
    post,
    path = "/v3/template-proposals",
    summary = "Propose a template (a DAG of plan nodes); validated, pending admin approval",
    description = "Role: operator.",
    request_body = ProposeBody,
    responses((status = 201, description = "the proposal", body = ProposalRow, links(
        ("GetProposal" = (
            operation_id = "get_proposal",
            parameters(("id" = "$response.body#/id")),
            description = "read it"
        )),
        ("ApproveProposal" = (
            operation_id = "approve_proposal",
            parameters(("id" = "$response.body#/id")),
            description = "an admin approves it"
        )),
        ("RejectProposal" = (
            operation_id = "reject_proposal",
            parameters(("id" = "$response.body#/id")),
            description = "an admin rejects it"
        )),
    ))),
)]
pub async fn propose_template(
    State(s): State<AppState>,
    Operator(who): Operator,
    body: Body<ProposeBody>,
) -> Result<(StatusCode, Json<ProposalRow>), ApiError> {
    let b = body.value;
    if let Some(d) = &b.description {
        free_text("description", d, 2000)?;
    }
    // What the reviewing admin reads of each node and of the limits: printable, nothing
    // hidden (an allow-list entry with a zero-width space is another address).
    for n in &b.nodes {
        for (field, v) in [("action_type", &n.action_type), ("executor_key", &n.executor_key)] {
            qtg_core::text::check_plain(&format!("node {:?}: {field}", n.node_key), v, 128)
                .map_err(|e| ApiError::validation(e.to_string()))?;
        }
        qtg_core::text::check_plain_json(&format!("node {:?}: config", n.node_key), &n.config, 4096)
            .map_err(|e| ApiError::validation(e.to_string()))?;
    }
    if let Some(r) = &b.risk_controls {
        qtg_core::text::check_plain_json("risk_controls", r, 4096).map_err(|e| ApiError::validation(e.to_string()))?;
    }
    let plan =
        PlanDefinition { nodes: b.nodes, edges: b.edges, risk_controls: b.risk_controls.unwrap_or_else(|| json!({})) };
    let proposal = Proposal { template_key: b.template_key, description: b.description, plan };
    let row = s.engine.propose_template(&who.name, proposal, s.settings.template_proposal_ttl).await?;
    Ok((StatusCode::CREATED, Json(row)))
}

#[utoipa::path(
    get,
    path = "/v3/template-proposals",
    summary = "List template proposals, newest first (status: pending, approved, rejected, expired; template_key)",
    description = "Role: viewer.",
    params(
        ("status" = Option<String>, Query, description = "pending, approved, rejected or expired"),
        ("template_key" = Option<String>, Query, description = "only proposals for this template"),
        crate::extract::TimePageQuery
    ),
    responses((status = 200, description = "a page of proposals", body = Page<ProposalRow>)),
)]
pub async fn list_proposals(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<ProposalRow>>, ApiError> {
    let q = q.allow(&["status", "template_key"])?;
    let limit = q.limit()?;
    let status = q.status.as_deref().filter(|st| !st.is_empty());
    if status.is_some_and(|st| !matches!(st, "pending" | "approved" | "rejected" | "expired")) {
        return Err(ApiError::validation("status must be pending, approved, rejected or expired"));
    }
    let after = q.cursor.as_deref().map(crate::extract::parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows =
        qtg_store::templates::list_proposals(&mut conn, status, q.template_key.as_deref(), after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |p| crate::extract::time_cursor(p.created_at, p.id)))
}

#[utoipa::path(
    get,
    path = "/v3/template-proposals/{id}",
    summary = "Read a template proposal",
    description = "Role: viewer.",
    params(("id" = uuid::Uuid, Path, description = "the proposal id")),
    responses((status = 200, description = "the proposal", body = ProposalRow)),
)]
pub async fn get_proposal(
    State(s): State<AppState>,
    _: Viewer,
    ProposalId(id): ProposalId,
) -> Result<Json<ProposalRow>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let row = qtg_store::templates::get_proposal(&mut conn, id, false).await?;
    Ok(Json(row.ok_or_else(|| ApiError::not_found("template proposal"))?))
}

#[utoipa::path(
    post,
    path = "/v3/template-proposals/{id}/approve",
    summary = "Approve a proposal (not your own): the template's next version with its compiled_plan_hash",
    description = "Role: admin.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the proposal id")),
    responses((status = 200, description = "the new template version", body = crate::openapi::ProposalReview, links(
        ("GetTemplate" = (
            operation_id = "get_template",
            parameters(("key" = "$response.body#/template_key")),
            description = "the template with its versions"
        )),
    ))),
)]
pub async fn approve_proposal(
    State(s): State<AppState>,
    Admin(who): Admin,
    ProposalId(id): ProposalId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    review(&s, &who.name, id, &b, true).await
}

#[utoipa::path(
    post,
    path = "/v3/template-proposals/{id}/reject",
    summary = "Reject a proposal",
    description = "Role: admin.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the proposal id")),
    responses((status = 200, description = "the rejected proposal", body = crate::openapi::ProposalReview)),
)]
pub async fn reject_proposal(
    State(s): State<AppState>,
    Admin(who): Admin,
    ProposalId(id): ProposalId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    review(&s, &who.name, id, &b, false).await
}

/// An admin's decision on proposal `id`.
async fn review(
    s: &AppState,
    who: &str,
    id: uuid::Uuid,
    b: &ReasonBody,
    approve: bool,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(s.engine.review_template_proposal(who, id, approve, b.reason()?).await?))
}

#[utoipa::path(
    get,
    path = "/v3/templates",
    summary = "List templates (cursor paging)",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "a page of templates", body = Page<TemplateSummary>)),
)]
pub async fn list_templates(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<TemplateSummary>>, ApiError> {
    let q = q.allow(&[])?;
    let limit = q.limit()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::templates::list_templates(&mut conn, q.cursor.as_deref(), limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |t| t.template_key.clone()))
}

#[utoipa::path(
    get,
    path = "/v3/templates/{key}",
    summary = "A template's versions, nodes, edges, risk_controls and hashes",
    description = "Role: viewer.",
    params(("key" = String, Path, description = "template key")),
    responses((status = 200, description = "the template", body = crate::openapi::Template)),
)]
pub async fn get_template(
    State(s): State<AppState>,
    _: Viewer,
    KeyParam(key): KeyParam,
) -> Result<Json<Value>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let versions = qtg_store::templates::template_versions(&mut conn, &key).await?;
    if versions.is_empty() {
        return Err(ApiError::not_found("template"));
    }
    let mut out = Vec::new();
    for v in versions {
        if let Some(pv) = qtg_store::templates::plan_version(&mut conn, &key, Some(v)).await? {
            out.push(json!({
                "version": pv.version,
                "compiled_plan_hash": pv.compiled_plan_hash,
                "description": pv.description,
                "created_at": pv.created_at,
                "nodes": pv.plan.nodes,
                "edges": pv.plan.edges,
                "risk_controls": pv.plan.risk_controls,
                "retired_at": pv.retired_at,
            }));
        }
    }
    Ok(Json(json!({"template_key": key, "latest_version": out.first().map(|v| v["version"].clone()), "versions": out})))
}

#[utoipa::path(
    post,
    path = "/v3/templates/{key}/versions/{version}/actions/retire",
    summary = "Retire a template version: it takes no new movement or capital transfer (audited)",
    description = "Role: admin. A version is also retired when its successor is approved. Movements already \
                   created on it keep their plan and are held to the stricter of its and the current version's \
                   risk controls at approval and at their first claim.",
    request_body = ReasonBody,
    params(("key" = String, Path, description = "template key"), ("version" = i32, Path, description = "the version")),
    responses((status = 200, description = "retired", body = Object)),
)]
pub async fn retire_template_version(
    State(s): State<AppState>,
    Admin(who): Admin,
    axum::extract::Path((key, version)): axum::extract::Path<(String, String)>,
    body: Body<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    let version: i32 = version
        .parse()
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| ApiError::validation("version must be a whole number >= 1"))?;
    let reason = body.value.reason()?.unwrap_or_default().to_string();
    Ok(Json(s.engine.retire_template_version(&who.name, &key, version, &reason).await?))
}
