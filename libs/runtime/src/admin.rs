//! The admin HTTP server every process runs on `MG_ADMIN_ADDR`: `/healthz` (the process is
//! up; never touches the database), `/readyz` (Postgres answers, its newest connection was
//! not refused by the session check, and the process' heartbeat writer succeeded within the
//! stale threshold; the body names the commits' durability),
//! `/metrics` (Prometheus text).

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use qtg_store::session::SessionGuard;
use qtg_store::PgPool;
use tokio_util::sync::CancellationToken;

use crate::heartbeat::Heartbeats;
use crate::metrics::Metrics;

#[derive(Clone)]
struct AdminState {
    pool: PgPool,
    session: SessionGuard,
    metrics: Metrics,
    heartbeats: Heartbeats,
    stale_after: Duration,
    stale_submitting_after: f64,
}

/// Binds `addr` and serves until `shutdown`. Returns the bound address (port 0 resolved).
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    addr: SocketAddr,
    pool: PgPool,
    session: SessionGuard,
    metrics: Metrics,
    heartbeats: Heartbeats,
    stale_after: Duration,
    stale_submitting_after: f64,
    shutdown: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let state = AdminState { pool, session, metrics, heartbeats, stale_after, stale_submitting_after };
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(admin_addr = %bound, "admin server listening");
    tokio::spawn(async move {
        let res = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        if let Err(e) = res {
            tracing::error!(error = %e, "admin server failed");
        }
    });
    Ok(bound)
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    let session = s.session.last();
    if let Some(why) = session.as_ref().and_then(|st| st.refused.as_deref()) {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("database connection refused: {why}"));
    }
    let db = tokio::time::timeout(Duration::from_secs(2), qtg_store::ping(&s.pool)).await;
    if !matches!(db, Ok(Ok(()))) {
        return (StatusCode::SERVICE_UNAVAILABLE, "database unreachable".to_string());
    }
    if !s.heartbeats.is_empty() && s.heartbeats.age() > s.stale_after {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("heartbeat stale for {:?}", s.heartbeats.age()));
    }
    let durability = session.as_ref().and_then(|st| st.report.as_ref()).map(|r| r.durability());
    match (session, durability) {
        (Some(st), Some(d)) if !st.warnings.is_empty() => {
            (StatusCode::OK, format!("ready; durability {d}; warning: {}", st.warnings.join("; ")))
        }
        (_, Some(d)) => (StatusCode::OK, format!("ready; durability {d}")),
        _ => (StatusCode::OK, "ready".to_string()),
    }
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
    if let Some(st) = s.session.last() {
        s.metrics.set_session(&st, &s.session.policy().limits);
    }
    // The paging signals come from the database; a slow or unreachable database leaves the
    // last values (and /readyz says why).
    match tokio::time::timeout(Duration::from_secs(2), qtg_store::signals::read(&s.pool, s.stale_submitting_after))
        .await
    {
        Ok(Ok(signals)) => s.metrics.set_signals(&signals),
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot read paging signals"),
        Err(_) => tracing::warn!("reading paging signals timed out"),
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics.encode())
}
