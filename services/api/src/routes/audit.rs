//! The audit trail: promoted audit events, oldest first.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use qtg_store::audit::AuditEvent;
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{limit, Page, Params, Viewer};
use crate::AppState;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only events of this movement
    #[param(value_type = Option<uuid::Uuid>)]
    #[serde(default)]
    movement_id: Option<String>,
    /// Only events by this principal (or worker:<binary>)
    #[serde(default)]
    actor: Option<String>,
    /// e.g. movement.approve, node.transition, api_key.create
    #[serde(default)]
    action: Option<String>,
    /// RFC 3339, inclusive
    #[param(value_type = Option<DateTime<Utc>>)]
    #[serde(default)]
    since: Option<String>,
    /// RFC 3339, exclusive
    #[param(value_type = Option<DateTime<Utc>>)]
    #[serde(default)]
    until: Option<String>,
    /// 1-200 (default 50)
    #[param(value_type = Option<u32>, minimum = 1, maximum = 200)]
    #[serde(default)]
    limit: Option<String>,
    /// `next_cursor` of the previous page
    #[param(max_length = 200)]
    #[serde(default)]
    cursor: Option<String>,
}

fn parse_time(v: &str, name: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| ApiError::validation(format!("{name} must be an RFC 3339 time, e.g. 2026-11-29T18:00:00Z")))
}

#[utoipa::path(
    get,
    path = "/v3/audit-events",
    tag = "qtg",
    operation_id = "list_audit_events",
    summary = "Audit events (movement_id, actor, action, since, until; cursor paging)",
    description = "Role: viewer.",
    params(AuditQuery),
    responses((status = 200, description = "a page of audit events", body = Page<AuditEvent>), crate::openapi::Errors),
    security(("bearer" = []))
)]
pub async fn list_audit_events(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<AuditQuery>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    let limit = limit(q.limit.as_deref())?;
    let filter = qtg_store::audit::AuditFilter {
        movement_id: q
            .movement_id
            .as_deref()
            .map(|m| m.parse().map_err(|_| ApiError::validation("movement_id must be a UUID")))
            .transpose()?,
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
