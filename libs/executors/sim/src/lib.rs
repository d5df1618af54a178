//! The sim lane (docs/architecture.md §9.3): in-process executors and a signer for demos, tests and
//! benchmarks, scripted through the node's `config.sim`, keeping a venue-side `sim_ledger`,
//! the fence's key store (`sim_keys`) and a count of every submit call (`sim_submit_calls`),
//! written on the venue's own connection. It follows the fence of a venue with a deadline:
//! a key that is void, superseded or past `submit_by` is refused without an effect, and
//! Recover answers FAILED only by voiding the key.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use qtg_core::hash::{canonical_json, sha256_hex};
use qtg_core::{
    AfterObserve, AfterSubmit, ExecutionContext, ExecutionResult, NextState, ObserveOutcome, PreparedAction, Refusal,
    SignRequest, SignResult, SubmitOutcome,
};
use qtg_executor::{
    Executor, ExecutorError, LaneContext, LaneError, LaneExecutor, LanePlugin, Prepared, Setting, SignError, Signer,
    Submission,
};
use qtg_store::sim::SimSubmit;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sqlx::PgPool;
use uuid::Uuid;

/// `config.sim`, with the contract's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
struct Script {
    preflight: String,
    submit: String,
    submit_result: String,
    observe_polls: u32,
    observe: String,
    recover: Option<String>,
    delay_ms: u64,
    /// Inside prepare, before it answers (a slow prepare: a remote build, an MPC round).
    prepare_delay_ms: u64,
    /// Inside submit, before the venue receives the call (a request on the wire): the call
    /// reaches the venue even if the caller gave up meanwhile.
    submit_hold_ms: u64,
    retry_after_seconds: Option<f64>,
    provider_refs: Map<String, Value>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            preflight: "ok".into(),
            submit: "ok".into(),
            submit_result: "submitted".into(),
            observe_polls: 0,
            observe: "ok".into(),
            recover: None,
            delay_ms: 0,
            prepare_delay_ms: 0,
            submit_hold_ms: 0,
            retry_after_seconds: None,
            provider_refs: Map::new(),
        }
    }
}

impl Script {
    fn of(ctx: &ExecutionContext) -> Result<Script, ExecutorError> {
        match ctx.node_config.get("sim") {
            None | Some(Value::Null) => Ok(Script::default()),
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| ExecutorError::Protocol(format!("config.sim: {e}")))
            }
        }
    }

    fn result<S: NextState>(&self, state: S) -> ExecutionResult<S> {
        let mut r = ExecutionResult::new(state);
        r.provider_refs = self.provider_refs.clone();
        r.provider_state = Some(format!("sim_{}", state.into().as_str().to_ascii_lowercase()));
        r
    }

    fn failed<S: NextState>(&self, code: &str, detail: &str) -> ExecutionResult<S> {
        let mut r = self.result(S::FAILED);
        r.error_code = Some(code.into());
        r.error_detail = Some(detail.into());
        r
    }
}

const POLLS_KEY: &str = "sim_observe_polls";

pub struct SimExecutor {
    key: String,
    venue: PgPool,
}

impl SimExecutor {
    pub fn new(key: &str, venue: PgPool) -> Self {
        SimExecutor { key: key.to_string(), venue }
    }

    fn node_id(ctx: &ExecutionContext) -> Result<Uuid, ExecutorError> {
        ctx.request_node_id.parse().map_err(|_| ExecutorError::Protocol("request_node_id is not a uuid".into()))
    }

    fn unavailable(e: impl std::fmt::Display) -> ExecutorError {
        ExecutorError::Unavailable(format!("sim venue: {e}"))
    }
}

