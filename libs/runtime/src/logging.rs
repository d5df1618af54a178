//! Logs: JSON lines (default; a line logged inside a node step carries its `spans`, the step's
//! with movement_id, node_key, executor_key, attempt_no) or pretty, filtered by `RUST_LOG` (default
//! `info`). Traces: when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT`), spans
//! are also exported over OTLP/gRPC in batches (the SDK reads the `OTEL_BSP_*` settings itself).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

/// Where traces go.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    pub endpoint: String,
    /// `service.name` of every span (`OTEL_SERVICE_NAME`, else the binary's name).
    pub service_name: String,
}

/// Flushes and stops the trace exporter when dropped (the end of the process).
pub struct TraceGuard {
    provider: SdkTracerProvider,
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        // The batch task runs on the tokio runtime: flush from a plain thread, never from a
        // runtime worker that the flush itself would wait on.
        // An unreachable collector must not hold the exit: wait at most 10 s.
        let provider = self.provider.clone();
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Err(e) = provider.force_flush() {
                eprintln!("trace flush failed: {e}");
            }
            let _ = provider.shutdown();
            let _ = done.send(());
        });
        if wait.recv_timeout(std::time::Duration::from_secs(10)).is_err() {
            eprintln!("trace flush did not finish in 10 s; exiting without it");
        }
    }
}

/// Installs the global subscriber. Must run inside the tokio runtime when `otlp` is set.
/// Returns the guard that flushes traces at exit, or why the exporter could not start (logs
/// still work then).
pub fn init(format: LogFormat, filter: Option<&str>, otlp: Option<&OtlpConfig>) -> Result<Option<TraceGuard>, String> {
    let filter = EnvFilter::try_new(filter.unwrap_or("info")).unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Json => fmt.json().flatten_event(true).with_current_span(false).with_span_list(true).boxed(),
        LogFormat::Pretty => fmt.boxed(),
    };
    let (otel, guard, error) = match otlp.map(tracer_provider).transpose() {
        Ok(Some(provider)) => {
            let tracer = provider.tracer("qtg");
            // Only qtg's own spans: a node step and its calls, not every library's internals
            // (nor the exporter's own gRPC calls).
            let ours = tracing_subscriber::filter::filter_fn(|m| m.target().starts_with("qtg"));
            let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(ours);
            (Some(layer), Some(TraceGuard { provider }), None)
        }
        Ok(None) => (None, None, None),
        Err(e) => (None, None, Some(e)),
    };
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter)).with(otel).try_init();
    match error {
        Some(e) => Err(e),
        None => Ok(guard),
    }
}

fn tracer_provider(c: &OtlpConfig) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(c.endpoint.clone())
        .build()
        .map_err(|e| format!("OTLP exporter for {}: {e}", c.endpoint))?;
    let batch = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
        exporter,
        opentelemetry_sdk::runtime::Tokio,
    )
    .build();
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(c.service_name.clone()).build();
    Ok(SdkTracerProvider::builder().with_span_processor(batch).with_resource(resource).build())
}
