//! `qtg-api`: the HTTP front door (`/v3/*`, DESIGN.md §7). Handlers authenticate, check the
//! role, validate, and call one engine operation; every mutation writes its audit row in
//! its own transaction.

pub mod auth;
pub mod error;
mod handlers;
mod openapi;

use std::net::SocketAddr;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
use qtg_engine::Engine;
use qtg_store::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 256 * 1024;

#[derive(Clone)]
pub struct ApiSettings {
    pub approval_ttl_seconds: f64,
    pub template_proposal_ttl_seconds: f64,
    pub callback_default_url: Option<String>,
    pub callback_allow_private: bool,
    pub callback_allowed_hosts: Vec<String>,
    pub worker_stale_seconds: f64,
}

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub engine: Engine,
    pub settings: ApiSettings,
}

/// The API's routes and its OpenAPI document, built from the same handler annotations.
pub fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use handlers::*;
    use utoipa::OpenApi;
    use utoipa_axum::routes;
    utoipa_axum::router::OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(propose_template))
        .routes(routes!(get_proposal))
        .routes(routes!(approve_proposal))
        .routes(routes!(reject_proposal))
        .routes(routes!(list_templates))
        .routes(routes!(get_template))
        .routes(routes!(create_movement, list_movements))
        .routes(routes!(get_movement))
        .routes(routes!(approve_movement))
        .routes(routes!(reject_movement))
        .routes(routes!(cancel_movement))
        .routes(routes!(resume_movement))
        .routes(routes!(retry_node))
        .routes(routes!(diagnose_node))
        .routes(routes!(complete_manual))
        .routes(routes!(list_audit_events))
        .routes(routes!(list_executors))
        .routes(routes!(list_signers))
        .routes(routes!(set_expected_identity))
        .routes(routes!(list_workers))
        .routes(routes!(list_callbacks))
        .routes(routes!(replay_callback))
        .routes(routes!(list_controls))
        .routes(routes!(pause_dispatch))
        .routes(routes!(resume_dispatch))
        .routes(routes!(create_api_key, list_api_keys))
        .routes(routes!(revoke_api_key))
        .split_for_parts()
}

/// The generated OpenAPI 3.1 document, as served.
pub fn openapi_json() -> serde_json::Value {
    serde_json::to_value(routes().1).unwrap_or_default()
}

pub fn router(state: AppState) -> Router {
    let (api, doc) = routes();
    let doc = std::sync::Arc::new(serde_json::to_value(doc).unwrap_or_default());
    api.route("/v3/openapi.json", get(move || async move { axum::Json(doc.as_ref().clone()) }))
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn(handlers::refuse_nul))
        .layer(axum::middleware::from_fn(handlers::trace_request))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Registers the one-time bootstrap admin key (idempotent: stored by hash).
pub async fn bootstrap_admin(pool: &PgPool, secret: &str) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    let created = qtg_store::api_keys::insert(
        &mut conn,
        Uuid::new_v4(),
        "bootstrap-admin",
        &["admin".to_string()],
        &auth::hash_key(secret),
        None,
    )
    .await?;
    if created {
        tracing::info!("bootstrap admin key registered (principal bootstrap-admin)");
    }
    Ok(())
}

/// Binds `addr` and serves until `shutdown`; returns the bound address.
pub async fn serve(
    state: AppState,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(api_addr = %bound, "API listening");
    let app = router(state);
    let handle = tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await?;
        Ok(())
    });
    Ok((bound, handle))
}

/// The API's state from a booted process.
pub fn app_state(process: &qtg_service::Process) -> AppState {
    AppState {
        pool: process.pool.clone(),
        engine: process.engine("api"),
        settings: ApiSettings {
            approval_ttl_seconds: process.settings.approval_ttl_seconds,
            template_proposal_ttl_seconds: process.settings.template_proposal_ttl_seconds,
            callback_default_url: process.settings.callback_default_url.clone(),
            callback_allow_private: process.settings.callback_allow_private,
            callback_allowed_hosts: process.settings.callback_allowed_hosts.clone(),
            worker_stale_seconds: process.settings.worker_stale_seconds,
        },
    }
}