#[async_trait]
impl Executor for SimExecutor {
    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError> {
        let script = Script::of(ctx)?;
        Ok(match script.preflight.as_str() {
            "fail" => Some(script.failed(qtg_core::codes::SIM_PREFLIGHT_FAILED, "scripted preflight failure")),
            _ => None,
        })
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        let script = Script::of(ctx)?;
        if script.prepare_delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(script.prepare_delay_ms)).await;
        }
        let payload = canonical_json(&json!({
            "executor_key": self.key,
            "request_node_id": ctx.request_node_id,
            "action_type": ctx.action_type,
            "intent": ctx.intent,
            "node_config": ctx.node_config,
        }));
        Ok(Prepared::Action(PreparedAction::new(&ctx.action_type, "json", payload, false)))
    }

    async fn submit(&self, ctx: &ExecutionContext, s: &Submission<'_>) -> Result<SubmitOutcome, ExecutorError> {
        let script = Script::of(ctx)?;
        let key = s.idempotency_key;
        // The venue honours client order ids (a repeated key is the same order) and the fence:
        // a void, superseded or late key is refused without an effect. The call runs as its
        // own task, like a request on the wire: it reaches the venue even if the caller gives
        // up (a deadline) or freezes meanwhile.
        let call = {
            let (venue, key, executor) = (self.venue.clone(), key.to_string(), self.key.clone());
            let (node, attempt, submit_by, fail) =
                (Self::node_id(ctx)?, ctx.attempt_no, s.submit_by, script.submit == "fail");
            let hold = Duration::from_millis(script.submit_hold_ms);
            tokio::spawn(async move {
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                qtg_store::sim::submit(&venue, &key, &executor, node, attempt, submit_by, fail).await
            })
        };
        let outcome = call.await.map_err(Self::unavailable)?.map_err(Self::unavailable)?;
        let refused = |code: &str, detail: &str| Ok(script.failed(code, detail));
        match outcome {
            SimSubmit::Failed => return refused(qtg_core::codes::SIM_SUBMIT_FAILED, "scripted submit failure"),
            SimSubmit::RefusedVoid => {
                return refused(qtg_core::codes::SIM_KEY_VOID, "the idempotency key was voided by recover")
            }
            SimSubmit::RefusedOlder => {
                return refused(qtg_core::codes::SIM_KEY_SUPERSEDED, "a newer attempt of this node was already seen")
            }
            SimSubmit::RefusedLate => return refused(qtg_core::codes::SIM_SUBMIT_LATE, "received after submit_by"),
            SimSubmit::Executed | SimSubmit::Repeat => {}
        }
        if script.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(script.delay_ms)).await;
        }
        match script.submit.as_str() {
            "unknown" => Ok(script.result(AfterSubmit::Unknown)),
            "timeout" => Err(ExecutorError::Timeout(script.delay_ms)),
            _ => {
                let state =
                    if script.submit_result == "completed" { AfterSubmit::Completed } else { AfterSubmit::Submitted };
                let mut r = script.result(state);
                r.provider_ref_id = Some(format!("sim-{}", sha256_hex(key.as_bytes()).get(..16).unwrap_or("")));
                r.provider_refs.insert("sim_order_id".into(), json!(key));
                Ok(r)
            }
        }
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        let script = Script::of(ctx)?;
        match script.observe.as_str() {
            "fail" => return Ok(script.failed(qtg_core::codes::SIM_OBSERVE_FAILED, "scripted observe failure")),
            "unknown" => return Ok(script.result(AfterObserve::Unknown)),
            _ => {}
        }
        let polls = ctx.provider_refs.get(POLLS_KEY).and_then(Value::as_u64).unwrap_or(0);
        if polls < u64::from(script.observe_polls) {
            let mut r = script.result(AfterObserve::Observing);
            r.provider_refs.insert(POLLS_KEY.into(), json!(polls + 1));
            r.retry_after_seconds = script.retry_after_seconds;
            return Ok(r);
        }
        let mut r = script.result(AfterObserve::Completed);
        r.generated_artifacts.push(json!({"kind": "sim_receipt", "polls": polls}));
        Ok(r)
    }

    async fn recover(&self, ctx: &ExecutionContext, idempotency_key: &str) -> Result<SubmitOutcome, ExecutorError> {
        let script = Script::of(ctx)?;
        let node_id = Self::node_id(ctx)?;
        let scripted = match script.recover.as_deref() {
            None => None,
            Some("completed") => Some(AfterSubmit::Completed),
            Some("failed") => Some(AfterSubmit::Failed),
            Some("submitted") => Some(AfterSubmit::Submitted),
            Some("unknown") => Some(AfterSubmit::Unknown),
            Some(other) => return Err(ExecutorError::Protocol(format!("config.sim.recover {other:?}"))),
        };
        // FAILED only by voiding the key (the fence): a later submit with it is refused.
        let state = match scripted {
            Some(AfterSubmit::Failed) => {
                qtg_store::sim::recover(&self.venue, idempotency_key, node_id, ctx.attempt_no, true)
                    .await
                    .map_err(Self::unavailable)?;
                AfterSubmit::Failed
            }
            Some(state) => state,
            None => {
                let found = qtg_store::sim::recover(&self.venue, idempotency_key, node_id, ctx.attempt_no, false)
                    .await
                    .map_err(Self::unavailable)?;
                if found {
                    AfterSubmit::Submitted
                } else {
                    AfterSubmit::Failed
                }
            }
        };
        let mut r = script.result(state);
        r.provider_refs.insert("sim_recovered_by".into(), json!(idempotency_key));
        if state == AfterSubmit::Failed {
            r.error_code = Some(qtg_core::codes::SIM_NOT_FOUND.into());
            r.error_detail = Some("the venue has no order with this idempotency key; the key is now void".into());
        }
        Ok(r)
    }

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        qtg_store::ping(&self.venue).await.map_err(Self::unavailable)?;
        Ok(Some(json!({"status": "ok"})))
    }
}

