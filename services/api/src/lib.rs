//! `qtg-api`: the HTTP front door (`/v3/*`; docs/architecture.md §11). Handlers
//! ([`routes`], one module per resource) take the caller's role, validate with the domain's
//! parsers ([`extract`]), and call one engine operation for a change — which writes the
//! change and its audit row in one transaction — or the store for a read.

pub mod auth;
mod console;
pub mod error;
pub mod extract;
mod openapi;
pub mod routes;
mod schemas;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::response::{IntoResponse, Response};
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
    pub approval_ttl: Duration,
    pub template_proposal_ttl: Duration,
    pub callback_default_url: Option<String>,
    pub callback_allow_private: bool,
    pub callback_allowed_hosts: Vec<String>,
    pub worker_stale: Duration,
    /// `MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS`: per caller, between `fresh=true` reads.
    pub balance_fresh_min_interval: Duration,
}

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub engine: Engine,
    pub settings: ApiSettings,
    /// When each caller last asked for `fresh=true` balances.
    pub fresh_reads: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>>,
}

/// The API's routes and its OpenAPI document, built from the same handler annotations.
pub fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use utoipa::OpenApi;
    utoipa_axum::router::OpenApiRouter::with_openapi(openapi::ApiDoc::openapi()).merge(routes::all()).split_for_parts()
}

/// The generated OpenAPI 3.1 document, as served.
pub fn openapi_json() -> serde_json::Value {
    openapi::served(&routes().1)
}

pub fn router(state: AppState) -> Router {
    let (api, doc) = routes();
    let doc = std::sync::Arc::new(openapi::served(&doc));
    api.route("/v3/openapi.json", get(move || async move { axum::Json(doc.as_ref().clone()) }))
        .merge(console::routes())
        .fallback(|| async { error::ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async {
            error::ApiError::of(qtg_core::codes::METHOD_NOT_ALLOWED, "this path does not take this method")
        })
        .layer(axum::middleware::from_fn(refuse_nul))
        .layer(axum::middleware::from_fn(trace_request))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Refuses a request whose path or query carries an encoded NUL (`%00`) before any handler
/// sees it: no database text can hold it.
async fn refuse_nul(req: Request, next: axum::middleware::Next) -> Response {
    if req.uri().to_string().to_ascii_lowercase().contains("%00") {
        return error::ApiError::validation("the path and query must not contain %00").into_response();
    }
    next.run(req).await
}

/// Each request is its own trace (`api.request`): what an approval or an operator action
/// changes — and the callbacks it enqueues — carries that trace.
async fn trace_request(req: Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument;
    let span = tracing::info_span!(
        parent: None,
        "api.request",
        otel.name = "api.request",
        otel.kind = "server",
        http.method = %req.method(),
        http.target = %req.uri().path(),
        http.status_code = tracing::field::Empty,
    );
    let response = next.run(req).instrument(span.clone()).await;
    span.record("http.status_code", response.status().as_u16());
    response
}

/// Registers the one-time bootstrap admin key (idempotent: stored by hash).
/// With `ttl` the key stops working that long after it was first registered.
pub async fn bootstrap_admin(pool: &PgPool, secret: &str, ttl: Option<Duration>) -> anyhow::Result<()> {
    let ttl_seconds = ttl.map(|d| d.as_secs_f64());
    let mut conn = pool.acquire().await?;
    let hash = qtg_engine::access::key_hash(secret);
    // Once a policy or the address book governs, a new key needs a second admin: a new
    // bootstrap secret in the deployment's environment is not one (docs/architecture.md §15).
    if !qtg_store::api_keys::hash_known(&mut conn, &hash).await? && qtg_store::policy::governed(&mut conn).await? {
        tracing::error!(
            "MG_API_BOOTSTRAP_ADMIN_KEY is a new key while an approval policy or the address book is in force: not \
             registered (a new admin key is a request a second admin approves)"
        );
        return Ok(());
    }
    let key = qtg_store::api_keys::NewKey {
        id: Uuid::new_v4(),
        principal: "bootstrap-admin",
        roles: &["admin".to_string()],
        key_hash: &hash,
        created_by: None,
        ttl_seconds,
        bootstrap: true,
    };
    if qtg_store::api_keys::insert(&mut conn, &key).await? {
        tracing::info!(expires_in_s = ?ttl_seconds, "bootstrap admin key registered (principal bootstrap-admin)");
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
            approval_ttl: process.settings.approval_ttl,
            template_proposal_ttl: process.settings.template_proposal_ttl,
            callback_default_url: process.settings.callback_default_url.clone(),
            callback_allow_private: process.settings.callback_allow_private,
            callback_allowed_hosts: process.settings.callback_allowed_hosts.clone(),
            worker_stale: process.settings.worker_stale,
            balance_fresh_min_interval: process.settings.balance_fresh_min_interval,
        },
        fresh_reads: Default::default(),
    }
}
