//! The callback outbox (operator): rows by status, and the replay of a dead letter.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qtg_store::callbacks::CallbackRow;
use serde::Deserialize;
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{limit, parse_id, parse_time_cursor, time_cursor, Operator, Page, Params};
use crate::AppState;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CallbackQuery {
    #[param(value_type = Option<crate::openapi::CallbackStatus>)]
    #[serde(default)]
    status: Option<String>,
    /// Only callbacks of this movement
    #[param(value_type = Option<Uuid>)]
    #[serde(default)]
    movement_id: Option<String>,
    /// 1-200 (default 50)
    #[param(value_type = Option<u32>, minimum = 1, maximum = 200)]
    #[serde(default)]
    limit: Option<String>,
    /// `next_cursor` of the previous page
    #[param(max_length = 200)]
    #[serde(default)]
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v3/callbacks",
    tag = "qtg",
    operation_id = "list_callbacks",
    summary = "Callback outbox rows (status, movement_id; cursor paging)",
    description = "Role: operator.",
    params(CallbackQuery),
    responses((status = 200, description = "a page of callbacks", body = Page<CallbackRow>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_callbacks(
    State(s): State<AppState>,
    _: Operator,
    Params(q): Params<CallbackQuery>,
) -> Result<Json<Page<CallbackRow>>, ApiError> {
    let limit = limit(q.limit.as_deref())?;
    if q.status.as_deref().is_some_and(|st| !matches!(st, "pending" | "sent" | "dlq")) {
        return Err(ApiError::validation("status must be pending, sent or dlq"));
    }
    let movement = q
        .movement_id
        .as_deref()
        .map(|m| m.parse::<Uuid>().map_err(|_| ApiError::validation("movement_id must be a UUID")))
        .transpose()?;
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::callbacks::list(&mut conn, q.status.as_deref(), movement, after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |c| time_cursor(c.created_at, c.id)))
}

#[utoipa::path(
    post,
    path = "/v3/callbacks/{id}/actions/replay",
    tag = "qtg",
    operation_id = "replay_callback",
    summary = "Replay a dead-lettered callback: a new row with the same event, new timestamp and nonce",
    description = "Role: operator.",
    params(("id" = Uuid, Path, description = "the callback id")),
    responses((status = 201, description = "the new callback row", body = CallbackRow), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn replay_callback(
    State(s): State<AppState>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<CallbackRow>), ApiError> {
    let row = s.engine.replay_callback(&who.name, parse_id(&id, "callback")?).await?;
    Ok((StatusCode::CREATED, Json(row)))
}
