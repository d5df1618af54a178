//! `/v3` handlers: authenticate, authorise, validate, call the engine, shape the answer.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use qtg_core::hash::canonical_hash;
use qtg_core::{PlanDefinition, PlanEdge, PlanNode, RequestState};
use qtg_engine::movements::NewMovementInput;
use qtg_engine::templates::Proposal;
use qtg_store::{NodeRow, RequestRow};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::auth::{hash_key, Principal, Role};
use crate::error::ApiError;
use crate::AppState;

/// JSON body whose every problem (syntax, unknown field, wrong type) is a 400
/// `VALIDATION_ERROR` naming it. Also keeps the raw value for body hashing.
pub struct Body<T> {
    pub value: T,
    pub raw: Value,
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(raw): Json<Value> = Json::from_request(req, state).await.map_err(|e: JsonRejection| match e {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "VALIDATION_ERROR",
                "Content-Type must be application/json",
            ),
            JsonRejection::BytesRejection(_) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "VALIDATION_ERROR",
                format!("body is larger than {} bytes", crate::BODY_LIMIT),
            ),
            other => ApiError::validation(format!("invalid JSON body: {}", other.body_text())),
        })?;
        let value = serde_path_to_value::<T>(&raw)?;
        Ok(Body { value, raw })
    }
}

fn serde_path_to_value<T: DeserializeOwned>(raw: &Value) -> Result<T, ApiError> {
    if has_nul(raw) {
        // PostgreSQL text and jsonb cannot hold U+0000.
        return Err(ApiError::validation("strings and keys must not contain the NUL character (\\u0000)"));
    }
    serde_json::from_value(raw.clone()).map_err(|e| ApiError::validation(format!("invalid body: {e}")))
}

fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Refuses a request whose path or query carries an encoded NUL (`%00`) before any handler
/// sees it: no database text can hold it.
pub async fn refuse_nul(req: Request, next: axum::middleware::Next) -> Response {
    let uri = req.uri().to_string();
    if uri.to_ascii_lowercase().contains("%00") {
        return ApiError::validation("the path and query must not contain %00").into_response();
    }
    next.run(req).await
}

/// Each request is its own trace (`api.request`): what an approval or an operator action
/// changes — and the callbacks it enqueues — carries that trace.
pub async fn trace_request(req: Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument;
    let span = tracing::info_span!(
        parent: None,
        "api.request",
        otel.name = "api.request",
        otel.kind = "server",
        http.method = %req.method(),
        http.target = %req.uri().path(),
        http.status_code = tracing::field::Empty,
    );
    let response = next.run(req).instrument(span.clone()).await;
    span.record("http.status_code", response.status().as_u16());
    response
}

/// An optional body: empty means `{}`.
pub struct OptBody<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::to_bytes(req.into_body(), crate::BODY_LIMIT)
            .await
            .map_err(|_| ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "VALIDATION_ERROR", "body too large"))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptBody(T::default()));
        }
        let raw: Value =
            serde_json::from_slice(&bytes).map_err(|e| ApiError::validation(format!("invalid JSON body: {e}")))?;
        Ok(OptBody(serde_path_to_value(&raw)?))
    }
}

fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found(what))
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("route")
}

// ---------------------------------------------------------------- templates

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeBody {
    template_key: String,
    #[serde(default)]
    description: Option<String>,
    #[schema(value_type = Vec<crate::openapi::PlanNodeDoc>)]
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
    tag = "qtg",
    summary = "Propose a template (a DAG of plan nodes); validated, pending admin approval",
    description = "Role: operator.",
    request_body = ProposeBody,
    responses((status = 201, description = "the proposal", body = qtg_store::templates::ProposalRow), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn propose_template(
    State(s): State<AppState>,
    who: Principal,
    body: Result<Body<ProposeBody>, ApiError>,
) -> Result<Response, ApiError> {
    who.require(Role::Operator)?;
    let body = body?;
    let b = body.value;
    if b.description.as_ref().is_some_and(|d| d.len() > 2000) {
        return Err(ApiError::validation("description is at most 2000 characters"));
    }
    let plan =
        PlanDefinition { nodes: b.nodes, edges: b.edges, risk_controls: b.risk_controls.unwrap_or_else(|| json!({})) };
    let row = s
        .engine
        .propose_template(
            &who.name,
            Proposal { template_key: b.template_key, description: b.description, plan },
            s.settings.template_proposal_ttl_seconds,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(json!(row))).into_response())
}

#[utoipa::path(
    get,
    path = "/v3/template-proposals/{id}",
    tag = "qtg",
    summary = "Read a template proposal",
    description = "Role: viewer.",
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the proposal", body = qtg_store::templates::ProposalRow), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn get_proposal(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let id = parse_id(&id, "template proposal")?;
    let mut conn = s.pool.acquire().await?;
    let row = qtg_store::templates::get_proposal(&mut conn, id, false)
        .await?
        .ok_or_else(|| ApiError::not_found("template proposal"))?;
    Ok(Json(json!(row)))
}

