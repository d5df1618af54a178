//! The kill switch (admin): pause new submits globally, per lane or per executor key; the
//! dispatcher leaves matching nodes READY. Viewers see the active pauses.

use axum::extract::State;
use axum::Json;
use qtg_engine::controls::PauseScope;
use qtg_store::controls::Pause;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::{required_reason, Admin, Body, ListQuery, Page, PageQuery, Params, Viewer};
use crate::AppState;

/// A pause or resume request (documented as [`crate::openapi::PauseRequest`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlBody {
    scope: String,
    #[serde(default)]
    target: Option<String>,
    reason: String,
}

impl ControlBody {
    fn scope(&self, s: &AppState, resume: bool) -> Result<PauseScope, ApiError> {
        Ok(PauseScope::parse(&s.engine, &self.scope, self.target.as_deref(), resume)?)
    }
}

#[utoipa::path(
    post,
    path = "/v3/controls/pause",
    summary = "Kill switch: pause new submits globally, per lane or per executor key (matching nodes stay READY)",
    description = "Role: admin.",
    request_body = crate::openapi::PauseRequest,
    responses((status = 200, description = "the pause", body = Pause, links(
        ("ResumeDispatch" = (
            operation_id = "resume_dispatch",
            request_body = "$request.body",
            description = "lift it (same scope and target, with a reason)"
        )),
        ("ListControls" = (operation_id = "list_controls", description = "the active pauses")),
    ))),
)]
pub async fn pause_dispatch(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<ControlBody>,
) -> Result<Json<Pause>, ApiError> {
    let b = body.value;
    let scope = b.scope(&s, false)?;
    Ok(Json(s.engine.pause_dispatch(&who.name, &scope, required_reason(&b.reason)?).await?))
}

/// The answer of a resume: the pause that was lifted.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Resumed {
    resumed: Pause,
}

#[utoipa::path(
    post,
    path = "/v3/controls/resume",
    summary = "Lift a pause (404 when that scope is not paused); dispatchers wake at once",
    description = "Role: admin.",
    request_body = crate::openapi::PauseRequest,
    responses((status = 200, description = "the lifted pause", body = Resumed)),
)]
pub async fn resume_dispatch(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<ControlBody>,
) -> Result<Json<Resumed>, ApiError> {
    let b = body.value;
    let scope = b.scope(&s, true)?;
    let resumed = s.engine.resume_dispatch(&who.name, &scope, required_reason(&b.reason)?).await?;
    Ok(Json(Resumed { resumed }))
}

#[utoipa::path(
    get,
    path = "/v3/controls",
    summary = "Active pauses",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "pauses", body = Page<Pause>)),
)]
pub async fn list_controls(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<Pause>>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::controls::list(&mut conn).await?;
    // Global first, then lanes, then executor keys.
    let rank = |scope: &str| match scope {
        "global" => 0,
        "lane" => 1,
        _ => 2,
    };
    Page::of_roster(items, |p| format!("{}/{}", rank(&p.scope), p.target), q)
}
