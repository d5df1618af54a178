//! verify_drift's view (viewer) and the baseline an admin records (enrolment): the last
//! check per scope — a chain (`evm:<id>`) or the signers — with its differences.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use qtg_store::drift::Check;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::{required_reason, Admin, Body, ListQuery, Page, PageQuery, Params, Viewer};
use crate::AppState;

#[utoipa::path(
    get,
    path = "/v3/drift",
    summary = "The last verify_drift check per scope (a chain, the signers): status, observed facts, differences \
               from the baseline",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "checks", body = Page<Check>)),
)]
pub async fn list_drift(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<Check>>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::drift::list(&mut conn).await?;
    Page::of_roster(items, |c| c.scope.clone(), q)
}

/// Records a scope's baseline.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BaselineRequest {
    /// `evm:<chain id>` or `signers`.
    scope: String,
    /// fact → value; absent: what the last check of the scope observed.
    #[serde(default)]
    facts: Option<BTreeMap<String, String>>,
    reason: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Baseline {
    scope: String,
    facts: BTreeMap<String, String>,
}

#[utoipa::path(
    post,
    path = "/v3/drift/baseline",
    summary = "Record a scope's baseline: the given facts, or what its last check observed (404 when it was \
               never checked)",
    description = "Role: admin.",
    request_body = BaselineRequest,
    responses((status = 200, description = "the baseline", body = Baseline)),
)]
pub async fn record_baseline(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<BaselineRequest>,
) -> Result<Json<Baseline>, ApiError> {
    let b = body.value;
    let reason = required_reason(&b.reason)?;
    let facts = s.engine.record_drift_baseline(&who.name, &b.scope, b.facts, reason).await?;
    Ok(Json(Baseline { scope: b.scope, facts }))
}
