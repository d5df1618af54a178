//! The operator console at `/console` (docs/console.md): three static files
//! embedded in the binary — nothing to install, no CDN, no build step. The page talks only to
//! this API's `/v3` with the operator's own key (kept in the tab's session storage), so the
//! files themselves need no authentication; a strict Content-Security-Policy keeps them to
//! this origin.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::AppState;

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/app.css");

/// Same-origin only: no inline script, no third-party anything, never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
        .into_response()
}

pub fn routes() -> Router<AppState> {
    let index = || async { asset("text/html; charset=utf-8", INDEX) };
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/console/app.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
}
