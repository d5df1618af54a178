//! Approval policy versions (admins propose, other admins approve; everyone reads), their
//! simulation against past movements, and the address book (docs/architecture.md §15).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use qtg_store::policy::{BookEntry, PolicyVersion};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{
    free_text, plain, required_reason, Admin, Body, BookEntryId, ListQuery, Operator, OptBody, Page, Params,
    PolicyVersionParam, ReasonBody, Viewer,
};
use crate::AppState;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposePolicy {
    /// The policy document: `groups`, ordered `rules` (first match wins), `default`.
    #[schema(value_type = Object)]
    document: Value,
    #[schema(max_length = 2000)]
    #[serde(default)]
    description: Option<String>,
    /// In force from (RFC 3339; never before its approval). Absent: at its approval.
    #[serde(default)]
    effective_at: Option<DateTime<Utc>>,
}

#[utoipa::path(
    post,
    path = "/v3/policies",
    summary = "Propose an approval-policy version (validated): in force once admins other than the proposer \
               approve it (MG_POLICY_CHANGE_APPROVALS), from effective_at or its approval if later",
    description = "Role: admin.",
    request_body = ProposePolicy,
    responses((status = 201, description = "the pending version", body = PolicyVersion)),
)]
pub async fn propose_policy(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<ProposePolicy>,
) -> Result<(StatusCode, Json<PolicyVersion>), ApiError> {
    let b = body.value;
    if let Some(d) = &b.description {
        free_text("description", d, 2000)?;
    }
    let v = s.engine.propose_policy(&who.name, &b.document, b.description.as_deref(), b.effective_at).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

#[utoipa::path(
    get,
    path = "/v3/policies",
    summary = "Policy versions, newest first (pending, approved, rejected: every version is kept)",
    description = "Role: viewer.",
    params(crate::extract::PageQuery),
    responses((status = 200, description = "versions", body = Page<PolicyVersion>)),
)]
pub async fn list_policies(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<PolicyVersion>>, ApiError> {
    let q = q.allow(&[])?;
    let limit = q.limit()?;
    let before = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(c.parse::<i32>().map_err(|_| ApiError::validation("cursor is not one this API returned"))?),
    };
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::policy::list_versions(&mut conn, before, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |v| v.version.to_string()))
}

#[utoipa::path(
    get,
    path = "/v3/policies/current",
    summary = "The policy version in force now (404 when none: the templates' approvals and risk limits alone apply)",
    description = "Role: viewer.",
    responses((status = 200, description = "the version in force", body = PolicyVersion)),
)]
pub async fn current_policy(State(s): State<AppState>, _: Viewer) -> Result<Json<PolicyVersion>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let v = qtg_store::policy::in_force(&mut conn, None).await?;
    Ok(Json(v.ok_or_else(|| ApiError::not_found("policy in force"))?))
}

#[utoipa::path(
    get,
    path = "/v3/policies/{version}",
    summary = "A policy version with its approvals",
    description = "Role: viewer.",
    params(("version" = i32, Path, description = "the version")),
    responses((status = 200, description = "the version and its approvals", body = Object)),
)]
pub async fn get_policy(
    State(s): State<AppState>,
    _: Viewer,
    PolicyVersionParam(version): PolicyVersionParam,
) -> Result<Json<Value>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let v = qtg_store::policy::get_version(&mut conn, version, false)
        .await?
        .ok_or_else(|| ApiError::not_found("policy version"))?;
    let approvals = qtg_store::policy::approvals(&mut conn, version).await?;
    let in_force = qtg_store::policy::in_force(&mut conn, None).await?.map(|c| c.version);
    let mut out = json!(v);
    out["approvals"] = json!(approvals);
    out["in_force"] = json!(in_force == Some(version));
    Ok(Json(out))
}

