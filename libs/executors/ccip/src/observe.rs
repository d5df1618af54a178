//! `exec.ccip.observe[.<suffix>]` (action `ccip_delivery`): the message's execution on the
//! destination chain. The send predecessor hands over the message id, its sequence number and
//! both selectors; the OffRamp that serves the send's OnRamp on the destination router answers
//! its execution state. SUCCESS completes (with the execution's transaction, when its
//! `ExecutionStateChanged` is found); FAILURE is handed to a person with the evidence — it is
//! not final (manual execution may still turn it into SUCCESS), so nothing is ever re-sent;
//! UNTOUCHED or IN_PROGRESS is still in flight (OBSERVING, at the seed's `ccip_delivery` pacing
//! unless the entry's `poll_seconds` says otherwise). A message that is never executed emits
//! nothing on the destination: only the observation deadline (`timeout_policy.observe_seconds`)
//! or the stranded reaper finds it.
//!
//! ```toml
//! [executors."exec.ccip.observe"]
//! transport = "local"
//! impl = "ccip"
//! config = { poll_seconds = 60 }
//! ```

use std::sync::Arc;

use alloy::primitives::{Address, Bytes, B256};
use alloy::sol_types::SolEvent;
use async_trait::async_trait;
use qtg_core::codes;
use qtg_core::hash::canonical_json;
use qtg_core::markers::MANUAL_REVIEW_REQUIRED;
use qtg_core::{
    AfterObserve, AfterSubmit, ExecutionContext, ExecutionResult, ObserveOutcome, PreparedAction, Refusal,
    SubmitOutcome,
};
use qtg_evm::call::hex_address;
use qtg_evm::{Chains, RpcError};
use qtg_executor::{Executor, ExecutorError, Prepared, Submission};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::abi::{self, ExecutionState, ExecutionStateChanged};
use crate::chains::{uint64, CcipChains};

/// How far back from the destination's head an execution's log is looked for (its state is
/// read from the OffRamp whatever this finds).
const LOG_LOOKBACK_BLOCKS: u64 = 5_000;

/// An observe entry's `config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserveConfig {
    /// Seconds between looks while the message is in flight (default: the seed's
    /// `ccip_delivery` interval, 60 s).
    pub poll_seconds: Option<f64>,
}

pub struct DeliveryObserver {
    pub config: ObserveConfig,
    pub ccip: Arc<CcipChains>,
    pub chains: Arc<Chains>,
    /// Where the send's intent is resolved (none: not recorded).
    pub pool: Option<sqlx::PgPool>,
}

/// The message a delivery node watches.
#[derive(Debug, Clone, PartialEq)]
struct Target {
    message_id: B256,
    sequence_number: u64,
    source_selector: u64,
    destination_selector: u64,
    on_ramp: Address,
}

fn unavailable(e: RpcError) -> ExecutorError {
    ExecutorError::Unavailable(e.to_string())
}

impl DeliveryObserver {
    /// From the node's config, else its send predecessor's refs (`provider_context`).
    fn target(&self, ctx: &ExecutionContext) -> Result<Target, String> {
        let get = |k: &str| ctx.node_config.get(k).or_else(|| ctx.provider_context.get(k));
        let message_id = get("message_id")
            .and_then(Value::as_str)
            .and_then(|m| m.parse::<B256>().ok())
            .ok_or("no message_id (config, or the send predecessor's)")?;
        let number = |k: &str| get(k).and_then(uint64).ok_or(format!("no {k} (config, or the send predecessor's)"));
        let on_ramp = get("on_ramp")
            .and_then(Value::as_str)
            .and_then(|a| a.parse::<Address>().ok())
            .ok_or("no on_ramp (config, or the send predecessor's)")?;
        Ok(Target {
            message_id,
            sequence_number: number("sequence_number")?,
            source_selector: number("source_chain_selector")?,
            destination_selector: number("destination_chain_selector")?,
            on_ramp,
        })
    }

    fn observing(&self, state: &str) -> ObserveOutcome {
        let mut r = ExecutionResult::new(AfterObserve::Observing);
        r.provider_state = Some(state.into());
        r.retry_after_seconds = self.config.poll_seconds;
        r
    }

