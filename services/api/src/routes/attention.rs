//! What waits for a person, counted: the console's attention view and its navigation badges.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use qtg_store::attention::Attention;

use crate::error::ApiError;
use crate::extract::{ListQuery, Params, Viewer};
use crate::AppState;

/// A worker instance silent this long is gone (crashed and never back): left out of the stale
/// count and of `GET /v3/workers` unless asked for. One that stops cleanly removes its rows.
pub const GONE_AFTER: Duration = Duration::from_secs(3600);

#[utoipa::path(
    get,
    path = "/v3/attention",
    summary = "What waits for a person, counted: movements with an UNKNOWN node, in MANUAL_INTERVENTION or \
               WAITING_MANUAL_ACTION, waiting for approval (and for the caller's), dead letters not replayed, \
               capital transfers in NEEDS_ATTENTION, stale workers, drift, pauses, executors or signers down, \
               unexplained venue withdrawals",
    description = "Role: viewer. Each count has its list: GET /v3/movements?node_state=UNKNOWN, ?state=…, \
                   ?awaiting_approval=me, /v3/callbacks?status=dlq, /v3/capital-transfers?state=NEEDS_ATTENTION, \
                   /v3/workers, /v3/drift, /v3/controls, /v3/executors, /v3/signers, \
                   /v3/venue-transfers?unexplained=true&direction=withdrawal.",
    responses((status = 200, description = "the counts", body = Attention)),
)]
pub async fn attention(
    State(s): State<AppState>,
    Viewer(who): Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Attention>, ApiError> {
    q.allow(&[])?;
    let mut conn = s.pool.acquire().await?;
    let stale = s.settings.worker_stale.as_secs_f64();
    let gone = GONE_AFTER.as_secs_f64().max(stale);
    let mut counts = qtg_store::attention::counts(&mut conn, &who.name, stale, gone).await?;
    // Only an approver's queue is theirs to work through.
    if who.require(crate::auth::Role::Approver).is_err() {
        counts.awaiting_my_approval = 0;
    }
    Ok(Json(counts))
}
