//! The audit trail: promoted audit events, oldest first.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use qtg_store::audit::AuditEvent;

use crate::error::ApiError;
use crate::extract::{ListQuery, Page, Params, SeqPageQuery, Viewer};
use crate::AppState;

fn parse_time(v: &str, name: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| ApiError::validation(format!("{name} must be an RFC 3339 time, e.g. 2026-11-29T18:00:00Z")))
}

#[utoipa::path(
    get,
    path = "/v3/audit-events",
    summary = "Audit events (movement_id, actor, action, since, until; cursor paging)",
    description = "Role: viewer.",
    params(
        ("movement_id" = Option<uuid::Uuid>, Query, description = "only events of this movement"),
        ("actor" = Option<String>, Query, description = "only events by this principal (or worker:<binary>)"),
        ("action" = Option<String>, Query, description = "e.g. movement.approve, node.transition, api_key.create"),
        ("since" = Option<DateTime<Utc>>, Query, description = "RFC 3339, inclusive"),
        ("until" = Option<DateTime<Utc>>, Query, description = "RFC 3339, exclusive"),
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
    let filter = qtg_store::audit::AuditFilter {
        movement_id: q.movement_id()?,
        actor: q.actor,
        action: q.action,
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
    Ok(Page::from_rows(rows, limit, |e| e.id.to_string()))
}