    /// A person decides, with the evidence in the node's refs.
    fn to_person(code: &str, detail: String, review: &str) -> ObserveOutcome {
        let mut r = ExecutionResult::new(AfterObserve::Unknown);
        r.error_code = Some(code.into());
        r.error_detail = Some(detail);
        r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!(review));
        r
    }

    async fn look(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        let t = self.target(ctx).map_err(ExecutorError::Protocol)?;
        let Some(dest) = self.ccip.of_selector(t.destination_selector) else {
            return Ok(Self::to_person(
                codes::CCIP_CHAIN_NOT_CONFIGURED,
                format!(
                    "destination chain selector {} is not in MG_CCIP_CHAINS: its execution cannot be read",
                    t.destination_selector
                ),
                "ccip_destination_not_configured",
            ));
        };
        let Some(chain) = self.chains.get(&dest.chain_id) else {
            return Ok(Self::to_person(
                codes::CCIP_CHAIN_NOT_CONFIGURED,
                format!("chain {} is not in MG_EVM_CHAINS", dest.chain_id),
                "ccip_destination_not_configured",
            ));
        };
        let rpc = &chain.rpc;
        // The OffRamp of the destination router that serves the send's OnRamp.
        let ramps = abi::view(rpc, dest.router, abi::getOffRampsCall {}).await.map_err(unavailable)?;
        let mut off_ramp = None;
        for ramp in ramps.iter().filter(|r| r.sourceChainSelector == t.source_selector) {
            let config =
                abi::view(rpc, ramp.offRamp, abi::getSourceChainConfigCall { sourceChainSelector: t.source_selector })
                    .await
                    .map_err(unavailable)?;
            if config.onRamp.as_ref() == abi::encoded(t.on_ramp).as_ref() {
                off_ramp = Some(ramp.offRamp);
                break;
            }
        }
        let Some(off_ramp) = off_ramp else {
            return Ok(Self::to_person(
                codes::CCIP_OFFRAMP_NOT_FOUND,
                format!(
                    "no OffRamp of the destination router {} serves the OnRamp {} of chain selector {}: message {} \
                     cannot be followed",
                    dest.router, t.on_ramp, t.source_selector, t.message_id
                ),
                "ccip_offramp_not_found",
            ));
        };
        let raw = abi::view(
            rpc,
            off_ramp,
            abi::getExecutionStateCall { sourceChainSelector: t.source_selector, sequenceNumber: t.sequence_number },
        )
        .await
        .map_err(unavailable)?;
        let state = ExecutionState::of(raw)
            .ok_or_else(|| ExecutorError::Protocol(format!("the OffRamp {off_ramp} answered execution state {raw}")))?;
        let mut r = match state {
            ExecutionState::Untouched | ExecutionState::InProgress => {
                let mut r = self.observing("in_flight");
                r.provider_refs.insert("execution_state".into(), json!(state.as_str()));
                r
            }
            ExecutionState::Success | ExecutionState::Failure => {
                if let Some(pool) = &self.pool {
                    let id = t.message_id.to_string();
                    qtg_store::ccip::mark_execution(pool, &id, state == ExecutionState::Success)
                        .await
                        .map_err(|e| ExecutorError::Unavailable(format!("ccip_send_intent: {e}")))?;
                }
                let log = self.execution_log(chain, off_ramp, &t).await?;
                let mut r = if state == ExecutionState::Success {
                    let mut r = ExecutionResult::new(AfterObserve::Completed);
                    r.provider_state = Some("executed".into());
                    tracing::info!(message_id = %t.message_id, off_ramp = %off_ramp, "CCIP message executed: SUCCESS");
                    r
                } else {
                    let return_data = log.as_ref().map(|l| l.1.to_string()).unwrap_or_default();
                    tracing::warn!(
                        message_id = %t.message_id, off_ramp = %off_ramp, return_data = %return_data,
                        "CCIP message execution FAILURE: handed to a person (never re-sent)"
                    );
                    Self::to_person(
                        codes::CCIP_EXECUTION_FAILED,
                        format!(
                            "message {} (sequence number {} from chain selector {}) failed on the OffRamp {off_ramp} \
                             (return data {return_data}); manual execution can still deliver it — never re-send",
                            t.message_id, t.sequence_number, t.source_selector
                        ),
                        "ccip_execution_failed",
                    )
                };
                r.provider_refs.insert("execution_state".into(), json!(state.as_str()));
                if let Some((hash, return_data)) = log {
                    r.provider_refs.insert("execution_tx_hash".into(), json!(hash));
                    r.provider_refs.insert("execution_return_data".into(), json!(return_data.to_string()));
                    r.provider_ref_id = Some(hash);
                }
                r
            }
        };
        r.provider_refs.insert("message_id".into(), json!(t.message_id.to_string()));
        r.provider_refs.insert("off_ramp".into(), json!(hex_address(off_ramp)));
        r.provider_refs.insert("destination_chain_id".into(), json!(dest.chain_id));
        Ok(r)
    }

    /// The latest `ExecutionStateChanged` of the message on the OffRamp within the lookback:
    /// its transaction and return data (`None` when not found there).
    async fn execution_log(
        &self,
        chain: &qtg_evm::Chain,
        off_ramp: Address,
        t: &Target,
    ) -> Result<Option<(String, Bytes)>, ExecutorError> {
        let rpc = &chain.rpc;
        let head = rpc.quantity("eth_blockNumber", json!([])).await.map_err(unavailable)?;
        let from = head.saturating_sub(u128::from(LOG_LOOKBACK_BLOCKS));
        let word = |n: u64| B256::left_padding_from(&n.to_be_bytes()).to_string();
        let logs = rpc
            .call(
                "eth_getLogs",
                json!([{
                    "address": hex_address(off_ramp),
                    "fromBlock": format!("{from:#x}"),
                    "toBlock": "latest",
                    "topics": [
                        abi::execution_state_changed_topic().to_string(),
                        word(t.source_selector),
                        word(t.sequence_number),
                        t.message_id.to_string(),
                    ],
                }]),
            )
            .await
            .map_err(unavailable)?;
        let last = logs.as_array().and_then(|l| l.last()).cloned();
        Ok(last.and_then(|log| {
            let topics: Vec<B256> =
                log.get("topics")?.as_array()?.iter().filter_map(|x| x.as_str()?.parse().ok()).collect();
            let data: Bytes = log.get("data")?.as_str()?.parse().ok()?;
            let event = ExecutionStateChanged::decode_raw_log(topics, &data).ok()?;
            let hash = log.get("transactionHash")?.as_str()?.to_ascii_lowercase();
            Some((hash, event.returnData))
        }))
    }
}

