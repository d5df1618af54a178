//! Hostile executors, over HTTP and gRPC: answers the database cannot store (a NUL in a string
//! or a key, JSON nested too deep), a body without a length that never ends, a prepared action
//! that expired. Each is contained to its node — an event, a terminal state or a backoff —
//! and a healthy movement queued behind all of them completes on the same single worker.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use qtg_executor_sdk::{
    serve, CancellationToken, ExecutionContext, ExecutionResult, Handler, HandlerError, NodeState, PrepareOutcome,
    PreparedAction, ServeConfig, SubmitCall,
};
use qtg_tests::*;
use serde_json::{json, Value};

/// What the HTTP executor does for `method`, from the node's `config.hostile`.
fn behaviour(body: &Value, method: &str) -> String {
    let ctx = &body["context"];
    let config = if ctx["nodeConfig"].is_object() { &ctx["nodeConfig"] } else { &ctx["node_config"] };
    config["hostile"][method].as_str().unwrap_or("").to_string()
}

fn deep(levels: usize) -> Value {
    (0..levels).fold(json!(1), |v, _| json!([v]))
}

async fn http_executor(Path(method): Path<String>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let json = |v: Value| (StatusCode::OK, axum::Json(v)).into_response();
    match (method.as_str(), behaviour(&body, &method).as_str()) {
        ("health", _) => json(json!({"ok": true})),
        (_, "nul_detail") => json(json!({"nextState": "FAILED", "errorCode": "BAD", "errorDetail": "bad\u{0}detail"})),
        // Over the size limit fast, or dripped slower than the call's deadline.
        (_, "endless") => Response::builder()
            .header("content-type", "application/json")
            .body(endless_body(64, Duration::from_millis(2)))
            .expect("response"),
        (_, "drip") => Response::builder()
            .header("content-type", "application/json")
            .body(endless_body(20, Duration::from_millis(200)))
            .expect("response"),
        ("prepare", "nul_payload") => json(
            json!({"action": {"actionType": "transfer", "payloadFormat": "json", "payload": "{\"to\":\"a\u{0}\"}"}}),
        ),
        ("prepare", "expired") => json(json!({"action": {"actionType": "transfer", "payloadFormat": "json",
            "payload": "{}", "expiresAt": "2020-01-01T00:00:00Z"}})),
        ("submit", "nul_key") => {
            json(json!({"nextState": "SUBMITTED", "providerRefId": "r-1", "providerRefs": {"ref\u{0}": "x"}}))
        }
        ("observe", "deep") => json(json!({"nextState": "OBSERVING", "providerRefs": {"deep": deep(40)}})),
        // Sixty new keys on every poll: within one answer's bound, unbounded for the node.
        ("observe", "growing") => {
            static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let refs: serde_json::Map<String, Value> = (0..60).map(|i| (format!("k{n}_{i}"), json!(i))).collect();
            json(json!({"nextState": "OBSERVING", "providerRefs": refs, "retryAfterSeconds": 0.1}))
        }
        ("preflight", _) => StatusCode::NO_CONTENT.into_response(),
        ("prepare", _) => json(json!({"action": {"actionType": "transfer", "payloadFormat": "json", "payload": "{}"}})),
        ("submit", _) => json(json!({"nextState": "SUBMITTED", "providerRefId": "r-1"})),
        ("observe", _) => json(json!({"nextState": "COMPLETED"})),
        _ => json(json!({"nextState": "FAILED", "errorCode": "NOT_FOUND"})),
    }
}

/// More than any answer may be, without a length: `chunks` of 8 KiB, `gap` apart.
fn endless_body(chunks: usize, gap: Duration) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    tokio::spawn(async move {
        let _ = tx.send(Ok(b"{\"nextState\":\"FAILED\",\"errorDetail\":\"".to_vec())).await;
        for _ in 0..chunks {
            if tx.send(Ok(vec![b'x'; 8192])).await.is_err() {
                return;
            }
            tokio::time::sleep(gap).await;
        }
        let _ = tx.send(Ok(b"\"}".to_vec())).await;
    });
    Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// A gRPC executor (on the SDK) whose answers hold what cannot be stored.
