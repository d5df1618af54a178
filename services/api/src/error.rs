//! The one place errors become HTTP: `{"error": {"code", "message"}}` with a fitting status.
//! Internal details (SQL, secrets) never reach a client; they are logged instead.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use qtg_core::codes;
use qtg_engine::movements::OpError;
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// For `RISK_LIMIT_EXCEEDED`: which limit refused.
    pub limit: Option<&'static str>,
}

impl ApiError {
    /// `code` (a constant of `qtg_core::codes`) with the HTTP status the registry gives it.
    pub fn of(code: &'static str, message: impl Into<String>) -> Self {
        let status = codes::lookup(code)
            .and_then(|c| c.status)
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        debug_assert!(status != StatusCode::INTERNAL_SERVER_ERROR || code == codes::INTERNAL, "{code}: no status");
        ApiError { status, code, message: message.into(), limit: None }
    }

    /// `code` answered with another status than its usual one (a body too large is a
    /// `VALIDATION_ERROR` with 413).
    pub fn with_status(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, ..Self::of(code, message) }
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Self::of(codes::VALIDATION_ERROR, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::of(codes::NOT_FOUND, format!("{what} not found"))
    }

    pub fn unauthenticated() -> Self {
        Self::of(codes::UNAUTHENTICATED, "a valid API key is required (Authorization: Bearer <key>)")
    }

    pub fn forbidden(role: &str) -> Self {
        Self::of(codes::FORBIDDEN, format!("this operation needs the {role} role"))
    }

    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "internal error");
        Self::of(codes::INTERNAL, "internal error; see the server log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(limit) = self.limit {
            error["limit"] = limit.into();
        }
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::NotFound(what) => ApiError::not_found(what),
            OpError::Validation(m) => ApiError::validation(m),
            OpError::InvalidState(m) => ApiError::of(codes::INVALID_STATE, m),
            OpError::SelfApproval(m) => ApiError::of(codes::SELF_APPROVAL, m),
            OpError::IdempotencyConflict => ApiError::of(codes::IDEMPOTENCY_CONFLICT, e.to_string()),
            OpError::ExecutorDown(keys) => {
                ApiError::of(codes::EXECUTOR_DOWN, format!("bound executor/signer is down: {}", keys.join(", ")))
            }
            OpError::ExecutorHealthUnknown(keys) => ApiError::of(
                codes::EXECUTOR_HEALTH_UNKNOWN,
                format!(
                    "no known health for bound executor/signer (qtg-health has not vouched for it): {}",
                    keys.join(", ")
                ),
            ),
            OpError::ExecutorHealthStale(keys) => ApiError::of(
                codes::EXECUTOR_HEALTH_STALE,
                format!("the last health check of bound executor/signer is too old: {}", keys.join(", ")),
            ),
            OpError::Conflict(m) => ApiError::of(codes::CONFLICT, m),
            OpError::InsufficientBalance(m) => ApiError::of(codes::INSUFFICIENT_BALANCE, m),
            OpError::SubmitAttemptPending(m) => ApiError::of(codes::SUBMIT_ATTEMPT_PENDING, m),
            OpError::Risk(v) => {
                ApiError { limit: Some(v.limit), ..ApiError::of(codes::RISK_LIMIT_EXCEEDED, v.message) }
            }
            OpError::Policy { code, message } => ApiError::of(code, message),
            OpError::Store(e) => ApiError::internal(e),
        }
    }
}

impl From<qtg_store::StoreError> for ApiError {
    fn from(e: qtg_store::StoreError) -> Self {
        OpError::from(e).into()
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        qtg_store::session::observe_error(&e);
        ApiError::internal(e)
    }
}