/// `signer.sim`: signs only the payload whose hash the request allows.
pub struct SimSigner {
    key: String,
}

impl SimSigner {
    pub fn new(key: &str) -> Self {
        SimSigner { key: key.to_string() }
    }

    pub fn address(&self) -> String {
        format!("0x{}", &sha256_hex(self.key.as_bytes())[..40])
    }
}

#[async_trait]
impl Signer for SimSigner {
    async fn sign(&self, req: &SignRequest) -> Result<SignResult, SignError> {
        let actual = sha256_hex(req.payload.as_bytes());
        if actual != req.payload_hash || actual != req.signing_intent.allowed_payload_hash {
            return Err(SignError::Refused(format!(
                "payload hash {actual} is not the allowed_payload_hash {}",
                req.signing_intent.allowed_payload_hash
            )));
        }
        let signature = sha256_hex(format!("{}:{}", self.key, actual).as_bytes());
        Ok(SignResult {
            signed_tx_hash: Some(format!("0x{}", sha256_hex(signature.as_bytes()))),
            signature,
            signed_payload: Some(req.payload.clone()),
            signer_address: Some(self.address()),
        })
    }

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        Ok(Some(json!({"status": "ok", "signer_address": self.address()})))
    }
}

/// The sim lane (`impl = "sim"`): executors over the `sim_*` venue tables, a deterministic
/// signer.
pub struct SimLane {
    venue: PgPool,
}

/// The lane's factory (listed in `services/common/src/lanes.rs`).
pub fn lane(ctx: &LaneContext<'_>) -> Result<Box<dyn LanePlugin>, LaneError> {
    Ok(Box::new(SimLane { venue: ctx.pool.clone() }))
}

impl LanePlugin for SimLane {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn executor(&self, key: &str, config: Option<&toml::Table>, _: Setting<'_>) -> Result<LaneExecutor, LaneError> {
        no_config(config)?;
        Ok(LaneExecutor::new(Arc::new(SimExecutor::new(key, self.venue.clone()))))
    }

    fn signer(&self, key: &str, config: Option<&toml::Table>, _: Setting<'_>) -> Result<Arc<dyn Signer>, LaneError> {
        no_config(config)?;
        Ok(Arc::new(SimSigner::new(key)))
    }
}

/// The sim is scripted per node (`config.sim` in the plan), not per entry.
fn no_config(config: Option<&toml::Table>) -> Result<(), LaneError> {
    match config {
        Some(c) if !c.is_empty() => {
            Err(LaneError::Config("the sim lane takes no entry `config` (script it in the plan's node config)".into()))
        }
        _ => Ok(()),
    }
}