#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    #[serde(default)]
    reason: Option<String>,
}

impl ReasonBody {
    fn reason(&self) -> Result<Option<&str>, ApiError> {
        match self.reason.as_deref() {
            Some(r) if r.len() > 2000 => Err(ApiError::validation("reason is at most 2000 characters")),
            other => Ok(other),
        }
    }
}

#[utoipa::path(
    post,
    path = "/v3/template-proposals/{id}/approve",
    tag = "qtg",
    summary = "Approve a proposal (not your own): the template's next version with its compiled_plan_hash",
    description = "Role: admin.",
    request_body(content = Option<ReasonBody>, description = "optional; an empty body is {}", content_type = "application/json"),
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the new template version", body = Object), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn approve_proposal(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    b: Result<OptBody<ReasonBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Admin)?;
    let OptBody(b) = b?;
    let id = parse_id(&id, "template proposal")?;
    Ok(Json(s.engine.review_template_proposal(&who.name, id, true, b.reason()?).await?))
}

#[utoipa::path(
    post,
    path = "/v3/template-proposals/{id}/reject",
    tag = "qtg",
    summary = "Reject a proposal",
    description = "Role: admin.",
    request_body(content = Option<ReasonBody>, description = "optional; an empty body is {}", content_type = "application/json"),
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the rejected proposal", body = Object), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn reject_proposal(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    b: Result<OptBody<ReasonBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Admin)?;
    let OptBody(b) = b?;
    let id = parse_id(&id, "template proposal")?;
    Ok(Json(s.engine.review_template_proposal(&who.name, id, false, b.reason()?).await?))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

impl PageQuery {
    fn limit(&self) -> Result<i64, ApiError> {
        match self.limit.as_deref() {
            None => Ok(50),
            Some(l) => match l.parse::<i64>() {
                Ok(n) if (1..=200).contains(&n) => Ok(n),
                _ => Err(ApiError::validation("limit must be an integer between 1 and 200")),
            },
        }
    }
}

/// One page of a small roster listed whole from the database: ordered by `key`, after the
/// cursor (the last key of the previous page). `state` is not a filter here.
fn key_page<T: serde::Serialize>(
    items: Vec<T>,
    key: impl Fn(&T) -> String,
    q: &PageQuery,
) -> Result<Json<Value>, ApiError> {
    if q.state.is_some() {
        return Err(ApiError::validation("unknown query parameter state"));
    }
    let limit = q.limit()? as usize;
    let mut keyed: Vec<(String, T)> = items.into_iter().map(|i| (key(&i), i)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let after: Vec<(String, T)> = match &q.cursor {
        Some(c) => keyed.into_iter().filter(|(k, _)| k > c).collect(),
        None => keyed,
    };
    let next = (after.len() > limit).then(|| after[limit - 1].0.clone());
    let items: Vec<T> = after.into_iter().take(limit).map(|(_, i)| i).collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}

fn page_query(q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>) -> Result<PageQuery, ApiError> {
    q.map(|Query(q)| q).map_err(|e| ApiError::validation(format!("invalid query: {}", e.body_text())))
}

#[utoipa::path(
    get,
    path = "/v3/templates",
    tag = "qtg",
    summary = "List templates (cursor paging)",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "a page of templates", body = crate::openapi::Page<qtg_store::templates::TemplateSummary>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_templates(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = page_query(q)?;
    if q.state.is_some() {
        return Err(ApiError::validation("unknown query parameter state"));
    }
    let limit = q.limit()?;
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::templates::list_templates(&mut conn, q.cursor.as_deref(), limit + 1).await?;
    let next = (items.len() as i64 > limit).then(|| items[limit as usize - 1].template_key.clone());
    let items: Vec<_> = items.into_iter().take(limit as usize).collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}

#[utoipa::path(
    get,
    path = "/v3/templates/{key}",
    tag = "qtg",
    summary = "A template's versions, nodes, edges, risk_controls and hashes",
    description = "Role: viewer.",
    params(("key" = String, Path, description = "template key")),
    responses((status = 200, description = "the template", body = Object), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn get_template(
    State(s): State<AppState>,
    who: Principal,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
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
            }));
        }
    }
    Ok(Json(json!({"template_key": key, "latest_version": out.first().map(|v| v["version"].clone()), "versions": out})))
}

