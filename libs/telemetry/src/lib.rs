//! Telemetry the lower layers report through without knowing who listens: a process-wide
//! metrics [`Sink`] (the runtime installs its Prometheus registry; until then, and in
//! library tests, nothing is recorded) and the W3C `traceparent` of the current span (empty
//! unless the runtime installed an OpenTelemetry tracer).

use std::sync::OnceLock;

/// Receives the events a worker's metrics count. Every method defaults to doing nothing.
pub trait Sink: Send + Sync {
    /// A node state transition was written (`node_state` `from` → `to`).
    fn node_transition(&self, _from: &str, _to: &str) {}
    /// An executor or signer call ended: `outcome` is `ok`, `timeout`, `transport_error`,
    /// `protocol_error`, or `refused` (a signer refusing to sign).
    fn executor_call(&self, _method: &str, _outcome: &str, _seconds: f64) {}
    /// A claim found its candidate locked elsewhere or no longer matching.
    fn claim_miss(&self, _pickup: &str) {}
    /// A callback delivery attempt ended: `delivered`, `retry` or `dlq`.
    fn callback_delivery(&self, _outcome: &str) {}
    /// A notification message ended: `delivered`, `retry` or `dlq` (once per delivery it carried).
    fn notification_delivery(&self, _outcome: &str) {}
    /// A venue reported a status code the lane's mapping does not know (runbook C5): `kind`
    /// is `withdrawal` or `deposit`.
    fn venue_unknown_status(&self, _venue: &str, _kind: &str, _code: i64) {}
    /// A call to an executor or signer was signed with a deprecated signature `version`
    /// (`target`: the operation, e.g. `qtg.executor.v1.ExecutorService/Submit`).
    fn deprecated_signature(&self, _target: &str, _version: &str) {}
}

struct Noop;
impl Sink for Noop {}

static SINK: OnceLock<Box<dyn Sink>> = OnceLock::new();

/// Installs the process' sink; `false` if one was installed already (the first one stays).
pub fn install(sink: impl Sink + 'static) -> bool {
    SINK.set(Box::new(sink)).is_ok()
}

/// The installed sink, or one that records nothing.
pub fn sink() -> &'static dyn Sink {
    match SINK.get() {
        Some(s) => s.as_ref(),
        None => &Noop,
    }
}

/// `00-<trace id>-<span id>-<flags>` of the current span, when it is part of a trace.
pub fn traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Parses a `traceparent` header value into its trace id and parent span id (hex), checking
/// the W3C shape.
pub fn parse_traceparent(v: &str) -> Option<(&str, &str)> {
    let mut parts = v.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (parts.next().is_none()
        && hex(version, 2)
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0'))
    .then_some((trace, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_tracer_means_no_traceparent_and_a_silent_sink() {
        assert_eq!(traceparent(), None);
        sink().node_transition("READY", "PREPARING");
        assert_eq!(
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some(("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
        );
        assert_eq!(parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), None);
        assert_eq!(parse_traceparent("garbage"), None);
    }
}
