//! `qtg-api`: the HTTP front door (`/v3/*`, DESIGN.md §7). Handlers authenticate, check the
//! role, validate, and call one engine operation; every mutation writes its audit row in
//! its own transaction.

pub mod auth;
pub mod error;
mod handlers;
mod openapi;

use std::net::SocketAddr;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, put};
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

pub fn router(state: AppState) -> Router {
    use handlers::*;
    Router::new()
        .route("/v3/openapi.json", get(openapi::document))
        .route("/v3/template-proposals", post(propose_template))
        .route("/v3/template-proposals/{id}", get(get_proposal))
        .route("/v3/template-proposals/{id}/approve", post(approve_proposal))
        .route("/v3/template-proposals/{id}/reject", post(reject_proposal))
        .route("/v3/templates", get(list_templates))
        .route("/v3/templates/{key}", get(get_template))
        .route("/v3/movements", post(create_movement).get(list_movements))
        .route("/v3/movements/{id}", get(get_movement))
        .route("/v3/movements/{id}/approve", post(approve_movement))
        .route("/v3/movements/{id}/reject", post(reject_movement))
        .route("/v3/movements/{id}/actions/cancel", post(cancel_movement))
        .route("/v3/movements/{id}/actions/resume", post(resume_movement))
        .route("/v3/movements/{id}/nodes/{node_key}/actions/retry", post(retry_node))
        .route("/v3/movements/{id}/nodes/{node_key}/diagnosis", get(diagnose_node))
        .route("/v3/movements/{id}/nodes/{node_key}/actions/complete-manual", post(complete_manual))
        .route("/v3/audit-events", get(list_audit_events))
        .route("/v3/executors", get(list_executors))
        .route("/v3/signers", get(list_signers))
        .route("/v3/signers/{key}/expected-identity", put(set_expected_identity))
        .route("/v3/workers", get(list_workers))
        .route("/v3/callbacks", get(list_callbacks))
        .route("/v3/callbacks/{id}/actions/replay", post(replay_callback))
        .route("/v3/controls", get(list_controls))
        .route("/v3/controls/pause", post(pause_dispatch))
        .route("/v3/controls/resume", post(resume_dispatch))
        .route("/v3/api-keys", post(create_api_key))
        .route("/v3/api-keys/{id}", delete(revoke_api_key))
        .fallback(not_found)
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