// ---------------------------------------------------------------- movements

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMovementBody {
    template_key: String,
    #[serde(default)]
    template_version: Option<i32>,
    #[schema(value_type = crate::openapi::IntentDoc)]
    intent: Map<String, Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    input_params: Option<Map<String, Value>>,
    #[serde(default)]
    callback_url: Option<String>,
    /// Signs this movement's callbacks instead of MG_CALLBACK_SECRET (16-256 chars; never
    /// returned).
    #[serde(default)]
    callback_secret: Option<String>,
    idempotency_key: String,
}

/// A positive decimal string: digits, at most one point, no sign or exponent.
pub fn valid_amount(s: &str) -> bool {
    let mut parts = s.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next();
    let digits_ok = !int.is_empty()
        && int.chars().all(|c| c.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()));
    digits_ok && s.len() <= 78 && s.chars().any(|c| c.is_ascii_digit() && c != '0')
}

pub fn valid_callback_url(u: &str) -> bool {
    let rest = u.strip_prefix("https://").or_else(|| u.strip_prefix("http://"));
    match rest {
        Some(rest) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            u.len() <= 2048
                && !host.is_empty()
                && !host.starts_with(':')
                && !u.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

#[utoipa::path(
    post,
    path = "/v3/movements",
    tag = "qtg",
    summary = "Create a movement: PENDING_APPROVAL, nodes BLOCKED. Same idempotency_key + same body answers 200 with the same movement; another body 409 IDEMPOTENCY_CONFLICT. Risk limits answer 422 RISK_LIMIT_EXCEEDED naming the limit",
    description = "Role: requester.",
    request_body = CreateMovementBody,
    responses((status = 201, description = "the new movement", body = crate::openapi::Movement), (status = 200, description = "the movement this idempotency_key already created", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn create_movement(
    State(s): State<AppState>,
    who: Principal,
    body: Result<Body<CreateMovementBody>, ApiError>,
) -> Result<Response, ApiError> {
    who.require(Role::Requester)?;
    let body = body?;
    let b = body.value;
    if b.idempotency_key.trim().is_empty() || b.idempotency_key.len() > 200 {
        return Err(ApiError::validation("idempotency_key must be 1-200 characters"));
    }
    match b.intent.get("asset") {
        Some(Value::String(a)) if !a.is_empty() && a.len() <= 64 => {}
        _ => return Err(ApiError::validation("intent.asset must be a non-empty string")),
    }
    match b.intent.get("amount") {
        Some(Value::String(a)) if valid_amount(a) => {}
        _ => {
            return Err(ApiError::validation("intent.amount must be a decimal string greater than 0, e.g. \"100.50\""))
        }
    }
    for key in ["source", "destination"] {
        if let Some(v) = b.intent.get(key) {
            if !(v.is_string() || v.is_object() || v.is_null()) {
                return Err(ApiError::validation(format!("intent.{key} must be a string or an object")));
            }
        }
    }
    if let Some(u) = &b.callback_url {
        if !valid_callback_url(u) {
            return Err(ApiError::validation("callback_url must be an http(s) URL with a host"));
        }
        // A URL the delivery guard would always refuse is refused now.
        qtg_engine::callbacks::check_url_syntax(
            u,
            s.settings.callback_allow_private,
            &s.settings.callback_allowed_hosts,
        )
        .map_err(ApiError::validation)?;
    }
    if b.callback_secret.as_ref().is_some_and(|c| !(16..=256).contains(&c.len())) {
        return Err(ApiError::validation("callback_secret must be 16-256 characters"));
    }
    if b.callback_secret.is_some() && b.callback_url.is_none() {
        return Err(ApiError::validation("callback_secret needs a callback_url"));
    }
    if b.template_version.is_some_and(|v| v < 1) {
        return Err(ApiError::validation("template_version must be >= 1"));
    }
    let input = NewMovementInput {
        template_key: b.template_key,
        template_version: b.template_version,
        intent: Value::Object(b.intent),
        input_params: Value::Object(b.input_params.unwrap_or_default()),
        callback_url: b.callback_url.or_else(|| s.settings.callback_default_url.clone()),
        callback_secret: b.callback_secret,
        idempotency_key: b.idempotency_key,
        body_hash: canonical_hash(&body.raw),
    };
    let (row, fresh) = s.engine.create_movement(&who.name, input, s.settings.approval_ttl_seconds).await?;
    let (row, nodes) = s.engine.movement(row.id).await?;
    let status = if fresh { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(movement_json(&row, &nodes))).into_response())
}

/// A movement with its nodes (each READY node held by a pause says so in `dispatch_hold`) and
/// its approvals.
async fn full_movement(s: &AppState, id: Uuid) -> Result<Json<Value>, ApiError> {
    let (row, nodes) = s.engine.movement(id).await?;
    let mut conn = s.pool.acquire().await?;
    let approvals = qtg_store::movements::approvals(&mut conn, id).await?;
    let mut out = movement_json(&row, &nodes);
    out["approvals"] = json!(approvals);
    Ok(Json(out))
}

pub fn movement_json(r: &RequestRow, nodes: &[NodeRow]) -> Value {
    json!({
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
        "intent": r.intent,
        "intent_hash": r.intent_hash,
        "input_params": r.input_params,
        "callback_url": r.callback_url,
        "idempotency_key": r.idempotency_key,
        "created_by": r.created_by,
        "current_frontier": r.current_frontier,
        "expires_at": r.expires_at,
        "completed_at": r.completed_at,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "nodes": nodes,
    })
}

#[utoipa::path(
    get,
    path = "/v3/movements/{id}",
    tag = "qtg",
    summary = "A movement with its nodes (a READY node held by a pause carries dispatch_hold) and approvals",
    description = "Role: viewer.",
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn get_movement(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    full_movement(&s, parse_id(&id, "movement")?).await
}

fn parse_cursor(c: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let bad = || ApiError::validation("cursor is not one this API returned");
    let (ts, id) = c.split_once('_').ok_or_else(bad)?;
    let micros: i64 = ts.parse().map_err(|_| bad())?;
    Ok((DateTime::from_timestamp_micros(micros).ok_or_else(bad)?, id.parse().map_err(|_| bad())?))
}

#[utoipa::path(
    get,
    path = "/v3/movements",
    tag = "qtg",
    summary = "List movements, newest first (state filter, cursor paging)",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "a page of movements (without nodes)", body = crate::openapi::Page<crate::openapi::Movement>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_movements(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = page_query(q)?;
    let limit = q.limit()?;
    if let Some(st) = &q.state {
        st.parse::<RequestState>()
            .map_err(|_| ApiError::validation(format!("state {st:?} is not a movement state")))?;
    }
    let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::movements::list(&mut conn, q.state.as_deref(), after, limit + 1).await?;
    let next = (rows.len() as i64 > limit).then(|| {
        let last = &rows[limit as usize - 1];
        format!("{}_{}", last.created_at.timestamp_micros(), last.id)
    });
    let items: Vec<Value> = rows
        .iter()
        .take(limit as usize)
        .map(|r| movement_json(r, &[]))
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("nodes");
            }
            v
        })
        .collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/approve",
    tag = "qtg",
    summary = "Approve (not your own; bound to the intent and plan hashes shown). Risk limits are checked again; above the template's threshold m distinct approvers are needed (the movement stays PENDING_APPROVAL until then). 409 EXECUTOR_DOWN when a bound executor or signer is down",
    description = "Role: approver.",
    request_body(content = Option<ReasonBody>, description = "optional; an empty body is {}", content_type = "application/json"),
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn approve_movement(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    b: Result<OptBody<ReasonBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Approver)?;
    let OptBody(b) = b?;
    let id = parse_id(&id, "movement")?;
    s.engine.approve_movement(&who.name, id, b.reason()?).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/reject",
    tag = "qtg",
    summary = "Reject a PENDING_APPROVAL movement",
    description = "Role: approver.",
    request_body(content = Option<ReasonBody>, description = "optional; an empty body is {}", content_type = "application/json"),
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn reject_movement(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    b: Result<OptBody<ReasonBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Approver)?;
    let OptBody(b) = b?;
    let id = parse_id(&id, "movement")?;
    s.engine.reject_movement(&who.name, id, b.reason()?).await?;
    full_movement(&s, id).await
}