#[async_trait]
impl Executor for DeliveryObserver {
    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError> {
        Ok(self.target(ctx).err().map(|why| ExecutionResult::failed(codes::CCIP_SEND_REFERENCE_MISSING, why)))
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        match self.target(ctx) {
            Ok(t) => Ok(Prepared::Action(PreparedAction::new(
                &ctx.action_type,
                "json",
                canonical_json(&json!({
                    "message_id": t.message_id.to_string(),
                    "sequence_number": t.sequence_number.to_string(),
                    "source_chain_selector": t.source_selector.to_string(),
                    "destination_chain_selector": t.destination_selector.to_string(),
                })),
                false,
            ))),
            Err(why) => Ok(Prepared::Refused(ExecutionResult::failed(codes::CCIP_SEND_REFERENCE_MISSING, why))),
        }
    }

    /// Observing moves nothing: its submit starts the watch.
    async fn submit(&self, _: &ExecutionContext, _: &Submission<'_>) -> Result<SubmitOutcome, ExecutorError> {
        let mut r = ExecutionResult::new(AfterSubmit::Submitted);
        r.retry_after_seconds = Some(1.0);
        Ok(r)
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        self.look(ctx).await
    }

    /// Recovery reads the same evidence: a delivery is settled from the chain, never acted on.
    async fn recover(&self, ctx: &ExecutionContext, _: &str) -> Result<SubmitOutcome, ExecutorError> {
        Ok(self.look(ctx).await?.widen())
    }

    /// Up when every configured chain's router answers.
    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        let mut out = serde_json::Map::new();
        for c in self.ccip.iter() {
            let Some(chain) = self.chains.get(&c.chain_id) else { continue };
            let ramps = abi::view(&chain.rpc, c.router, abi::getOffRampsCall {}).await.map_err(unavailable)?;
            out.insert(c.chain_id.to_string(), json!({"router": hex_address(c.router), "off_ramps": ramps.len()}));
        }
        Ok(Some(json!({"status": "ok", "chains": out})))
    }
}
