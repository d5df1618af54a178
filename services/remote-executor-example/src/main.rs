//! `qtg-remote-executor-example`: a reference remote executor built on the SDK — a transfer
//! lane with its own in-memory ledger keyed by idempotency key, served over gRPC and HTTP
//! JSON. Scripted per node through `config.example` for demos and tests:
//! `observe_polls` (default 1), `preflight: "fail"`, `submit_delay_ms`, `garbage: "<method>"`
//! (answer that method with a contract violation), `fail: [<method>…]` (answer UNAVAILABLE),
//! `slow: {<method>: ms}`, `oversize: "observe"` (an answer over qtg's size limit).
//!
//! Env: `EXAMPLE_SIGN_DELAY_MS` (the stand-in signer's latency), `EXAMPLE_KEY_STORE` (the file that
//! keeps the fence's idempotency keys across restarts; default
//! `$HOME/.local/state/qtg-example/keys.jsonl`; `memory`: in memory, with a warning),
//! `EXAMPLE_GRPC_ADDR` (default 0.0.0.0:50051), `EXAMPLE_HTTP_ADDR` (0.0.0.0:8081),
//! `EXAMPLE_BEARER_TOKEN` or `EXAMPLE_HMAC_SECRET` (optional), `EXAMPLE_BROKEN=double-submit` (a deliberately broken
//! executor that executes a repeated idempotency key twice) or `late-replay` (answers FAILED for an executed key
//! replayed after its `submit_by`) — for the conformance suite to fail.
//! `EXAMPLE_TLS_CERT` + `EXAMPLE_TLS_KEY` (PEM files) serve both transports over TLS.
//! It also serves a stand-in signer (gRPC `SignerService`, HTTP under `/signer`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use qtg_core::hash::canonical_json;
use qtg_executor_sdk::{
    serve, CancellationToken, ExecutionContext, ExecutionResult, FileKeyStore, Handler, HandlerError, KeyStore,
    NodeState, PrepareOutcome, PreparedAction, ServeConfig, SignRequest, SignResult, SignerError, SignerHandler,
    SubmitCall, TlsServer, Verifier,
};
use serde_json::{json, Value};
use tokio::sync::Mutex;

#[derive(Clone)]
struct Order {
    ref_id: String,
    polls: u64,
}

/// `EXAMPLE_BROKEN`: a deliberately broken executor, for the conformance suite to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broken {
    No,
    /// A repeated idempotency key executes again.
    DoubleSubmit,
    /// A key already executed, replayed after its `submit_by`, is answered FAILED (what the
    /// SDK did before a seen key kept its outcome).
    LateReplay,
}

struct Example {
    /// idempotency key → order: the venue's client-order-id index.
    ledger: Mutex<HashMap<String, Order>>,
    broken: Broken,
}

fn script(ctx: &ExecutionContext) -> Value {
    ctx.node_config.get("example").cloned().unwrap_or(Value::Null)
}

fn garbage(ctx: &ExecutionContext, method: &str) -> Option<ExecutionResult> {
    (script(ctx)["garbage"] == method).then(|| {
        // A state this method may never answer and a qtg-only marker: a contract violation.
        let mut r = ExecutionResult::new(NodeState::Submitted);
        r.provider_refs.insert("__submit_attempt_pending".into(), json!(false));
        r
    })
}