// ---------------------------------------------------------------- api keys

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    principal: String,
    roles: Vec<String>,
}

#[utoipa::path(
    post,
    path = "/v3/api-keys",
    tag = "qtg",
    summary = "Create an API key; the secret is shown once and stored only as a hash",
    description = "Role: admin.",
    request_body = CreateKeyBody,
    responses((status = 201, description = "the key with its secret", body = crate::openapi::ApiKeyCreated), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn create_api_key(
    State(s): State<AppState>,
    who: Principal,
    body: Result<Body<CreateKeyBody>, ApiError>,
) -> Result<Response, ApiError> {
    who.require(Role::Admin)?;
    let body = body?;
    let b = body.value;
    if b.principal.trim().is_empty() || b.principal.len() > 128 {
        return Err(ApiError::validation("principal must be 1-128 characters"));
    }
    if b.roles.is_empty() || b.roles.iter().any(|r| Role::parse(r).is_none()) {
        return Err(ApiError::validation("roles must be a non-empty list of viewer|requester|approver|operator|admin"));
    }
    let secret = format!("qtg_{}", hex::encode(rand::random::<[u8; 24]>()));
    let id = Uuid::new_v4();
    let mut tx = s.pool.begin().await?;
    qtg_store::api_keys::insert(&mut tx, id, &b.principal, &b.roles, &hash_key(&secret), Some(&who.name)).await?;
    qtg_store::audit::record(
        &mut tx,
        &qtg_store::audit::AuditRecord {
            actor: &who.name,
            action: "api_key.create",
            entity_type: "api_key",
            entity_id: id.to_string(),
            movement_id: None,
            data: json!({"principal": b.principal, "roles": b.roles}),
        },
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id, "principal": b.principal, "roles": b.roles, "secret": secret})))
        .into_response())
}

