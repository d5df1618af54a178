//! Executor calls under a deadline, each recorded as a `node_events` row.

use std::future::Future;
use std::time::{Duration, Instant};

use qtg_core::codes;
use qtg_executor::ExecutorError;
use qtg_store::events::{record_call, CallEvent};
use qtg_store::{PgConnection, WorkItem};

/// Runs `fut` under `deadline`; a late answer is `Timeout`. Returns the elapsed milliseconds.
pub async fn with_deadline<T>(
    deadline: Duration,
    fut: impl Future<Output = Result<T, ExecutorError>>,
) -> (Result<T, ExecutorError>, i32) {
    let started = Instant::now();
    let res = match tokio::time::timeout(deadline, fut).await {
        Ok(res) => res,
        Err(_) => Err(ExecutorError::Timeout(deadline.as_millis() as u64)),
    };
    (res, started.elapsed().as_millis().min(i32::MAX as u128) as i32)
}

/// The node error code for a call that produced no usable answer.
pub fn error_code(e: &ExecutorError) -> &'static str {
    match e {
        ExecutorError::Unavailable(_) | ExecutorError::NotImplemented => codes::EXECUTOR_UNAVAILABLE,
        ExecutorError::Timeout(_) => codes::EXECUTOR_TIMEOUT,
        ExecutorError::Protocol(_) => codes::EXECUTOR_PROTOCOL_ERROR,
    }
}

pub fn outcome(e: &ExecutorError) -> &'static str {
    match e {
        ExecutorError::Unavailable(_) | ExecutorError::NotImplemented => "transport_error",
        ExecutorError::Timeout(_) => "timeout",
        ExecutorError::Protocol(_) => "protocol_error",
    }
}

/// Appends the call's `node_events` row.
#[allow(clippy::too_many_arguments)]
pub async fn record(
    conn: &mut PgConnection,
    item: &WorkItem,
    attempt_no: i32,
    method: &str,
    outcome: &str,
    error: Option<(&str, &str)>,
    duration_ms: i32,
    actor: &str,
) -> Result<(), qtg_store::StoreError> {
    record_call(
        conn,
        &CallEvent {
            request_id: item.request_id,
            node_id: item.node_id,
            attempt_no,
            method,
            outcome,
            error_code: error.map(|e| e.0),
            error_detail: error.map(|e| e.1),
            duration_ms,
            actor,
        },
    )
    .await
}

/// Appends the `node_events` rows of several successful calls in one statement.
pub async fn record_ok(
    conn: &mut PgConnection,
    item: &WorkItem,
    attempt_no: i32,
    calls: &[(&str, &str, i32)],
    actor: &str,
) -> Result<(), qtg_store::StoreError> {
    qtg_store::events::record_calls_ok(conn, item.request_id, item.node_id, attempt_no, calls, actor).await
}
