//! What qtg runs with: executors and signers with their health and identity posture (an
//! admin enrols a signer's expected address), and the workers' heartbeats.

use axum::extract::State;
use axum::Json;
use qtg_runtime::Group;
use qtg_store::health::{ExecutorHealth, SignerHealth, WorkerBeat};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::{Admin, Body, KeyParam, ListQuery, Page, PageQuery, Params, Viewer};
use crate::AppState;

#[utoipa::path(
    get,
    path = "/v3/executors",
    summary = "Executor roster with health",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "executors", body = Page<ExecutorHealth>)),
)]
pub async fn list_executors(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<ExecutorHealth>>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::health::list_executors(&mut conn).await?;
    Page::of_roster(items, |e| e.executor_key.clone(), q)
}

#[utoipa::path(
    get,
    path = "/v3/signers",
    summary = "Signer roster with health and identity posture",
    description = "Role: viewer.",
    params(PageQuery),
    responses((status = 200, description = "signers", body = Page<SignerHealth>)),
)]
pub async fn list_signers(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<SignerHealth>>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::health::list_signers(&mut conn).await?;
    Page::of_roster(items, |e| e.signer_key.clone(), q)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectedIdentityBody {
    /// 0x followed by 40 hex digits, not all zero
    #[schema(pattern = "^0[xX](?!0{40}$)[0-9a-fA-F]{40}$")]
    address: String,
}

#[utoipa::path(
    put,
    path = "/v3/signers/{key}/expected-identity",
    summary = "Enrol a signer's expected address",
    description = "Role: admin.",
    request_body = ExpectedIdentityBody,
    params(("key" = String, Path, description = "signer key")),
    responses((status = 200, description = "the signer", body = SignerHealth)),
)]
pub async fn set_expected_identity(
    State(s): State<AppState>,
    Admin(who): Admin,
    KeyParam(key): KeyParam,
    body: Body<ExpectedIdentityBody>,
) -> Result<Json<SignerHealth>, ApiError> {
    Ok(Json(s.engine.set_expected_identity(&who.name, &key, &body.value.address).await?))
}

/// A heartbeat row with what the worker table says of its worker.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WorkerView {
    #[serde(flatten)]
    beat: WorkerBeat,
    /// The binary that runs this worker alone (null for a worker this build does not know)
    binary: Option<&'static str>,
    /// core (fails fast with the others) or sidecar (isolated)
    #[schema(value_type = Option<String>)]
    group: Option<Group>,
    summary: Option<&'static str>,
    /// Silent for an hour: a crashed instance that never came back (listed only with
    /// include_gone=true; an instance that stops cleanly removes its rows).
    gone: bool,
}

#[utoipa::path(
    get,
    path = "/v3/workers",
    summary = "Worker heartbeats with age and stale flag, and each worker's binary and supervision group; \
               instances silent for an hour (gone) only with include_gone=true",
    description = "Role: viewer.",
    params(PageQuery, ("include_gone" = Option<bool>, Query, description = "also instances silent for an hour")),
    responses((status = 200, description = "workers", body = Page<WorkerView>)),
)]
pub async fn list_workers(
    State(s): State<AppState>,
    _: Viewer,
    Params(mut q): Params<ListQuery>,
) -> Result<Json<Page<WorkerView>>, ApiError> {
    let include_gone = ListQuery::flag("include_gone", &q.include_gone)?;
    q.include_gone = None;
    let mut conn = s.pool.acquire().await?;
    let stale = s.settings.worker_stale.as_secs_f64();
    let gone_after = super::attention::GONE_AFTER.as_secs_f64().max(stale);
    let beats = qtg_store::health::list_workers(&mut conn, stale).await?;
    let items = beats
        .into_iter()
        .filter(|beat| include_gone || beat.age_seconds <= gone_after)
        .map(|beat| {
            let entry = qtg_service::workers::by_name(&beat.worker);
            WorkerView {
                binary: entry.map(|w| w.binary),
                group: entry.map(|w| w.group),
                summary: entry.map(|w| w.summary),
                gone: beat.age_seconds > gone_after,
                beat,
            }
        })
        .collect();
    Page::of_roster(items, |w| format!("{}/{}/{}", w.beat.worker, w.beat.network_class, w.beat.instance_id), q)
}