struct GrpcHostile;

#[async_trait]
impl Handler for GrpcHostile {
    async fn preflight(&self, _: &str, ctx: &ExecutionContext) -> Result<Option<ExecutionResult>, HandlerError> {
        if ctx.node_config["hostile"]["preflight"] == "nul_detail" {
            let mut r = ExecutionResult::new(NodeState::Failed);
            r.error_code = Some("BAD".into());
            r.error_detail = Some("bad\u{0}detail".into());
            return Ok(Some(r));
        }
        Ok(None)
    }

    async fn prepare(&self, _: &str, _: &ExecutionContext) -> Result<PrepareOutcome, HandlerError> {
        Ok(PrepareOutcome::Action(PreparedAction::new("transfer", "json", "{}".into(), false)))
    }

    async fn submit(
        &self,
        _: &str,
        ctx: &ExecutionContext,
        _: &SubmitCall<'_>,
    ) -> Result<ExecutionResult, HandlerError> {
        let mut r = ExecutionResult::new(NodeState::Submitted);
        r.provider_ref_id = Some("g-1".into());
        if ctx.node_config["hostile"]["submit"] == "nul_key" {
            r.provider_refs.insert("ref\u{0}".into(), json!("x"));
        }
        Ok(r)
    }

    async fn observe(&self, _: &str, _: &ExecutionContext) -> Result<ExecutionResult, HandlerError> {
        Ok(ExecutionResult::new(NodeState::Completed))
    }

    async fn recover(&self, _: &str, _: &ExecutionContext, _: &str) -> Result<ExecutionResult, HandlerError> {
        Ok(ExecutionResult::new(NodeState::Unknown))
    }
}