#[utoipa::path(
    get,
    path = "/v3/api-keys",
    tag = "qtg",
    summary = "List API keys (never their secrets or hashes), newest first",
    description = "Role: admin.",
    params(PageQuery),
    responses((status = 200, description = "a page of keys", body = crate::openapi::Page<qtg_store::api_keys::ApiKeyInfo>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_api_keys(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Admin)?;
    let q = page_query(q)?;
    if q.state.is_some() {
        return Err(ApiError::validation("unknown query parameter state"));
    }
    let limit = q.limit()?;
    let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::api_keys::list(&mut conn, after, limit + 1).await?;
    let next = (rows.len() as i64 > limit).then(|| {
        let last = &rows[limit as usize - 1];
        format!("{}_{}", last.created_at.timestamp_micros(), last.id)
    });
    let items: Vec<_> = rows.into_iter().take(limit as usize).collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}

#[utoipa::path(
    delete,
    path = "/v3/api-keys/{id}",
    tag = "qtg",
    summary = "Revoke an API key",
    description = "Role: admin.",
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 204, description = "revoked"), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn revoke_api_key(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    who.require(Role::Admin)?;
    let id = parse_id(&id, "api key")?;
    let mut tx = s.pool.begin().await?;
    if !qtg_store::api_keys::revoke(&mut tx, id).await? {
        return Err(ApiError::not_found("api key"));
    }
    qtg_store::audit::record(
        &mut tx,
        &qtg_store::audit::AuditRecord {
            actor: &who.name,
            action: "api_key.revoke",
            entity_type: "api_key",
            entity_id: id.to_string(),
            movement_id: None,
            data: json!({}),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts() {
        for ok in ["1", "100.50", "0.000001", "12345678901234567890"] {
            assert!(valid_amount(ok), "{ok}");
        }
        for bad in ["0", "0.0", "-1", "1e5", ".5", "5.", "1.2.3", "", " 1", "abc", "+1"] {
            assert!(!valid_amount(bad), "{bad}");
        }
    }

    #[test]
    fn callback_urls() {
        assert!(valid_callback_url("https://example.com/hook"));
        assert!(valid_callback_url("http://10.0.0.1:8080/x"));
        for bad in ["ftp://x", "https://", "https:///x", "example.com", "https://a b"] {
            assert!(!valid_callback_url(bad), "{bad}");
        }
    }
}

// ---------------------------------------------------------------- audit

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default)]
    movement_id: Option<String>,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

fn parse_time(v: &str, name: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| ApiError::validation(format!("{name} must be an RFC 3339 time, e.g. 2026-11-29T18:00:00Z")))
}