#[utoipa::path(
    post,
    path = "/v3/policies/{version}/approve",
    summary = "Approve a pending policy version (never the proposer); in force once it has its approvals",
    description = "Role: admin.",
    request_body = Option<ReasonBody>,
    params(("version" = i32, Path, description = "the version")),
    responses((status = 200, description = "the version and its approvals", body = Object)),
)]
pub async fn approve_policy(
    State(s): State<AppState>,
    Admin(who): Admin,
    PolicyVersionParam(version): PolicyVersionParam,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    let (v, approvals) = s.engine.decide_policy(&who.name, version, true, b.reason()?).await?;
    let mut out = json!(v);
    out["approvals"] = json!(approvals);
    Ok(Json(out))
}

#[utoipa::path(
    post,
    path = "/v3/policies/{version}/reject",
    summary = "Reject (or, its proposer, withdraw) a pending policy version",
    description = "Role: admin.",
    request_body = Option<ReasonBody>,
    params(("version" = i32, Path, description = "the version")),
    responses((status = 200, description = "the version and its approvals", body = Object)),
)]
pub async fn reject_policy(
    State(s): State<AppState>,
    Admin(who): Admin,
    PolicyVersionParam(version): PolicyVersionParam,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<Value>, ApiError> {
    let (v, approvals) = s.engine.decide_policy(&who.name, version, false, b.reason()?).await?;
    let mut out = json!(v);
    out["approvals"] = json!(approvals);
    Ok(Json(out))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SimulateBody {
    /// A candidate policy document.
    #[schema(value_type = Object)]
    document: Value,
    /// The movements created in the last `days` days (0-366, default 30).
    #[serde(default)]
    days: Option<f64>,
}

#[utoipa::path(
    post,
    path = "/v3/policies/simulate",
    summary = "What a candidate policy would have decided for the movements of the last days: the ones whose \
               outcome (blocked or approved) or approver groups change, before and after",
    description = "Role: operator. Reads at most 10000 movements, oldest first; changes nothing.",
    request_body = SimulateBody,
    responses((status = 200, description = "evaluated and changed", body = Object)),
)]
pub async fn simulate_policy(
    State(s): State<AppState>,
    _: Operator,
    body: Body<SimulateBody>,
) -> Result<Json<Value>, ApiError> {
    let days = body.value.days.unwrap_or(30.0);
    if !(0.0..=366.0).contains(&days) {
        return Err(ApiError::validation("days must be between 0 and 366"));
    }
    let sim = s.engine.simulate_policy(&body.value.document, days, 10_000).await?;
    Ok(Json(json!(sim)))
}

// ---- the address book ------------------------------------------------------------------------

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeEntry {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// The lane it is paid on: cex, evm, cctp, ccip, sim, other (the `exec.<lane>.` of the
    /// executor key of the plan's last action node).
    lane: String,
    /// The network: a CEX network code (ETH), an EVM chain id (8453), a CCIP destination chain
    /// selector; empty matches any network of the lane.
    #[serde(default)]
    network: String,
    #[schema(min_length = 1, max_length = 200)]
    address: String,
    /// The memo or tag beside the address (an exchange's deposit tag); a movement with another
    /// memo, or with one where this has none, is not covered.
    #[serde(default)]
    #[schema(max_length = 200)]
    memo: String,
    #[serde(default)]
    tags: Vec<String>,
    /// Seconds between activation and first use (at least MG_ADDRESS_BOOK_COOL_DOWN_SECONDS).
    #[serde(default)]
    cool_down_seconds: Option<f64>,
    /// The active entry this one changes (removed when this one is activated).
    #[serde(default)]
    replaces: Option<Uuid>,
    #[serde(default)]
    reason: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v3/address-book",
    summary = "Propose an address-book entry (or a change of one): pending until another admin activates it; \
               usable after its cool-down",
    description = "Role: admin.",
    request_body = ProposeEntry,
    responses((status = 201, description = "the pending entry", body = BookEntry)),
)]
pub async fn propose_entry(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<ProposeEntry>,
) -> Result<(StatusCode, Json<BookEntry>), ApiError> {
    let b = body.value;
    // What a person reads before money moves: printable, nothing hidden, no lookalike.
    plain("name", &b.name, 200)?;
    plain("address", &b.address, 200)?;
    plain("network", &b.network, 100).or_else(|e| if b.network.is_empty() { Ok("") } else { Err(e) })?;
    plain("memo", &b.memo, 200).or_else(|e| if b.memo.is_empty() { Ok("") } else { Err(e) })?;
    if !qtg_core::policy::BOOK_LANES.contains(&b.lane.as_str()) {
        return Err(ApiError::validation("lane must be one of cex, evm, cctp, ccip, sim, other"));
    }
    for t in &b.tags {
        plain("tag", t, 64)?;
    }
    if b.tags.len() > 20 {
        return Err(ApiError::validation("at most 20 tags"));
    }
    if let Some(c) = b.cool_down_seconds {
        if !(0.0..=2_592_000.0).contains(&c) {
            return Err(ApiError::validation("cool_down_seconds must be between 0 and 2592000 (30 days)"));
        }
    }
    if let Some(r) = &b.reason {
        free_text("reason", r, 2000)?;
    }
    let e = s
        .engine
        .propose_book_entry(
            &who.name,
            &b.name,
            &b.lane,
            &b.network,
            &b.address,
            &b.memo,
            &b.tags,
            b.cool_down_seconds,
            b.replaces,
            b.reason.as_deref(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(e)))
}