async fn node_state(db: &TestDb, id: &str) -> anyhow::Result<(String, Option<String>)> {
    Ok(sqlx::query_as("SELECT node_state, error_code FROM movement_request_nodes WHERE request_id = $1::uuid")
        .bind(id)
        .fetch_one(&db.pool)
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_answers_stay_with_their_node_and_the_worker_goes_on() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let http_addr = http.local_addr()?;
    let app = axum::Router::new().route("/{method}", axum::routing::post(http_executor).get(http_executor));
    tokio::spawn(async move { axum::serve(http, app).await });
    let shutdown = CancellationToken::new();
    let grpc = serve(
        Arc::new(GrpcHostile),
        ServeConfig { grpc_addr: Some("127.0.0.1:0".parse()?), ..Default::default() },
        shutdown.clone(),
    )
    .await?;
    let grpc_addr = grpc.grpc_addr.expect("grpc addr");
    let sim = std::fs::read_to_string(registry_file())?;
    let registry = std::env::temp_dir().join(format!("{}-hostile.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{sim}\n[executors.\"exec.bad.http\"]\ntransport = \"http\"\nendpoint = \"http://{http_addr}\"\n\
             timeout_ms = 1500\n\
             [executors.\"exec.bad.grpc\"]\ntransport = \"grpc\"\nendpoint = \"http://{grpc_addr}\"\n\
             timeout_ms = 1500\n"
        ),
    )?;
    let registry_path = registry.to_string_lossy().to_string();
    let mut env = vec![("MG_EXECUTOR_REGISTRY", registry_path.as_str()), ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2")];
    env.extend(fast_recovery());
    let api = Api::all_in_one(&db.url, &env).await?;
    let keys = Keys::create(&api).await?;

    // One template per hostile answer, each movement older than the healthy one.
    let cases: &[(&str, &str, Value, &str)] = &[
        ("h1", "exec.bad.http", json!({"preflight": "nul_detail"}), "FAILED"),
        ("h2", "exec.bad.http", json!({"preflight": "endless"}), "FAILED"),
        ("h2b", "exec.bad.http", json!({"preflight": "drip"}), "FAILED"),
        ("h3", "exec.bad.http", json!({"prepare": "nul_payload"}), "FAILED"),
        ("h4", "exec.bad.http", json!({"prepare": "expired"}), "FAILED"),
        ("h5", "exec.bad.http", json!({"submit": "nul_key"}), "UNKNOWN"),
        ("h6", "exec.bad.http", json!({"observe": "deep"}), "SUBMITTED"),
        ("h7", "exec.bad.http", json!({"observe": "growing"}), "SUBMITTED"),
        ("g1", "exec.bad.grpc", json!({"preflight": "nul_detail"}), "FAILED"),
        ("g2", "exec.bad.grpc", json!({"submit": "nul_key"}), "UNKNOWN"),
    ];
    let mut hostile = Vec::new();
    for (key, executor, hostile_config, _) in cases {
        let node = json!({"node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": executor,
                          "config": {"hostile": hostile_config}});
        install_template(&api, &keys, json!({"template_key": format!("t.{key}"), "nodes": [node]})).await?;
        hostile.push(start_movement(&api, &keys, &format!("t.{key}"), &format!("m-{key}"), None).await?);
    }
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.ok", "nodes": [
        {"node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;
    let healthy = start_movement(&api, &keys, "t.ok", "m-ok", None).await?;
    let m = wait_state(
        &api,
        &keys.requester,
        &healthy,
        &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
        Duration::from_secs(30),
    )
    .await?;
    assert_eq!(m["request_state"], "COMPLETED", "the healthy movement behind the hostile ones: {m:#}");

    for ((key, _, _, expected), id) in cases.iter().zip(&hostile) {
        let sql = "SELECT count(*) > 0 FROM node_events WHERE request_id = $1 AND (error_code IN
                   ('EXECUTOR_PROTOCOL_ERROR', 'PREPARED_ACTION_EXPIRED') OR outcome = 'timeout')";
        wait_db(&db.pool, sql, id.parse()?, Duration::from_secs(20))
            .await
            .map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
        let (state, code) = node_state(&db, id).await?;
        let expected_states: &[&str] = match *expected {
            // An observe answer that cannot be stored changes nothing: the node keeps its state.
            "SUBMITTED" => &["SUBMITTED", "OBSERVING"],
            // Recovery may have decided it since (this executor finds no order: FAILED).
            "UNKNOWN" => &["UNKNOWN", "FAILED"],
            other => &[other],
        };
        assert!(expected_states.contains(&state.as_str()), "{key}: node {state} ({code:?})");
    }
    // The observed node is held back, not re-polled in a loop.
    let (h6_polls,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM node_events WHERE request_id = $1::uuid AND method = 'observe'")
            .bind(&hostile[6])
            .fetch_one(&db.pool)
            .await?;
    assert!(h6_polls <= 3, "the deep observe answer is backed off, not retried at once: {h6_polls} polls");
    // An executor that grows the node's refs on every poll is refused once the node's bound
    // would be passed: nothing beyond it is stored (nor sent back on the next call).
    let (keys_held, refused): (i32, Option<String>) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM jsonb_object_keys(n.provider_refs))::int,
                (SELECT e.error_detail FROM node_events e WHERE e.request_node_id = n.id
                   AND e.error_code = 'EXECUTOR_PROTOCOL_ERROR' ORDER BY e.id LIMIT 1)
           FROM movement_request_nodes n WHERE n.request_id = $1::uuid",
    )
    .bind(&hostile[7])
    .fetch_one(&db.pool)
    .await?;
    assert!(keys_held <= 256, "the node's refs stay bounded: {keys_held} keys");
    assert!(refused.as_deref().is_some_and(|d| d.contains("for the node")), "{refused:?}");
    assert!(!api.proc.log().contains("tick failed"), "no worker tick failed:\n{}", api.proc.log());
    shutdown.cancel();
    db.drop_db().await;
    Ok(())
}

/// A signer that refuses every request, with its reason.
struct Refuses;

#[async_trait]
impl qtg_executor_sdk::SignerHandler for Refuses {
    async fn sign(&self, _: &qtg_core::SignRequest) -> Result<qtg_core::SignResult, qtg_executor_sdk::SignerError> {
        Err(qtg_executor_sdk::SignerError::Refused("destination is not on the treasury allowlist".into()))
    }

    async fn signer_address(&self, _: &str) -> Result<Option<String>, qtg_executor_sdk::SignerError> {
        Ok(None)
    }
}

/// A remote signer's refusal is told by its status (gRPC FAILED_PRECONDITION, HTTP 422) and
/// carries the signer's reason; another status, whatever its body says, is a failed call (the
/// node is then not proven unsigned), never a refusal.
#[tokio::test]
async fn a_remote_signers_refusal_is_told_by_its_status_not_its_text() -> anyhow::Result<()> {
    use qtg_executor::remote::{Endpoint, RemoteSigner};
    use qtg_executor::{SignError, Signer};

    let shutdown = CancellationToken::new();
    let running = serve(
        Arc::new(GrpcHostile),
        ServeConfig {
            signer: Some(Arc::new(Refuses)),
            grpc_addr: Some("127.0.0.1:0".parse()?),
            http_addr: Some("127.0.0.1:0".parse()?),
            ..Default::default()
        },
        shutdown.clone(),
    )
    .await?;
    let endpoint =
        |url: String| Endpoint { url, timeout: Duration::from_secs(10), auth: Default::default(), tls: None };
    let payload = "{\"to\":\"0xabc\"}".to_string();
    let hash = qtg_core::hash::sha256_hex(payload.as_bytes());
    let mut req: qtg_core::SignRequest = serde_json::from_value(json!({
        "protocol_version": qtg_core::protocol::PROTOCOL_VERSION, "request_id": "r", "request_node_id": "n",
        "signer_key": "signer.ex", "payload_format": "json", "payload": payload, "payload_hash": hash,
        "metadata": {},
        "signing_intent": {"action": "transfer", "asset": "USDC", "amount": "1", "destination": "0xabc",
                           "chain_family": "evm", "allowed_payload_hash": hash},
    }))?;
    let http = RemoteSigner::http(endpoint(format!("http://{}/signer", running.http_addr.expect("http"))))
        .map_err(anyhow::Error::msg)?;
    let grpc = RemoteSigner::grpc(endpoint(format!("http://{}", running.grpc_addr.expect("grpc"))))
        .map_err(anyhow::Error::msg)?;
    for (transport, signer) in [("http", &http), ("grpc", &grpc)] {
        match signer.sign(&req).await {
            Err(SignError::Refused(why)) => {
                assert!(why.contains("treasury allowlist"), "{transport}: the signer's reason is kept: {why}")
            }
            other => panic!("{transport}: expected a refusal, got {other:?}"),
        }
    }
    // The SDK's own hash rule refuses too (422), before the signer sees the request.
    req.payload_hash = "0".repeat(64);
    assert!(matches!(http.sign(&req).await, Err(SignError::Refused(_))));

    // A 400 whose text reads like a refusal is not one.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let liar = axum::Router::new().route(
        "/signer/sign",
        axum::routing::post(|| async { (StatusCode::BAD_REQUEST, "x: HTTP 422 Unprocessable Entity").into_response() }),
    );
    tokio::spawn(async move { axum::serve(listener, liar).await });
    let liar = RemoteSigner::http(endpoint(format!("http://{addr}/signer"))).map_err(anyhow::Error::msg)?;
    let answer = liar.sign(&req).await;
    assert!(matches!(answer, Err(SignError::Call(_))), "{answer:?}");
    shutdown.cancel();
    running.wait().await
}
