//! Executor calls under a deadline, each recorded as a `node_events` row.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::Instrument;

use qtg_core::codes;
use qtg_executor::ExecutorError;
use qtg_store::events::{record_call, CallEvent};
use qtg_store::{PgConnection, WorkItem};

/// Runs executor (or signer) call `method` under `deadline`; a late answer is `Timeout`. The
/// call is a client span (`executor.<method>`, whose context a remote executor receives as
/// `traceparent`) and a latency sample by method and outcome. Returns the elapsed
/// milliseconds.
pub async fn with_deadline<T>(
    method: &'static str,
    deadline: Duration,
    fut: impl Future<Output = Result<T, ExecutorError>>,
) -> (Result<T, ExecutorError>, i32) {
    let span = call_span(method);
    let started = Instant::now();
    let res = async {
        match tokio::time::timeout(deadline, fut).await {
            Ok(res) => res,
            Err(_) => Err(ExecutorError::Timeout(deadline.as_millis() as u64)),
        }
    }
    .instrument(span.clone())
    .await;
    let result = match &res {
        Ok(_) => "ok",
        Err(e) => outcome(e),
    };
    (res, call_ended(&span, method, result, started))
}

/// The client span of one executor or signer call.
pub fn call_span(method: &'static str) -> tracing::Span {
    tracing::info_span!(
        "executor.call",
        otel.name = %format_args!("executor.{method}"),
        otel.kind = "client",
        method,
        outcome = tracing::field::Empty,
    )
}

/// Records a call's outcome on its span and in the latency metric; returns its milliseconds.
pub fn call_ended(span: &tracing::Span, method: &'static str, outcome: &str, started: Instant) -> i32 {
    let elapsed = started.elapsed();
    span.record("outcome", outcome);
    qtg_telemetry::sink().executor_call(method, outcome, elapsed.as_secs_f64());
    elapsed.as_millis().min(i32::MAX as u128) as i32
}

/// The node error code for a call that produced no usable answer.
pub fn error_code(e: &ExecutorError) -> &'static str {
    match e {
        ExecutorError::Unavailable(_) | ExecutorError::NotImplemented => codes::EXECUTOR_UNAVAILABLE,
        ExecutorError::Timeout(_) => codes::EXECUTOR_TIMEOUT,
        ExecutorError::Protocol(_) => codes::EXECUTOR_PROTOCOL_ERROR,
        ExecutorError::Request(_) => codes::REQUEST_NOT_ENCODABLE,
    }
}

pub fn outcome(e: &ExecutorError) -> &'static str {
    match e {
        ExecutorError::Unavailable(_) | ExecutorError::NotImplemented => "transport_error",
        ExecutorError::Timeout(_) => "timeout",
        ExecutorError::Protocol(_) => "protocol_error",
        ExecutorError::Request(_) => "not_sent",
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
