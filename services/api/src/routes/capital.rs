//! Capital transfers: a treasury's request (requester) that creates its movement, and what
//! became of it (viewer). capital_transfer_followup closes or surfaces it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_core::risk::Amount;
use qtg_engine::capital::TransferInput;
use qtg_store::capital::CapitalTransfer;
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{
    free_text, parse_time_cursor, plain, required_reason, time_cursor, Body, CapitalTransferId, ListQuery, Operator,
    Page, PageQuery, Params, Requester, Viewer,
};
use crate::AppState;

/// A capital transfer request.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCapitalTransfer {
    /// Where the funds are (the movement's `intent.source`: a venue account, an address).
    from: String,
    /// Where they go (`intent.destination`).
    to: String,
    asset: String,
    /// Decimal string greater than 0.
    amount: String,
    /// Why (kept with the request and in its audit trail).
    reason: String,
    /// The template its movement uses.
    template_key: String,
    template_version: Option<i32>,
    callback_url: Option<String>,
    idempotency_key: String,
}

#[utoipa::path(
    post,
    path = "/v3/capital-transfers",
    summary = "Request a capital transfer: recorded, and its movement created (PENDING_APPROVAL). Same \
               idempotency_key + same body answers 200; another body 409 IDEMPOTENCY_CONFLICT; a source balance below \
               the amount 409 INSUFFICIENT_BALANCE",
    description = "Role: requester.",
    request_body = CreateCapitalTransfer,
    responses(
        (status = 201, description = "the new request", body = CapitalTransfer),
        (status = 200, description = "the request this idempotency_key already made", body = CapitalTransfer),
    ),
)]
pub async fn create_capital_transfer(
    State(s): State<AppState>,
    Requester(who): Requester,
    body: Body<CreateCapitalTransfer>,
) -> Result<(StatusCode, Json<CapitalTransfer>), ApiError> {
    let b = body.value;
    plain("idempotency_key", &b.idempotency_key, 200)?;
    plain("from", &b.from, 200)?;
    plain("to", &b.to, 200)?;
    plain("asset", &b.asset, 64)?;
    plain("template_key", &b.template_key, 128)?;
    if b.reason.trim().is_empty() {
        return Err(ApiError::validation("reason must be 1-2000 characters"));
    }
    free_text("reason", &b.reason, 2000)?;
    if Amount::parse(&b.amount).is_none_or(|a| a.is_zero()) {
        return Err(ApiError::validation("amount must be a decimal string greater than 0, e.g. \"100.50\""));
    }
    if b.template_version.is_some_and(|v| v < 1) {
        return Err(ApiError::validation("template_version must be >= 1"));
    }
    if let Some(u) = &b.callback_url {
        let st = &s.settings;
        qtg_engine::callbacks::check_url_syntax(u, st.callback_allow_private, &st.callback_allowed_hosts)
            .map_err(ApiError::validation)?;
    }
    let input = TransferInput {
        source: b.from,
        destination: b.to,
        asset: b.asset,
        amount: b.amount,
        reason: b.reason,
        template_key: b.template_key,
        template_version: b.template_version,
        callback_url: b.callback_url.or_else(|| s.settings.callback_default_url.clone()),
        idempotency_key: b.idempotency_key,
    };
    let (t, fresh) = s.engine.create_capital_transfer(&who.name, input).await?;
    Ok((if fresh { StatusCode::CREATED } else { StatusCode::OK }, Json(t)))
}

#[utoipa::path(
    get,
    path = "/v3/capital-transfers",
    summary = "Capital transfers, newest first, with their movement's state and outcome",
    description = "Role: viewer. Query: state, limit, cursor.",
    params(
        PageQuery,
        ("state" = Option<String>, Query, description = "PENDING, MOVEMENT_CREATED, COMPLETED, FAILED or \
                                                         NEEDS_ATTENTION")
    ),
    responses((status = 200, description = "requests", body = Page<CapitalTransfer>)),
)]
pub async fn list_capital_transfers(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<CapitalTransfer>>, ApiError> {
    let q = q.allow(&["state"])?;
    let state = q.state.as_deref().filter(|s| !s.is_empty());
    if state.is_some_and(|st| !["PENDING", "MOVEMENT_CREATED", "COMPLETED", "FAILED", "NEEDS_ATTENTION"].contains(&st))
    {
        return Err(ApiError::validation("state is not a capital transfer state"));
    }
    let limit = q.limit()?;
    let before = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::capital::list(&mut conn, state, before, limit + 1).await?;
    Ok(Json(Page::from_rows(rows, limit, |t: &CapitalTransfer| time_cursor(t.created_at, t.id)).0))
}

#[utoipa::path(
    get,
    path = "/v3/capital-transfers/{id}",
    summary = "A capital transfer: the request, its movement and state, the outcome",
    description = "Role: viewer.",
    params(("id" = uuid::Uuid, Path, description = "the request's id")),
    responses((status = 200, description = "the request", body = CapitalTransfer)),
)]
pub async fn get_capital_transfer(
    State(s): State<AppState>,
    _: Viewer,
    CapitalTransferId(id): CapitalTransferId,
) -> Result<Json<CapitalTransfer>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    Ok(Json(qtg_store::capital::get(&mut conn, id).await?.ok_or_else(|| ApiError::not_found("capital transfer"))?))
}

#[utoipa::path(
    post,
    path = "/v3/capital-transfers/{id}/actions/close",
    summary = "Close a capital transfer that needs attention (FAILED, with the operator's reason); 409 \
               INVALID_STATE in any other state",
    description = "Role: operator.",
    params(("id" = uuid::Uuid, Path, description = "the request's id")),
    request_body = crate::routes::operator::ActionBody,
    responses((status = 200, description = "the closed request", body = CapitalTransfer)),
)]
pub async fn close_capital_transfer(
    State(s): State<AppState>,
    Operator(who): Operator,
    CapitalTransferId(id): CapitalTransferId,
    body: Body<crate::routes::operator::ActionBody>,
) -> Result<Json<CapitalTransfer>, ApiError> {
    let reason = required_reason(&body.value.reason)?;
    Ok(Json(s.engine.close_capital_transfer(&who.name, id, reason).await?))
}
