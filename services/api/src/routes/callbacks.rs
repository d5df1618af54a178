//! The callback outbox (operator): rows by status, and the replay of a dead letter.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_store::callbacks::CallbackRow;

use crate::error::ApiError;
use crate::extract::{parse_time_cursor, time_cursor, CallbackId, ListQuery, Operator, Page, Params, TimePageQuery};
use crate::AppState;

#[utoipa::path(
    get,
    path = "/v3/callbacks",
    summary = "Callback outbox rows (status, movement_id; cursor paging)",
    description = "Role: operator.",
    params(
        ("status" = Option<crate::openapi::CallbackStatus>, Query, description = "only callbacks in this status"),
        ("movement_id" = Option<uuid::Uuid>, Query, description = "only callbacks of this movement"),
        TimePageQuery
    ),
    responses((status = 200, description = "a page of callbacks", body = Page<CallbackRow>, links(
        ("ReplayCallback" = (
            operation_id = "replay_callback",
            parameters(("id" = "$response.body#/items/0/id")),
            description = "replay a dead letter of the page"
        )),
    ))),
)]
pub async fn list_callbacks(
    State(s): State<AppState>,
    _: Operator,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<CallbackRow>>, ApiError> {
    let q = q.allow(&["status", "movement_id"])?;
    let limit = q.limit()?;
    if q.status.as_deref().is_some_and(|st| !matches!(st, "pending" | "sent" | "dlq")) {
        return Err(ApiError::validation("status must be pending, sent or dlq"));
    }
    let movement = q.movement_id()?;
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::callbacks::list(&mut conn, q.status.as_deref(), movement, after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |c| time_cursor(c.created_at, c.id)))
}

#[utoipa::path(
    post,
    path = "/v3/callbacks/{id}/actions/replay",
    summary = "Replay a dead-lettered callback: a new row with the same event, new timestamp and nonce",
    description = "Role: operator.",
    params(("id" = uuid::Uuid, Path, description = "the callback id")),
    responses((status = 201, description = "the new callback row", body = CallbackRow)),
)]
pub async fn replay_callback(
    State(s): State<AppState>,
    Operator(who): Operator,
    CallbackId(id): CallbackId,
) -> Result<(StatusCode, Json<CallbackRow>), ApiError> {
    let row = s.engine.replay_callback(&who.name, id).await?;
    Ok((StatusCode::CREATED, Json(row)))
}
