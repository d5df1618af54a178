//! Telemetry end to end, checked with real third-party tools (Python, from the test venv of
//! `scripts/ensure-test-venv.sh`): every worker exports its spans over OTLP/gRPC to a receiver
//! built on `opentelemetry-proto` — one trace per node step with movement_id, node_key,
//! executor_key and attempt_no, executor calls as its children, the context reaching the
//! remote executor (gRPC metadata and HTTP `traceparent`) and the callback receiver — and
//! every worker binary's `/metrics` parses with `prometheus_client`'s parser and carries the
//! families operators alert on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use qtg_tests::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

struct Receiver {
    _child: tokio::process::Child,
    port: u16,
    out: PathBuf,
}

async fn otlp_receiver(py: &str, name: &str) -> anyhow::Result<Receiver> {
    let out = std::env::temp_dir().join(format!("{name}-spans.jsonl"));
    let _ = std::fs::remove_file(&out);
    let mut child = tokio::process::Command::new(py)
        .arg(repo().join("tests/py/otlp_receiver.py"))
        .args(["--port", "0", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("receiver stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await??.unwrap_or_default();
    let port = line.strip_prefix("LISTENING ").context(format!("receiver said {line:?}"))?.trim().parse()?;
    Ok(Receiver { _child: child, port, out })
}

fn spans(r: &Receiver) -> Vec<Value> {
    std::fs::read_to_string(&r.out).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// A delivered callback: its `traceparent` header and body.
type Delivered = (Option<String>, Value);

#[derive(Clone, Default)]
struct Hooks(Arc<Mutex<Vec<Delivered>>>);

async fn hook(
    axum::extract::State(h): axum::extract::State<Hooks>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    let tp = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(String::from);
    h.0.lock().expect("hooks").push((tp, serde_json::from_slice(&body).unwrap_or(Value::Null)));
    axum::http::StatusCode::OK
}

fn trace_of(traceparent: &str) -> String {
    traceparent.split('-').nth(1).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn traces_reach_an_otlp_receiver_executors_and_callbacks_and_every_worker_exposes_metrics() -> anyhow::Result<()>
{
    let py = test_python().await?;
    let db = TestDb::new().await?;
    let receiver = otlp_receiver(&py, &db.name).await?;
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);

    // A callback receiver that records the trace context of each delivery.
    let hooks = Hooks::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook_url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(hooks.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let remote = start_example(&db, 2000, &[("RUST_LOG", "info,qtg_executor_sdk=debug")]).await?;
    let reg = remote.registry.to_string_lossy().to_string();
    let env = [
        ("MG_EXECUTOR_REGISTRY", reg.as_str()),
        ("QTG_EXAMPLE_SECRET", EXAMPLE_HMAC_SECRET),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("MG_CALLBACK_SECRET", "telemetry-callback-secret-0001"),
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
        ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2"),
    ];
    let api = Api::start(&db.url, &env).await?;
    let mut workers = BTreeMap::new();
    for bin in
        ["qtg-dispatcher", "qtg-observer", "qtg-recovery", "qtg-callback", "qtg-expiry", "qtg-audit", "qtg-health"]
    {
        workers.insert(bin, Proc::spawn(bin, &db.url, &env).await?);
    }
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.otel", "nodes": [
        {
            "node_key": "over_http", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.ex.http",
            "config": {"example": {"observe_polls": 1}}
        },
        {
            "node_key": "over_grpc", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.ex.grpc",
            "config": {"example": {"observe_polls": 1}}
        }],
        "edges": [{"from": "over_http", "to": "over_grpc"}]}),
    )
    .await?;
    let id = start_movement(&api, &keys, "t.otel", "otel-1", Some(&hook_url)).await?;
    let m = wait_state(
        &api,
        &keys.requester,
        &id,
        &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");

    // Metrics first, while every worker runs: scraped, then parsed by prometheus_client.
    let http = http_client();
    let mut files = Vec::new();
    let mut by_file = BTreeMap::new();
    let mut procs: Vec<(&str, &Proc)> = workers.iter().map(|(b, p)| (*b, p)).collect();
    procs.push(("qtg-api", &api.proc));
    let aio = Proc::spawn("qtg", &db.url, &[("MG_API_BOOTSTRAP_ADMIN_KEY", BOOTSTRAP_KEY)]).await?;
    procs.push(("qtg", &aio));
    // The callback worker delivers asynchronously; wait until the last event arrived.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !hooks.0.lock().expect("hooks").iter().any(|(_, b)| b["request_state"] == "COMPLETED") {
        anyhow::ensure!(Instant::now() < deadline, "callbacks never arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (bin, p) in &procs {
        let admin = p.wait_field("admin_addr", Duration::from_secs(30)).await?;
        let text = http.get(format!("http://{admin}/metrics")).send().await?.text().await?;
        let file = std::env::temp_dir().join(format!("{}-{bin}.prom", db.name));
        std::fs::write(&file, &text)?;
        by_file.insert(file.to_string_lossy().to_string(), *bin);
        files.push(file);
    }
    let parsed =
        tokio::process::Command::new(&py).arg(repo().join("tests/py/parse_metrics.py")).args(&files).output().await?;
    assert!(parsed.status.success(), "a /metrics did not parse: {}", String::from_utf8_lossy(&parsed.stderr));
    let parsed: Value = serde_json::from_slice(&parsed.stdout)?;
    let required = [
        "qtg_worker_items_processed",
        "qtg_worker_tick_duration_seconds",
        "qtg_worker_consecutive_errors",
        "qtg_claim_misses",
        "qtg_executor_call_duration_seconds",
        "qtg_node_transitions",
        "qtg_callback_deliveries",
        "qtg_outbox_backlog",
        "qtg_worker_heartbeat_age_seconds",
        "qtg_oldest_unknown_node_age_seconds",
        "qtg_oldest_stale_submitting_node_age_seconds",
        "qtg_oldest_manual_intervention_age_seconds",
        "qtg_callback_dlq_size",
    ];
    let samples = |bin: &str, family: &str| -> Vec<Value> {
        let file = by_file.iter().find(|(_, b)| **b == bin).map(|(f, _)| f.clone()).unwrap_or_default();
        parsed[&file][family]["samples"].as_array().cloned().unwrap_or_default()
    };
    for (file, bin) in &by_file {
        for family in required {
            assert!(parsed[file][family].is_object(), "{bin} /metrics lacks {family}: {:#}", parsed[file]);
        }
    }
    let has = |bin: &str, family: &str, labels: Value| {
        samples(bin, family).iter().any(|s| labels.as_object().into_iter().flatten().all(|(k, v)| s["labels"][k] == *v))
    };
    assert!(has("qtg-dispatcher", "qtg_executor_call_duration_seconds", json!({"method": "submit", "outcome": "ok"})));
    assert!(has("qtg-dispatcher", "qtg_node_transitions", json!({"from": "READY", "to": "PREPARING"})));
    assert!(has("qtg-observer", "qtg_node_transitions", json!({"to": "COMPLETED"})));
    assert!(has("qtg-callback", "qtg_callback_deliveries", json!({"outcome": "delivered"})));
    assert!(!samples("qtg-dispatcher", "qtg_worker_items_processed").is_empty());
    drop(aio);

    // Stop the workers (SIGTERM flushes their spans), then read what the receiver got.
    let mut all = vec![api.proc];
    all.extend(workers.into_values());
    for p in &all {
        p.signal("TERM");
    }
    for p in &mut all {
        assert_eq!(p.wait_exit(Duration::from_secs(30)).await?, Some(0), "{} exits cleanly", p.name);
    }
    let spans = spans(&receiver);
    let steps: Vec<&Value> =
        spans.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("node."))).collect();
    for (node, executor) in [("over_http", "exec.ex.http"), ("over_grpc", "exec.ex.grpc")] {
        for step in ["node.dispatch", "node.observe"] {
            let s = steps
                .iter()
                .find(|s| s["name"] == step && s["attributes"]["node_key"] == node)
                .with_context(|| format!("no {step} span for {node}: {steps:#?}"))?;
            assert_eq!(s["attributes"]["movement_id"], id.as_str(), "{s:#}");
            assert_eq!(s["attributes"]["executor_key"], executor);
            assert_eq!(s["attributes"]["attempt_no"], 1);
            assert_eq!(s["parent_span_id"], "", "a node step is its trace's root: {s:#}");
        }
    }
    let dispatch = steps
        .iter()
        .find(|s| s["name"] == "node.dispatch" && s["attributes"]["node_key"] == "over_http")
        .context("dispatch")?;
    assert_eq!(dispatch["resource"]["service.name"], "qtg-dispatcher");
    let submit = spans
        .iter()
        .find(|s| s["name"] == "executor.submit" && s["trace_id"] == dispatch["trace_id"])
        .context("the submit call is a span of the dispatch trace")?;
    assert_eq!(submit["parent_span_id"], dispatch["span_id"]);
    assert_eq!(submit["attributes"]["outcome"], "ok");
    let step_traces: BTreeSet<String> = steps.iter().filter_map(|s| s["trace_id"].as_str().map(String::from)).collect();
    assert_eq!(step_traces.len(), steps.len(), "one trace per node step");

    let health_traces: BTreeSet<String> = spans
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.ends_with("health")))
        .filter_map(|s| s["trace_id"].as_str().map(String::from))
        .collect();
    // The remote executor received the caller's context on both transports.
    let log = remote.proc.log();
    for transport in ["grpc", "http"] {
        let seen: Vec<String> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["transport"] == transport)
            .filter_map(|v| v["traceparent"].as_str().map(String::from))
            .collect();
        assert!(
            seen.iter().any(|tp| step_traces.contains(&trace_of(tp))),
            "no node step's context over {transport}: {log}"
        );
        for tp in &seen {
            // Anything else is qtg-health's probe, its own trace.
            assert!(
                step_traces.contains(&trace_of(tp)) || health_traces.contains(&trace_of(tp)),
                "{transport} call {tp} belongs to no exported trace"
            );
        }
    }
    // Callbacks carry the trace of the step that produced their event.
    let hooks = hooks.0.lock().expect("hooks").clone();
    // (An approval's callbacks carry the API request's trace.)
    let api_traces: BTreeSet<String> = spans
        .iter()
        .filter(|s| s["name"] == "api.request")
        .filter_map(|s| s["trace_id"].as_str().map(String::from))
        .collect();
    let node_events: Vec<_> = hooks.iter().filter(|(_, b)| b["event_type"] == "node_state_changed").collect();
    assert!(node_events.iter().any(|(tp, _)| tp.as_deref().is_some_and(|tp| step_traces.contains(&trace_of(tp)))));
    for (tp, body) in node_events {
        let tp = tp.as_deref().with_context(|| format!("callback without traceparent: {body}"))?;
        let trace = trace_of(tp);
        assert!(
            step_traces.contains(&trace) || api_traces.contains(&trace),
            "callback {body} carries {tp}: no node step's or API request's trace"
        );
    }
    db.drop_db().await;
    Ok(())
}
