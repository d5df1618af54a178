//! The callback outbox (operator): rows by status, event, movement and time, and the replay
//! of dead letters — one, or many with one reason.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_store::callbacks::{CallbackFilter, CallbackRow};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{
    parse_time_cursor, required_reason, time_cursor, Body, CallbackId, ListQuery, Operator, OptBody, Page, Params,
    ReasonBody, TimePageQuery,
};
use crate::AppState;

#[utoipa::path(
    get,
    path = "/v3/callbacks",
    summary = "Callback outbox rows (status, movement_id, event_type, since, until, replayed; cursor paging)",
    description = "Role: operator.",
    params(
        ("status" = Option<crate::openapi::CallbackStatus>, Query, description = "only callbacks in this status"),
        ("movement_id" = Option<uuid::Uuid>, Query, description = "only callbacks of this movement"),
        ("event_type" = Option<String>, Query, description = "only callbacks of this event type"),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "created at or after this time"),
        ("until" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "created before this time"),
        (
            "replayed" = Option<bool>,
            Query,
            description = "false: only dead letters not replayed yet (the open DLQ); true: only replayed ones"
        ),
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
    let q = q.allow(&["status", "movement_id", "event_type", "since", "until", "replayed"])?;
    let limit = q.limit()?;
    if q.status.as_deref().is_some_and(|st| !matches!(st, "pending" | "sent" | "dlq")) {
        return Err(ApiError::validation("status must be pending, sent or dlq"));
    }
    let replayed = match q.replayed.as_deref() {
        None | Some("") => None,
        Some(_) => Some(ListQuery::flag("replayed", &q.replayed)?),
    };
    let filter = CallbackFilter {
        status: q.status.as_deref(),
        request_id: q.movement_id()?,
        event_type: q.event_type.as_deref().filter(|e| !e.is_empty()),
        since: q.time("since")?,
        until: q.time("until")?,
        replayed,
    };
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::callbacks::list(&mut conn, &filter, after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |c| time_cursor(c.created_at, c.id)))
}

#[utoipa::path(
    post,
    path = "/v3/callbacks/{id}/actions/replay",
    summary = "Replay a dead-lettered callback once: a new row with the same event, new timestamp and nonce (409 \
               if it is not a dead letter or was already replayed)",
    description = "Role: operator. The reason, if given, goes to the audit trail.",
    request_body = Option<ReasonBody>,
    params(("id" = uuid::Uuid, Path, description = "the callback id")),
    responses((status = 201, description = "the new callback row", body = CallbackRow)),
)]
pub async fn replay_callback(
    State(s): State<AppState>,
    Operator(who): Operator,
    CallbackId(id): CallbackId,
    OptBody(b): OptBody<ReasonBody>,
) -> Result<(StatusCode, Json<CallbackRow>), ApiError> {
    let row = s.engine.replay_callback(&who.name, id, b.reason()?).await?;
    Ok((StatusCode::CREATED, Json(row)))
}

/// Dead letters to replay, with one reason.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplay {
    /// 1-200 callback ids, each a dead letter not replayed yet.
    #[schema(min_items = 1, max_items = 200)]
    ids: Vec<Uuid>,
    /// Why (1-2000 characters), recorded with each replay.
    reason: String,
}

/// What became of one id of a bulk replay.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ReplayOutcome {
    id: Uuid,
    /// The new row, when it was replayed.
    new_callback_id: Option<Uuid>,
    /// Why it was not (not found, not a dead letter, already replayed).
    error: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct BulkReplayResult {
    replayed: usize,
    outcomes: Vec<ReplayOutcome>,
}

#[utoipa::path(
    post,
    path = "/v3/callbacks/actions/replay",
    summary = "Replay many dead letters with one reason: each on its own (one that cannot be replayed does not stop \
               the others), each audited",
    description = "Role: operator.",
    request_body = BulkReplay,
    responses((status = 200, description = "what became of each id", body = BulkReplayResult)),
)]
pub async fn replay_callbacks(
    State(s): State<AppState>,
    Operator(who): Operator,
    body: Body<BulkReplay>,
) -> Result<Json<BulkReplayResult>, ApiError> {
    let b = body.value;
    let reason = required_reason(&b.reason)?;
    if b.ids.is_empty() || b.ids.len() > 200 {
        return Err(ApiError::validation("ids must hold 1 to 200 callback ids"));
    }
    let mut ids = b.ids;
    ids.sort();
    ids.dedup();
    let mut outcomes = Vec::with_capacity(ids.len());
    for id in ids {
        let outcome = match s.engine.replay_callback(&who.name, id, Some(reason)).await {
            Ok(row) => ReplayOutcome { id, new_callback_id: Some(row.id), error: None },
            Err(e) => {
                let e = ApiError::from(e);
                ReplayOutcome { id, new_callback_id: None, error: Some(format!("{}: {}", e.code, e.message)) }
            }
        };
        outcomes.push(outcome);
    }
    let replayed = outcomes.iter().filter(|o| o.new_callback_id.is_some()).count();
    tracing::info!(actor = %who.name, replayed, asked = outcomes.len(), "bulk callback replay");
    Ok(Json(BulkReplayResult { replayed, outcomes }))
}