/// Promoted audit events, oldest first, filtered by movement, actor, action and time.
#[utoipa::path(
    get,
    path = "/v3/audit-events",
    tag = "qtg",
    summary = "Audit events (movement_id, actor, action, since, until; cursor paging)",
    description = "Role: viewer.",
    params(AuditQuery),
    responses((status = 200, description = "a page of audit events", body = crate::openapi::Page<qtg_store::audit::AuditEvent>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_audit_events(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = q.map(|Query(q)| q).map_err(|e| ApiError::validation(format!("invalid query: {}", e.body_text())))?;
    let limit = PageQuery { limit: q.limit.clone(), cursor: None, state: None }.limit()?;
    let filter = qtg_store::audit::AuditFilter {
        movement_id: q
            .movement_id
            .as_deref()
            .map(|m| m.parse().map_err(|_| ApiError::validation("movement_id must be a UUID")))
            .transpose()?,
        actor: q.actor.clone(),
        action: q.action.clone(),
        since: q.since.as_deref().map(|t| parse_time(t, "since")).transpose()?,
        until: q.until.as_deref().map(|t| parse_time(t, "until")).transpose()?,
        after_id: q
            .cursor
            .as_deref()
            .map(|c| c.parse::<i64>().map_err(|_| ApiError::validation("cursor is not one this API returned")))
            .transpose()?,
    };
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::audit::list(&mut conn, &filter, limit + 1).await?;
    let next = (rows.len() as i64 > limit).then(|| rows[limit as usize - 1].id.to_string());
    let items: Vec<_> = rows.into_iter().take(limit as usize).collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}

// ---------------------------------------------------------------- callbacks

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CallbackQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    movement_id: Option<String>,
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v3/callbacks",
    tag = "qtg",
    summary = "Callback outbox rows (status, movement_id; cursor paging)",
    description = "Role: operator.",
    params(CallbackQuery),
    responses((status = 200, description = "a page of callbacks", body = crate::openapi::Page<qtg_store::callbacks::CallbackRow>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_callbacks(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Operator)?;
    let q = q.map(|Query(q)| q).map_err(|e| ApiError::validation(format!("invalid query: {}", e.body_text())))?;
    let limit = PageQuery { limit: q.limit.clone(), cursor: None, state: None }.limit()?;
    if let Some(st) = &q.status {
        if !matches!(st.as_str(), "pending" | "sent" | "dlq") {
            return Err(ApiError::validation("status must be pending, sent or dlq"));
        }
    }
    let movement = q
        .movement_id
        .as_deref()
        .map(|m| m.parse::<Uuid>().map_err(|_| ApiError::validation("movement_id must be a UUID")))
        .transpose()?;
    let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::callbacks::list(&mut conn, q.status.as_deref(), movement, after, limit + 1).await?;
    let next = (rows.len() as i64 > limit).then(|| {
        let last = &rows[limit as usize - 1];
        format!("{}_{}", last.created_at.timestamp_micros(), last.id)
    });
    let items: Vec<_> = rows.into_iter().take(limit as usize).collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}

/// Replays a dead letter: a new row with the same event, fresh timestamp and nonce.
#[utoipa::path(
    post,
    path = "/v3/callbacks/{id}/actions/replay",
    tag = "qtg",
    summary = "Replay a dead-lettered callback: a new row with the same event, new timestamp and nonce",
    description = "Role: operator.",
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 201, description = "the new callback row", body = qtg_store::callbacks::CallbackRow), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn replay_callback(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    who.require(Role::Operator)?;
    let id = parse_id(&id, "callback")?;
    let mut tx = s.pool.begin().await?;
    let Some(row) = qtg_store::callbacks::replay(&mut tx, id).await? else {
        let exists = qtg_store::callbacks::exists(&mut tx, id).await?;
        return Err(if exists {
            ApiError::new(StatusCode::CONFLICT, "INVALID_STATE", "only a dlq callback can be replayed")
        } else {
            ApiError::not_found("callback")
        });
    };
    qtg_store::audit::record(
        &mut tx,
        &qtg_store::audit::AuditRecord {
            actor: &who.name,
            action: "callback.replay",
            entity_type: "movement",
            entity_id: row.request_id.to_string(),
            movement_id: Some(row.request_id),
            data: json!({"replay_of": id, "new_callback_id": row.id, "event_id": row.event_id}),
        },
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(json!(row))).into_response())
}

// ---------------------------------------------------------------- roster

#[utoipa::path(
    get,
    path = "/v3/executors",
    tag = "qtg",
    summary = "Executor roster with health",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "executors", body = crate::openapi::Page<qtg_store::health::ExecutorHealth>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_executors(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = page_query(q)?;
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::health::list_executors(&mut conn).await?;
    key_page(items, |e| e.executor_key.clone(), &q)
}

#[utoipa::path(
    get,
    path = "/v3/signers",
    tag = "qtg",
    summary = "Signer roster with health and identity posture",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "signers", body = crate::openapi::Page<qtg_store::health::SignerHealth>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_signers(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = page_query(q)?;
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::health::list_signers(&mut conn).await?;
    key_page(items, |e| e.signer_key.clone(), &q)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectedIdentityBody {
    address: String,
}

/// The only writer of a signer's expected address.
#[utoipa::path(
    put,
    path = "/v3/signers/{key}/expected-identity",
    tag = "qtg",
    summary = "Enrol a signer's expected address",
    description = "Role: admin.",
    request_body = ExpectedIdentityBody,
    params(("key" = String, Path, description = "signer key")),
    responses((status = 200, description = "the signer", body = qtg_store::health::SignerHealth), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn set_expected_identity(
    State(s): State<AppState>,
    who: Principal,
    Path(key): Path<String>,
    body: Result<Body<ExpectedIdentityBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Admin)?;
    let body = body?;
    let address = qtg_engine::health::canonical_address(&body.value.address)
        .ok_or_else(|| ApiError::validation("address must be 0x followed by 40 hex digits, not all zero"))?;
    let mut tx = s.pool.begin().await?;
    if !qtg_store::health::set_expected_identity(&mut tx, &key, &address).await? {
        return Err(ApiError::not_found("signer (not yet seen by qtg-health)"));
    }
    qtg_store::audit::record(
        &mut tx,
        &qtg_store::audit::AuditRecord {
            actor: &who.name,
            action: "signer.expected_identity",
            entity_type: "signer",
            entity_id: key.clone(),
            movement_id: None,
            data: json!({"expected_signer_address": address}),
        },
    )
    .await?;
    let signers = qtg_store::health::list_signers(&mut tx).await?;
    tx.commit().await?;
    let row = signers.into_iter().find(|r| r.signer_key == key);
    Ok(Json(json!(row)))
}

#[utoipa::path(
    get,
    path = "/v3/workers",
    tag = "qtg",
    summary = "Worker heartbeats with age and stale flag",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "workers", body = crate::openapi::Page<qtg_store::health::WorkerBeat>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_workers(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = page_query(q)?;
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::health::list_workers(&mut conn, s.settings.worker_stale_seconds).await?;
    key_page(items, |w| format!("{}/{}/{}", w.worker, w.network_class, w.instance_id), &q)
}

// ---------------------------------------------------------------- operator actions

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    reason: String,
    #[serde(default)]
    runbook_case: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    evidence: Option<Value>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionBody {
    reason: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceBody {
    #[schema(value_type = Object)]
    evidence: Value,
}

fn required_reason(reason: &str) -> Result<&str, ApiError> {
    let r = reason.trim();
    if r.is_empty() || r.len() > 2000 {
        return Err(ApiError::validation("reason must be 1-2000 characters"));
    }
    Ok(r)
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/actions/cancel",
    tag = "qtg",
    summary = "Cancel; refused (409) while a node may have a side effect in flight unless runbook_case C6 with evidence",
    description = "Role: operator.",
    request_body = CancelBody,
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn cancel_movement(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    body: Result<Body<CancelBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Operator)?;
    let b = body?.value;
    let id = parse_id(&id, "movement")?;
    let reason = required_reason(&b.reason)?;
    if let Some(c) = &b.runbook_case {
        if !matches!(c.as_str(), "C1" | "C2" | "C3a" | "C3b" | "C5" | "C6" | "C7") {
            return Err(ApiError::validation("runbook_case must be one of C1, C2, C3a, C3b, C5, C6, C7"));
        }
    }
    let input = qtg_engine::operator::CancelInput {
        reason,
        runbook_case: b.runbook_case.as_deref(),
        evidence: b.evidence.as_ref(),
    };
    s.engine.cancel_movement(&who.name, id, input).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/actions/resume",
    tag = "qtg",
    summary = "Resume a MANUAL_INTERVENTION movement: clears the hand-off mark so recovery sweeps again",
    description = "Role: operator.",
    request_body = ActionBody,
    params(("id" = String, Path, description = "the resource id (UUID)")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn resume_movement(
    State(s): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    body: Result<Body<ActionBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Operator)?;
    let b = body?.value;
    let id = parse_id(&id, "movement")?;
    s.engine.resume_movement(&who.name, id, required_reason(&b.reason)?).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/nodes/{node_key}/actions/retry",
    tag = "qtg",
    summary = "Retry a FAILED node as a new attempt; 409 SUBMIT_ATTEMPT_PENDING on UNKNOWN/SUBMITTING with the pending marker",
    description = "Role: operator.",
    request_body = ActionBody,
    params(("id" = String, Path, description = "the resource id (UUID)"), ("node_key" = String, Path, description = "the node's key in the plan")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn retry_node(
    State(s): State<AppState>,
    who: Principal,
    Path((id, node_key)): Path<(String, String)>,
    body: Result<Body<ActionBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Operator)?;
    let b = body?.value;
    let id = parse_id(&id, "movement")?;
    s.engine.retry_node(&who.name, id, &node_key, required_reason(&b.reason)?).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    post,
    path = "/v3/movements/{id}/nodes/{node_key}/actions/complete-manual",
    tag = "qtg",
    summary = "Complete a manual_* node waiting for a person, with evidence",
    description = "Role: operator.",
    request_body = EvidenceBody,
    params(("id" = String, Path, description = "the resource id (UUID)"), ("node_key" = String, Path, description = "the node's key in the plan")),
    responses((status = 200, description = "the movement", body = crate::openapi::Movement), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn complete_manual(
    State(s): State<AppState>,
    who: Principal,
    Path((id, node_key)): Path<(String, String)>,
    body: Result<Body<EvidenceBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Operator)?;
    let b = body?.value;
    let id = parse_id(&id, "movement")?;
    let empty =
        b.evidence.is_null() || b.evidence == json!({}) || b.evidence.as_str().is_some_and(|e| e.trim().is_empty());
    if empty {
        return Err(ApiError::validation("evidence is required (what was done, by whom, references)"));
    }
    s.engine.complete_manual(&who.name, id, &node_key, &b.evidence).await?;
    full_movement(&s, id).await
}

#[utoipa::path(
    get,
    path = "/v3/movements/{id}/nodes/{node_key}/diagnosis",
    tag = "qtg",
    summary = "Runbook case (C1, C2, C3a, C3b, C5, C6, C7) of a stuck node with its evidence and the required action; never resolves anything",
    description = "Role: operator.",
    params(("id" = String, Path, description = "the resource id (UUID)"), ("node_key" = String, Path, description = "the node's key in the plan")),
    responses((status = 200, description = "the diagnosis", body = Object), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn diagnose_node(
    State(s): State<AppState>,
    who: Principal,
    Path((id, node_key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Operator)?;
    let id = parse_id(&id, "movement")?;
    Ok(Json(s.engine.diagnose_node(id, &node_key).await?))
}

// ---------------------------------------------------------------- controls (kill switch)

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlBody {
    scope: String,
    #[serde(default)]
    target: Option<String>,
    reason: String,
}

fn control_scope(s: &AppState, b: &ControlBody, resume: bool) -> Result<qtg_engine::controls::PauseScope, ApiError> {
    Ok(qtg_engine::controls::PauseScope::parse(&s.engine, &b.scope, b.target.as_deref(), resume)?)
}

/// Pauses new submits (admin): the dispatcher leaves matching nodes READY.
#[utoipa::path(
    post,
    path = "/v3/controls/pause",
    tag = "qtg",
    summary = "Kill switch: pause new submits globally, per lane or per executor key (matching nodes stay READY)",
    description = "Role: admin.",
    request_body = ControlBody,
    responses((status = 200, description = "the pause", body = qtg_store::controls::Pause), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn pause_dispatch(
    State(s): State<AppState>,
    who: Principal,
    body: Result<Body<ControlBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Admin)?;
    let b = body?.value;
    let scope = control_scope(&s, &b, false)?;
    let pause = s.engine.pause_dispatch(&who.name, &scope, required_reason(&b.reason)?).await?;
    Ok(Json(json!(pause)))
}

/// Lifts a pause (admin); 404 when that scope is not paused.
#[utoipa::path(
    post,
    path = "/v3/controls/resume",
    tag = "qtg",
    summary = "Lift a pause (404 when that scope is not paused); dispatchers wake at once",
    description = "Role: admin.",
    request_body = ControlBody,
    responses((status = 200, description = "the lifted pause", body = Object), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn resume_dispatch(
    State(s): State<AppState>,
    who: Principal,
    body: Result<Body<ControlBody>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Admin)?;
    let b = body?.value;
    let scope = control_scope(&s, &b, true)?;
    let lifted = s.engine.resume_dispatch(&who.name, &scope, required_reason(&b.reason)?).await?;
    Ok(Json(json!({"resumed": lifted})))
}

/// Active pauses (viewer).
#[utoipa::path(
    get,
    path = "/v3/controls",
    tag = "qtg",
    summary = "Active pauses",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "pauses", body = crate::openapi::Page<qtg_store::controls::Pause>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_controls(
    State(s): State<AppState>,
    who: Principal,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    who.require(Role::Viewer)?;
    let q = page_query(q)?;
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::controls::list(&mut conn).await?;
    // Global first, then lanes, then executor keys.
    let rank = |scope: &str| match scope {
        "global" => 0,
        "lane" => 1,
        _ => 2,
    };
    key_page(items, |p| format!("{}/{}", rank(&p.scope), p.target), &q)
}
