//! The audit trail: promoted audit events, oldest first.

use axum::extract::State;
use axum::Json;
use qtg_store::audit::AuditEvent;

use crate::error::ApiError;
use crate::extract::{ListQuery, Page, Params, SeqPageQuery, Viewer};
use crate::AppState;

#[utoipa::path(
    get,
    path = "/v3/audit-events",
    summary = "Audit events (movement_id, actor, action, since, until; cursor paging)",
    description = "Role: viewer.",
    params(
        ("movement_id" = Option<uuid::Uuid>, Query, description = "only events of this movement"),
        ("actor" = Option<String>, Query, description = "only events by this principal (or worker:<binary>)"),
        ("action" = Option<String>, Query, description = "e.g. movement.approval, callback.replay, api_key.create"),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "RFC 3339, inclusive"),
        ("until" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "RFC 3339, exclusive"),
        SeqPageQuery
    ),
    responses((status = 200, description = "a page of audit events", body = Page<AuditEvent>)),
)]
pub async fn list_audit_events(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    let q = q.allow(&["movement_id", "actor", "action", "since", "until"])?;
    let limit = q.limit()?;
    let (since, until) = (q.time("since")?, q.time("until")?);
    let filter = qtg_store::audit::AuditFilter {
        movement_id: q.movement_id()?,
        actor: q.actor,
        action: q.action,
        since,
        until,
        after_id: q
            .cursor
            .as_deref()
            .map(|c| c.parse::<i64>().map_err(|_| ApiError::validation("cursor is not one this API returned")))
            .transpose()?,
    };
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::audit::list(&mut conn, &filter, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |e| e.id.to_string()))
}
