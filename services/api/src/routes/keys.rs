//! API keys (admin): created with their secret shown once, listed without it, revoked.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_engine::access::{KeyCreation, KeyDecision};
use qtg_store::api_keys::{ApiKeyInfo, KeyRequest};
use serde::Deserialize;

use crate::auth::Role;
use crate::error::ApiError;
use crate::extract::{
    parse_time_cursor, time_cursor, Admin, Body, KeyId, KeyRequestId, ListQuery, Page, Params, TimePageQuery,
};
use crate::AppState;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    /// Who acts with this key (audit rows name it)
    #[schema(min_length = 1, max_length = 128, pattern = "^[^\\u0000]*[^\\s\\u0085\\u0000][^\\u0000]*$")]
    principal: String,
    #[schema(value_type = Vec<crate::openapi::RoleName>, min_items = 1)]
    roles: Vec<String>,
}

#[utoipa::path(
    post,
    path = "/v3/api-keys",
    summary = "Create an API key; the secret is shown once and stored only as a hash. With \
               MG_API_KEY_CREATION_APPROVALS=2, 202 and a request a second admin approves",
    description = "Role: admin.",
    request_body = CreateKeyBody,
    responses(
        (status = 201, description = "the key with its secret", body = crate::openapi::ApiKeyCreated, links(
            ("RevokeApiKey" = (
                operation_id = "revoke_api_key",
                parameters(("id" = "$response.body#/id")),
                description = "revoke it"
            )),
        )),
        (
            status = 202,
            description = "with MG_API_KEY_CREATION_APPROVALS=2: a request a second admin approves",
            body = KeyRequest,
            links(
                ("ApproveKeyRequest" = (
                    operation_id = "approve_key_request",
                    parameters(("id" = "$response.body#/id")),
                    description = "a second admin approves it"
                )),
                ("RejectKeyRequest" = (
                    operation_id = "reject_key_request",
                    parameters(("id" = "$response.body#/id")),
                    description = "a second admin rejects it"
                )),
            )
        ),
    ),
)]
pub async fn create_api_key(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<CreateKeyBody>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let b = body.value;
    if b.principal.trim().is_empty() || b.principal.chars().count() > 128 {
        return Err(ApiError::validation("principal must be 1-128 characters"));
    }
    if b.roles.is_empty() || b.roles.iter().any(|r| Role::parse(r).is_none()) {
        return Err(ApiError::validation("roles must be a non-empty list of viewer|requester|approver|operator|admin"));
    }
    Ok(match s.engine.create_api_key(&who.name, &b.principal, &b.roles).await? {
        KeyCreation::Created(key) => (StatusCode::CREATED, Json(serde_json::json!(key))),
        KeyCreation::Requested(request) => (StatusCode::ACCEPTED, Json(serde_json::json!(request))),
    })
}

#[utoipa::path(
    post,
    path = "/v3/api-key-requests/{id}/approve",
    summary = "A second admin (not the requester) approves a key request: the key is created and its secret shown \
               once, to this admin",
    description = "Role: admin.",
    params(("id" = uuid::Uuid, Path, description = "the key request id")),
    responses((
        status = 201,
        description = "the decided request and the new key with its secret",
        body = crate::openapi::KeyDecisionDoc
    )),
)]
pub async fn approve_key_request(
    State(s): State<AppState>,
    Admin(who): Admin,
    KeyRequestId(id): KeyRequestId,
) -> Result<(StatusCode, Json<KeyDecision>), ApiError> {
    Ok((StatusCode::CREATED, Json(s.engine.decide_key_request(&who.name, id, true).await?)))
}

#[utoipa::path(
    post,
    path = "/v3/api-key-requests/{id}/reject",
    summary = "A second admin rejects a key request",
    description = "Role: admin.",
    params(("id" = uuid::Uuid, Path, description = "the key request id")),
    responses((status = 200, description = "the decided request", body = crate::openapi::KeyDecisionDoc)),
)]
pub async fn reject_key_request(
    State(s): State<AppState>,
    Admin(who): Admin,
    KeyRequestId(id): KeyRequestId,
) -> Result<Json<KeyDecision>, ApiError> {
    Ok(Json(s.engine.decide_key_request(&who.name, id, false).await?))
}

#[utoipa::path(
    get,
    path = "/v3/api-keys",
    summary = "List API keys (never their secrets or hashes), newest first",
    description = "Role: admin.",
    params(TimePageQuery),
    responses((status = 200, description = "a page of keys", body = Page<ApiKeyInfo>)),
)]
pub async fn list_api_keys(
    State(s): State<AppState>,
    _: Admin,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<ApiKeyInfo>>, ApiError> {
    let q = q.allow(&[])?;
    let limit = q.limit()?;
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::api_keys::list(&mut conn, after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |k| time_cursor(k.created_at, k.id)))
}

#[utoipa::path(
    get,
    path = "/v3/api-key-requests",
    summary = "Key requests awaiting (or past) a second admin's decision, newest first (status: pending, \
               approved, rejected)",
    description = "Role: admin.",
    params(("status" = Option<String>, Query, description = "pending, approved or rejected"), TimePageQuery),
    responses((status = 200, description = "a page of key requests", body = Page<KeyRequest>)),
)]
pub async fn list_key_requests(
    State(s): State<AppState>,
    _: Admin,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<KeyRequest>>, ApiError> {
    let q = q.allow(&["status"])?;
    let status = q.status.as_deref().filter(|st| !st.is_empty());
    if status.is_some_and(|st| !matches!(st, "pending" | "approved" | "rejected")) {
        return Err(ApiError::validation("status must be pending, approved or rejected"));
    }
    let limit = q.limit()?;
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::api_keys::list_requests(&mut conn, status, after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |k| time_cursor(k.created_at, k.id)))
}

#[utoipa::path(
    delete,
    path = "/v3/api-keys/{id}",
    summary = "Revoke an API key",
    description = "Role: admin.",
    params(("id" = uuid::Uuid, Path, description = "the key id")),
    responses((status = 204, description = "revoked")),
)]
pub async fn revoke_api_key(
    State(s): State<AppState>,
    Admin(who): Admin,
    KeyId(id): KeyId,
) -> Result<StatusCode, ApiError> {
    s.engine.revoke_api_key(&who.name, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/v3/me",
    summary = "Who the key is: its principal and its highest role (each role includes the ones before it)",
    description = "Role: viewer.",
    responses((status = 200, description = "the caller", body = crate::openapi::Me)),
)]
pub async fn whoami(crate::extract::Viewer(who): crate::extract::Viewer) -> Json<serde_json::Value> {
    let roles: Vec<&str> = crate::auth::Role::ALL.iter().filter(|r| **r <= who.highest).map(|r| r.as_str()).collect();
    Json(serde_json::json!({"principal": who.name, "role": who.highest.as_str(), "roles": roles}))
}