/// Scripted faults: `fail: ["<method>", …]` answers UNAVAILABLE / HTTP 503 and
/// `slow: {"<method>": ms}` delays the answer.
async fn fault(ctx: &ExecutionContext, method: &str) -> Result<(), HandlerError> {
    let s = script(ctx);
    if let Some(ms) = s["slow"][method].as_u64() {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if s["fail"].as_array().is_some_and(|m| m.iter().any(|v| v == method)) {
        return Err(HandlerError::Unavailable(format!("scripted {method} outage")));
    }
    Ok(())
}

/// `oversize: "<method>"`: an answer far over qtg's size limit.
fn oversize(ctx: &ExecutionContext, method: &str, mut r: ExecutionResult) -> ExecutionResult {
    if script(ctx)["oversize"] == method {
        r.provider_refs.insert("blob".into(), json!("x".repeat(400 * 1024)));
    }
    r
}

fn submitted(order: &Order) -> ExecutionResult {
    let mut r = ExecutionResult::new(NodeState::Submitted);
    r.provider_ref_id = Some(order.ref_id.clone());
    r.provider_state = Some("ACCEPTED".into());
    r.provider_refs.insert("example_order_id".into(), json!(order.ref_id));
    r
}

#[async_trait]
impl Handler for Example {
    async fn preflight(&self, _key: &str, ctx: &ExecutionContext) -> Result<Option<ExecutionResult>, HandlerError> {
        fault(ctx, "preflight").await?;
        let amount = ctx.intent.get("amount").and_then(Value::as_str).and_then(|a| a.parse::<f64>().ok());
        if script(ctx)["preflight"] == "fail" || !amount.is_some_and(|a| a > 0.0) {
            return Ok(Some(ExecutionResult::failed(
                "EXAMPLE_PREFLIGHT_REFUSED",
                "amount is not positive, or preflight scripted to fail",
            )));
        }
        Ok(garbage(ctx, "preflight"))
    }

    async fn prepare(&self, key: &str, ctx: &ExecutionContext) -> Result<PrepareOutcome, HandlerError> {
        fault(ctx, "prepare").await?;
        let payload =
            canonical_json(&json!({"executor_key": key, "request_node_id": ctx.request_node_id, "intent": ctx.intent}));
        let mut action = PreparedAction::new(&ctx.action_type, "json", payload, false);
        if script(ctx)["garbage"] == "prepare" {
            // A hash that is not sha256(payload): qtg must refuse it.
            action.payload_hash = "0".repeat(64);
        }
        Ok(PrepareOutcome::Action(action))
    }

    async fn submit(
        &self,
        _key: &str,
        ctx: &ExecutionContext,
        call: &SubmitCall<'_>,
    ) -> Result<ExecutionResult, HandlerError> {
        // The SDK already refused a void, superseded or late key; this stand-in venue has no
        // deadline of its own, so the key store is its only fence.
        let idempotency_key = call.idempotency_key;
        let order = {
            let mut ledger = self.ledger.lock().await;
            match ledger.get(idempotency_key) {
                // Same key, same order: never a second effect.
                Some(_) if self.broken == Broken::LateReplay && chrono::Utc::now() > call.submit_by => {
                    tracing::info!(idempotency_key, executed = false, "submit call");
                    return Ok(ExecutionResult::failed(
                        "SUBMIT_BY_PASSED",
                        "late (deliberately broken: the key executed)",
                    ));
                }
                Some(o) if self.broken != Broken::DoubleSubmit => {
                    tracing::info!(idempotency_key, executed = false, "submit call");
                    o.clone()
                }
                _ => {
                    // Every execution at this stand-in venue is logged: tests count them.
                    tracing::info!(idempotency_key, executed = true, "submit call");
                    let o = Order { ref_id: format!("ex-{}", uuid::Uuid::new_v4().simple()), polls: 0 };
                    ledger.insert(idempotency_key.to_string(), o.clone());
                    o
                }
            }
        };
        if let Some(ms) = script(ctx)["submit_delay_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if let Some(g) = garbage(ctx, "submit") {
            let mut g = g;
            g.next_state = NodeState::Ready;
            return Ok(g);
        }
        Ok(submitted(&order))
    }

    async fn observe(&self, _key: &str, ctx: &ExecutionContext) -> Result<ExecutionResult, HandlerError> {
        fault(ctx, "observe").await?;
        if let Some(g) = garbage(ctx, "observe") {
            return Ok(g);
        }
        let key = qtg_core::protocol::idempotency_key(&ctx.request_node_id, ctx.attempt_no);
        let mut ledger = self.ledger.lock().await;
        let Some(order) = ledger.get_mut(&key) else {
            let mut r = ExecutionResult::new(NodeState::Unknown);
            r.error_code = Some("EXAMPLE_ORDER_NOT_FOUND".into());
            return Ok(r);
        };
        order.polls += 1;
        let wanted = script(ctx)["observe_polls"].as_u64().unwrap_or(1);
        let mut r = oversize(ctx, "observe", submitted(order));
        if order.polls >= wanted {
            r.next_state = NodeState::Completed;
            r.provider_state = Some("SETTLED".into());
            r.provider_refs.insert("example_txid".into(), json!(format!("0x{}", &order.ref_id[3..])));
        } else {
            r.next_state = NodeState::Observing;
            r.provider_state = Some("PROCESSING".into());
            r.retry_after_seconds = Some(0.2);
        }
        Ok(r)
    }

    async fn recover(
        &self,
        _key: &str,
        ctx: &ExecutionContext,
        idempotency_key: &str,
    ) -> Result<ExecutionResult, HandlerError> {
        fault(ctx, "recover").await?;
        if let Some(g) = garbage(ctx, "recover") {
            return Ok(g);
        }
        // Only keys the SDK recorded as sent reach here. With no venue deadline, absence is
        // never conclusive (the in-memory ledger is lost on a restart): a person decides.
        match self.ledger.lock().await.get(idempotency_key) {
            Some(o) => Ok(submitted(o)),
            None => {
                let mut r = ExecutionResult::new(NodeState::Unknown);
                r.error_code = Some("EXAMPLE_ORDER_NOT_FOUND".into());
                r.error_detail = Some("the key was sent but the venue has no order for it".into());
                r.provider_refs.insert("__manual_review_required".into(), json!("sent_key_without_order"));
                Ok(r)
            }
        }
    }

    async fn health(&self, _key: &str) -> Result<Value, HandlerError> {
        Ok(json!({"orders": self.ledger.lock().await.len()}))
    }
}

/// A stand-in signer (not real cryptography): signs the allowed payload hash with a key name,
/// after `delay` (an MPC round or an HSM queue, for benchmarks).
struct ExampleSigner {
    delay: Duration,
}

fn example_address(signer_key: &str) -> String {
    format!("0x{}", &qtg_core::hash::sha256_hex(signer_key.as_bytes())[..40])
}

#[async_trait]
impl SignerHandler for ExampleSigner {
    async fn sign(&self, req: &SignRequest) -> Result<SignResult, SignerError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let signature = qtg_core::hash::sha256_hex(format!("{}:{}", req.signer_key, req.payload_hash).as_bytes());
        Ok(SignResult {
            signed_tx_hash: Some(format!("0x{}", qtg_core::hash::sha256_hex(signature.as_bytes()))),
            signature,
            signed_payload: Some(req.payload.clone()),
            signer_address: Some(example_address(&req.signer_key)),
        })
    }

    async fn signer_address(&self, signer_key: &str) -> Result<Option<String>, SignerError> {
        Ok(Some(example_address(signer_key)))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `RUST_LOG=qtg_executor_sdk=debug` also logs the trace context each call carries.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().json().flatten_event(true).with_env_filter(filter).with_writer(std::io::stderr).init();
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let grpc_addr = var("EXAMPLE_GRPC_ADDR").unwrap_or_else(|| "0.0.0.0:50051".into()).parse()?;
    let http_addr = var("EXAMPLE_HTTP_ADDR").unwrap_or_else(|| "0.0.0.0:8081".into()).parse()?;
    let auth = match (var("EXAMPLE_BEARER_TOKEN"), var("EXAMPLE_HMAC_SECRET")) {
        (Some(token), None) => Verifier::Bearer(token),
        (None, Some(secret)) => Verifier::Hmac(vec![secret.into_bytes()]),
        (None, None) => Verifier::None,
        (Some(_), Some(_)) => anyhow::bail!("set EXAMPLE_BEARER_TOKEN or EXAMPLE_HMAC_SECRET, not both"),
    };
    let broken = match var("EXAMPLE_BROKEN").as_deref() {
        None => Broken::No,
        Some("double-submit") => Broken::DoubleSubmit,
        Some("late-replay") => Broken::LateReplay,
        Some(other) => anyhow::bail!("EXAMPLE_BROKEN {other:?} is not double-submit or late-replay"),
    };
    if broken != Broken::No {
        tracing::warn!(?broken, "EXAMPLE_BROKEN: a deliberately broken executor (conformance must fail)");
    }
    let handler = Arc::new(Example { ledger: Mutex::new(HashMap::new()), broken });
    let shutdown = CancellationToken::new();
    let tls = match (var("EXAMPLE_TLS_CERT"), var("EXAMPLE_TLS_KEY")) {
        (Some(cert), Some(key)) => Some(TlsServer { cert_pem: std::fs::read(cert)?, key_pem: std::fs::read(key)? }),
        (None, None) => None,
        _ => anyhow::bail!("EXAMPLE_TLS_CERT and EXAMPLE_TLS_KEY go together"),
    };
    // The fence's key record survives restarts (one replica; several would share a store):
    // EXAMPLE_KEY_STORE, else $HOME/.local/state/qtg-example/keys.jsonl; `memory` keeps keys
    // in memory only (a restart forgets them: no fence across restarts, and Recover of an
    // unknown key cannot answer FAILED).
    let path = match var("EXAMPLE_KEY_STORE") {
        Some(p) => p,
        None => {
            let home = var("HOME").filter(|h| !h.is_empty()).ok_or_else(|| {
                anyhow::anyhow!(
                    "no key store: set EXAMPLE_KEY_STORE to a writable file (or to `memory`, not a fence \
                     across restarts)"
                )
            })?;
            format!("{home}/.local/state/qtg-example/keys.jsonl")
        }
    };
    let key_store = if path == "memory" {
        None
    } else {
        if let Some(dir) = std::path::Path::new(&path).parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("EXAMPLE_KEY_STORE {path}: {e}"))?;
        }
        tracing::info!(path, "idempotency keys kept in a durable file");
        Some(Arc::new(FileKeyStore::open(&path)?) as Arc<dyn KeyStore>)
    };
    let config = ServeConfig {
        grpc_addr: Some(grpc_addr),
        http_addr: Some(http_addr),
        auth,
        signer: Some(Arc::new(ExampleSigner {
            delay: Duration::from_millis(var("EXAMPLE_SIGN_DELAY_MS").map(|v| v.parse()).transpose()?.unwrap_or(0)),
        })),
        tls,
        key_store,
        clock_skew: None,
    };
    let running = serve(handler, config, shutdown.clone()).await?;
    let s = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        s.cancel();
    });
    running.wait().await
}