#[utoipa::path(
    get,
    path = "/v3/address-book",
    summary = "Address-book entries by name (status: pending, active, rejected, removed)",
    description = "Role: viewer.",
    params(("status" = Option<String>, Query, description = "pending, active, rejected or removed"),
        crate::extract::PageQuery),
    responses((status = 200, description = "entries", body = Page<BookEntry>)),
)]
pub async fn list_entries(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<BookEntry>>, ApiError> {
    let q = q.allow(&["status"])?;
    let status = q.status.as_deref().filter(|st| !st.is_empty());
    if status.is_some_and(|st| !matches!(st, "pending" | "active" | "rejected" | "removed")) {
        return Err(ApiError::validation("status must be pending, active, rejected or removed"));
    }
    let limit = q.limit()?;
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::policy::list_entries(&mut conn, status, limit).await?;
    Ok(Json(Page { items, next_cursor: None }))
}

#[utoipa::path(
    post,
    path = "/v3/address-book/{id}/approve",
    summary = "Activate a pending entry (never its proposer): usable after its cool-down",
    description = "Role: admin.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the entry id")),
    responses((status = 200, description = "the entry", body = BookEntry)),
)]
pub async fn approve_entry(
    State(s): State<AppState>,
    Admin(who): Admin,
    BookEntryId(id): BookEntryId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<BookEntry>, ApiError> {
    Ok(Json(s.engine.decide_book_entry(&who.name, id, true, b.reason()?).await?))
}

#[utoipa::path(
    post,
    path = "/v3/address-book/{id}/reject",
    summary = "Reject a pending entry",
    description = "Role: admin.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the entry id")),
    responses((status = 200, description = "the entry", body = BookEntry)),
)]
pub async fn reject_entry(
    State(s): State<AppState>,
    Admin(who): Admin,
    BookEntryId(id): BookEntryId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<Json<BookEntry>, ApiError> {
    Ok(Json(s.engine.decide_book_entry(&who.name, id, false, b.reason()?).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveBody {
    reason: String,
}

#[utoipa::path(
    post,
    path = "/v3/address-book/{id}/actions/remove",
    summary = "Remove an active entry (it only narrows what may be paid: one admin, audited)",
    description = "Role: admin.",
    request_body = RemoveBody,
    params(("id" = uuid::Uuid, Path, description = "the entry id")),
    responses((status = 200, description = "the entry", body = BookEntry)),
)]
pub async fn remove_entry(
    State(s): State<AppState>,
    Admin(who): Admin,
    BookEntryId(id): BookEntryId,
    body: Body<RemoveBody>,
) -> Result<Json<BookEntry>, ApiError> {
    let reason = required_reason(&body.value.reason)?;
    Ok(Json(s.engine.remove_book_entry(&who.name, id, reason).await?))
}
