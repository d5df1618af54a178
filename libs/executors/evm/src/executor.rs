//! The EVM executor, over any [`EvmCall`] (`exec.evm.transfer` is [`Transfer`]). Prepare
//! reserves the node's nonce (its own short transaction) and builds an EIP-1559 transaction
//! within the chain's fee caps; the signer signs it; submit records the hash with the
//! reservation and broadcasts; observe follows every hash the node broadcast to its
//! confirmations; recover looks them all up and the account's nonce before deciding.

use std::sync::Arc;

use alloy::consensus::transaction::SignerRecoverable;
use alloy::consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Decodable2718;
use alloy::primitives::{Address, TxKind};
use async_trait::async_trait;
use qtg_core::hash::canonical_json;
use qtg_core::markers::MANUAL_REVIEW_REQUIRED;
use qtg_core::{
    AfterObserve, AfterSubmit, ExecutionContext, ExecutionResult, NextState, ObserveOutcome, PreparedAction, Refusal,
    SubmitOutcome,
};
use qtg_executor::{Executor, ExecutorError, Prepared, Submission};
use qtg_store::evm as nonces;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::call::{hex_address, Action, EvmCall, Stage, Transfer, NATIVE_GAS};
use crate::chains::{Chain, Chains};
use crate::rpc::{parse_quantity, quantity, RpcError};
use crate::tx::{TxPayload, PAYLOAD_FORMAT};

/// Seconds between polls of a pending transaction.
const POLL_SECONDS: f64 = 2.0;

/// An executor of one kind of EVM transaction from one address.
pub struct EvmExecutor<C> {
    key: String,
    from: Address,
    chains: Arc<Chains>,
    pool: PgPool,
    signers: crate::LocalSigners,
    call: C,
}

/// `exec.evm.transfer`.
pub type TransferExecutor = EvmExecutor<Transfer>;

/// Where the node's transactions are on chain.
enum Onchain {
    /// Mined with `confirmations`; `ok` = status 1.
    Mined { hash: String, block: u128, confirmations: u64, ok: bool, receipt: Value },
    /// Known to the node, not mined.
    Pending { hash: String },
    /// A transaction that is not the node's consumed its nonce, final.
    ConsumedByOther,
    /// Nothing of the node's is known to the chain and its nonce is free.
    Absent,
}

fn rpc_down(e: RpcError) -> ExecutorError {
    ExecutorError::Unavailable(e.to_string())
}

/// `risk_controls.max_fee_wei`: a decimal string or an integer; anything else is refused.
fn fee_cap(risk: &Value) -> Result<Option<u128>, String> {
    match risk.get("max_fee_wei") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            s.parse::<u128>().map(Some).map_err(|_| format!("max_fee_wei {s:?} is not a number of wei"))
        }
        Some(Value::Number(n)) => {
            n.as_u64().map(|n| Some(u128::from(n))).ok_or_else(|| format!("max_fee_wei {n} is not a number of wei"))
        }
        Some(other) => Err(format!("max_fee_wei {other} is not a number of wei")),
    }
}

/// A node's answer that the transaction is already in its pool (clients spell it differently).
fn already_known(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["already known", "known transaction", "alreadyknown", "already imported"].iter().any(|k| m.contains(k))
}

/// A node's refusal that proves the transaction did not enter its pool.
fn certainly_refused(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "insufficient funds",
        "intrinsic gas too low",
        "exceeds block gas limit",
        "invalid sender",
        "less than block base fee",
        "transaction underpriced",
        "higher than max fee",
        "invalid chain id",
        "nonce too high",
    ]
    .iter()
    .any(|k| m.contains(k))
}

fn failed<S: NextState>(code: &str, detail: impl Into<String>) -> ExecutionResult<S> {
    ExecutionResult::failed(code, detail)
}

/// Whom [`EvmExecutor::follow`] answers, by the state its answer is typed in: observe, whose
/// transaction sent and not yet final is OBSERVING, or recover, whose is SUBMITTED (and which
/// may force a nonce nothing of the attempt is known to have used, but never replaces).
trait Follower: NextState + From<AfterObserve> {
    const PENDING: Self;
    const RECOVERING: bool;
}

impl Follower for AfterObserve {
    const PENDING: Self = AfterObserve::Observing;
    const RECOVERING: bool = false;
}

impl Follower for AfterSubmit {
    const PENDING: Self = AfterSubmit::Submitted;
    const RECOVERING: bool = true;
}

impl<C: EvmCall> EvmExecutor<C> {
    pub fn new(
        key: &str,
        from: Address,
        chains: Arc<Chains>,
        pool: PgPool,
        signers: crate::LocalSigners,
        call: C,
    ) -> Self {
        EvmExecutor { key: key.to_string(), from, chains, pool, signers, call }
    }

    /// The node's signer, when it is a local signer of this lane.
    fn local_signer(&self, ctx: &ExecutionContext) -> Option<Arc<crate::LocalSigner>> {
        let key = ctx.resolved_bindings.get("signer_key").and_then(Value::as_str)?;
        self.signers.read().ok()?.get(key).cloned()
    }

    fn action(&self, ctx: &ExecutionContext) -> Result<Action, (String, String)> {
        self.call.action(ctx, &self.chains)
    }

    fn address(a: Address) -> String {
        hex_address(a)
    }

    /// Preflight: the RPC serves the node's chain, then the call's own checks.
    async fn check(&self, ctx: &ExecutionContext, a: &Action) -> Result<Option<(String, String)>, RpcError> {
        let id = a.chain.rpc.quantity("eth_chainId", json!([])).await?;
        if id != u128::from(a.chain.spec.chain_id) {
            return Ok(Some((
                qtg_core::codes::EVM_CHAIN_MISMATCH.into(),
                format!("the RPC serves chain {id}, the plan names {}", a.chain.spec.chain_id),
            )));
        }
        self.call.check(ctx, self.from, a).await
    }

    async fn build(
        &self,
        ctx: &ExecutionContext,
        t: &Action,
    ) -> Result<Result<TxPayload, (String, String)>, ExecutorError> {
        let node: Uuid = ctx.request_node_id.parse().map_err(|_| ExecutorError::Protocol("request_node_id".into()))?;
        let rpc = &t.chain.rpc;
        let from = Self::address(self.from);
        let pending = rpc.quantity("eth_getTransactionCount", json!([from, "pending"])).await.map_err(rpc_down)?;
        let chain_id = t.chain.spec.chain_id as i64;
        let r = nonces::reserve(&self.pool, chain_id, &from, node, pending as i64)
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("nonce reservation: {e}")))?;
        if r.address != from {
            // An earlier attempt holds a nonce of another address: its transaction could still
            // be mined, so this one must not go out from a new address.
            return Ok(Err((
                qtg_core::codes::EVM_FROM_CHANGED.into(),
                format!("the node holds nonce {} of {}, not of {from}; a person decides", r.nonce, r.address),
            )));
        }
        let value = match self.call.value(ctx, t).await.map_err(rpc_down)? {
            Ok(v) => v,
            Err(refused) => return Ok(Err(refused)),
        };
        let (to, input) = (t.to, t.input.clone());
        let gas_limit = match t.gas {
            Some(gas) => gas,
            None => {
                let est = rpc
                    .quantity(
                        "eth_estimateGas",
                        json!([{"from": from, "to": Self::address(to), "data": input, "value": format!("{value:#x}")}]),
                    )
                    .await;
                match est {
                    Ok(g) => u64::try_from(g).unwrap_or(u64::MAX).saturating_mul(12) / 10,
                    Err(RpcError::Node { message, .. }) => {
                        return Ok(Err((
                            qtg_core::codes::EVM_ESTIMATE_FAILED.into(),
                            format!("the transaction would fail: {message}"),
                        )))
                    }
                    Err(e) => return Err(rpc_down(e)),
                }
            }
        };
        let block = rpc.call("eth_getBlockByNumber", json!(["latest", false])).await.map_err(rpc_down)?;
        let base = block.get("baseFeePerGas").and_then(parse_quantity).unwrap_or(0);
        let tip = rpc
            .quantity("eth_maxPriorityFeePerGas", json!([]))
            .await
            .unwrap_or(1_000_000_000)
            .min(t.chain.max_priority_fee);
        let max_fee = (base.saturating_mul(2).saturating_add(tip)).min(t.chain.max_fee);
        if max_fee < base {
            return Ok(Err((
                qtg_core::codes::EVM_FEE_CAP.into(),
                format!("the base fee {base} wei is above the chain's cap {} wei", t.chain.max_fee),
            )));
        }
        let cap = match fee_cap(&ctx.risk_controls) {
            Ok(c) => c,
            Err(why) => return Ok(Err((qtg_core::codes::EVM_CONFIG_INVALID.into(), format!("risk_controls.{why}")))),
        };
        if let Some(cap) = cap {
            let worst = u128::from(gas_limit).saturating_mul(max_fee);
            if worst > cap {
                return Ok(Err((
                    qtg_core::codes::EVM_FEE_CAP.into(),
                    format!("the fee could reach {worst} wei, above risk_controls.max_fee_wei {cap}"),
                )));
            }
        }
        let tx = TxEip1559 {
            chain_id: t.chain.spec.chain_id,
            nonce: r.nonce as u64,
            gas_limit,
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip.min(max_fee),
            to: TxKind::Call(to),
            value,
            access_list: Default::default(),
            input,
        };
        let payload = TxPayload::of(&tx, self.from, r.id, t.token, t.recipient, t.amount);
        self.call.stage(ctx, Stage::Built(&payload)).await.map_err(ExecutorError::Unavailable)?;
        Ok(Ok(payload))
    }

    /// Every hash the node broadcast on `chain`, newest reservation first.
    async fn hashes(&self, node: Uuid, chain: &Chain) -> Result<Vec<(i64, u64, Vec<String>)>, ExecutorError> {
        let rs = nonces::of_node(&self.pool, node, chain.spec.chain_id as i64)
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("nonce reservations: {e}")))?;
        Ok(rs.into_iter().filter(|r| r.status != "released").map(|r| (r.id, r.nonce as u64, r.tx_hashes)).collect())
    }

    async fn all_hashes(&self, node: Uuid, chain: &Chain) -> Result<Vec<String>, ExecutorError> {
        // Reservations newest first; hashes in broadcast order within each: oldest first overall.
        Ok(self.hashes(node, chain).await?.into_iter().rev().flat_map(|(_, _, h)| h).collect())
    }

    /// The node's live reservation on `chain`: `(id, nonce)`.
    async fn live_reservation(&self, node: Uuid, chain: &Chain) -> Result<Option<(i64, u64)>, ExecutorError> {
        let rs = nonces::of_node(&self.pool, node, chain.spec.chain_id as i64)
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("nonce reservations: {e}")))?;
        Ok(rs.into_iter().find(|r| r.status == "reserved" || r.status == "broadcast").map(|r| (r.id, r.nonce as u64)))
    }

    /// Fees for a replacement: at least 12.5 % over `(max_fee, tip)` (what the node last
    /// broadcast) and at least the market's, within the chain's caps. `None` when the caps
    /// leave no room for a 10 % raise.
    async fn bumped_fees(&self, chain: &Chain, last: (u128, u128)) -> Result<Option<(u128, u128)>, ExecutorError> {
        let block = chain.rpc.call("eth_getBlockByNumber", json!(["latest", false])).await.map_err(rpc_down)?;
        let base = block.get("baseFeePerGas").and_then(parse_quantity).unwrap_or(0);
        let market_tip = chain.rpc.quantity("eth_maxPriorityFeePerGas", json!([])).await.unwrap_or(1_000_000_000);
        let bump = |v: u128| v.saturating_mul(9).div_ceil(8);
        let tip = bump(last.1).max(market_tip).min(chain.max_priority_fee);
        let max_fee = bump(last.0).max(base.saturating_mul(2).saturating_add(tip)).min(chain.max_fee);
        let raised = |new: u128, old: u128| new.saturating_mul(10) >= old.saturating_mul(11);
        if !raised(max_fee, last.0) || !raised(tip, last.1) {
            return Ok(None);
        }
        Ok(Some((max_fee, tip.min(max_fee))))
    }

    /// Replaces the node's unmined transaction: the same nonce, recipient and amount, fees
    /// raised, signed by the node's own signer under the same policy (the approved intent),
    /// its hash recorded before the broadcast. `None` when it cannot (no local signer, caps).
    async fn replace(
        &self,
        ctx: &ExecutionContext,
        t: &Action,
        node: Uuid,
    ) -> Result<Option<ObserveOutcome>, ExecutorError> {
        let chain = &t.chain;
        let Some(signer) = self.local_signer(ctx).filter(|s| s.address() == self.from) else { return Ok(None) };
        let Some((reservation, nonce)) = self.live_reservation(node, chain).await? else { return Ok(None) };
        let num = |k: &str| ctx.provider_refs.get(k).and_then(Value::as_str).and_then(|v| v.parse::<u128>().ok());
        let (Some(last_fee), Some(last_tip)) = (num("max_fee_per_gas"), num("max_priority_fee_per_gas")) else {
            return Ok(None);
        };
        let Some((max_fee, tip)) = self.bumped_fees(chain, (last_fee, last_tip)).await? else {
            tracing::warn!(
                executor_key = %self.key, nonce,
                "the transaction is unmined and the fee caps leave no room to replace it"
            );
            return Ok(None);
        };
        let gas_limit = ctx.provider_refs.get("gas_limit").and_then(Value::as_u64).unwrap_or(NATIVE_GAS);
        // The value first broadcast (a CCIP send's native fee was quoted then).
        let value = ctx
            .provider_refs
            .get("value")
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<alloy::primitives::U256>().ok())
            .unwrap_or(t.value);
        if let Some(cap) = fee_cap(&ctx.risk_controls).ok().flatten() {
            if u128::from(gas_limit).saturating_mul(max_fee) > cap {
                return Ok(None);
            }
        }
        let tx = TxEip1559 {
            chain_id: chain.spec.chain_id,
            nonce,
            gas_limit,
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip,
            to: TxKind::Call(t.to),
            value,
            access_list: Default::default(),
            input: t.input.clone(),
        };
        let payload = TxPayload::of(&tx, self.from, reservation, t.token, t.recipient, t.amount);
        let text = canonical_json(&serde_json::to_value(&payload).unwrap_or(Value::Null));
        let prepared = PreparedAction::new(&ctx.action_type, PAYLOAD_FORMAT, text, true);
        let key = ctx.resolved_bindings.get("signer_key").and_then(Value::as_str).unwrap_or_default();
        let request = qtg_core::SignRequest::build(ctx, key, &prepared);
        let signed = match qtg_executor::Signer::sign(signer.as_ref(), &request).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(executor_key = %self.key, nonce, error = %e, "the signer refused the replacement");
                return Ok(None);
            }
        };
        let (Some(raw), Some(hash)) = (signed.signed_payload, signed.signed_tx_hash) else { return Ok(None) };
        self.call.stage(ctx, Stage::Broadcasting { nonce, hash: &hash }).await.map_err(ExecutorError::Unavailable)?;
        if !nonces::mark_broadcast(&self.pool, reservation, node, &hash)
            .await
            .map_err(|e| ExecutorError::Unavailable(e.to_string()))?
        {
            return Ok(None);
        }
        tracing::info!(
            executor_key = %self.key, nonce, tx_hash = %hash, max_fee_per_gas = max_fee,
            "replacing an unmined transaction with raised fees"
        );
        if let Err(e) = chain.rpc.call("eth_sendRawTransaction", json!([raw])).await {
            tracing::warn!(executor_key = %self.key, tx_hash = %hash, error = %e, "the replacement was not accepted");
        }
        let mut r = ObserveOutcome::new(AfterObserve::Observing);
        r.provider_ref_id = Some(hash.clone());
        r.provider_state = Some("replaced".into());
        r.provider_refs.insert("tx_hash".into(), json!(hash));
        r.provider_refs.insert("max_fee_per_gas".into(), json!(max_fee.to_string()));
        r.provider_refs.insert("max_priority_fee_per_gas".into(), json!(tip.to_string()));
        r.provider_refs.insert("broadcast_at".into(), json!(chrono::Utc::now().to_rfc3339()));
        r.provider_refs.insert("tx_hashes".into(), json!(self.all_hashes(node, chain).await?));
        r.retry_after_seconds = Some(POLL_SECONDS);
        Ok(Some(r))
    }

    /// Recovery's last resort for an attempt nothing of which is known to the chain: a
    /// zero-value send to the from-address with the node's nonce, by the node's own local
    /// signer, recorded before the broadcast. Once final, no transaction of the node can be
    /// mined and recovery answers FAILED; until then, UNKNOWN.
    async fn force_nonce(
        &self,
        ctx: &ExecutionContext,
        chain: &Chain,
        node: Uuid,
    ) -> Result<Option<ObserveOutcome>, ExecutorError> {
        let Some(signer) = self.local_signer(ctx).filter(|s| s.address() == self.from) else { return Ok(None) };
        let Some((reservation, nonce)) = self.live_reservation(node, chain).await? else { return Ok(None) };
        let num = |k: &str| ctx.provider_refs.get(k).and_then(Value::as_str).and_then(|v| v.parse::<u128>().ok());
        let last = (num("max_fee_per_gas").unwrap_or(0), num("max_priority_fee_per_gas").unwrap_or(0));
        let fees = match self.bumped_fees(chain, last).await? {
            Some(f) => f,
            None => (chain.max_fee, chain.max_priority_fee),
        };
        let (raw, hash) =
            signer.sign_cancel(chain.spec.chain_id, nonce, fees.0, fees.1).map_err(ExecutorError::Unavailable)?;
        if !nonces::mark_cancel(&self.pool, reservation, node, &hash)
            .await
            .map_err(|e| ExecutorError::Unavailable(e.to_string()))?
        {
            return Ok(None);
        }
        tracing::warn!(
            executor_key = %self.key, nonce, tx_hash = %hash,
            "forcing the nonce with a zero-value send: nothing of this attempt is known to the chain"
        );
        if let Err(e) = chain.rpc.call("eth_sendRawTransaction", json!([raw])).await {
            tracing::warn!(
                executor_key = %self.key, tx_hash = %hash, error = %e,
                "the nonce-forcing send was not accepted"
            );
        }
        let mut r = ObserveOutcome::new(AfterObserve::Unknown);
        r.provider_state = Some("forcing_nonce".into());
        r.provider_refs.insert("cancel_tx_hash".into(), json!(hash));
        r.error_code = Some(qtg_core::codes::EVM_FORCING_NONCE.into());
        r.error_detail = Some(format!(
            "nothing of this attempt is known to the chain: nonce {nonce} is being consumed by a zero-value \
             send ({hash}); once it is final the attempt is FAILED and a retry uses a new nonce"
        ));
        r.retry_after_seconds = Some(POLL_SECONDS);
        Ok(Some(r))
    }

    /// A local signer that holds the from-address' key (for a zero-value self-send, which
    /// needs no policy: it pays nobody).
    fn own_signer(&self) -> Option<Arc<crate::LocalSigner>> {
        self.signers.read().ok()?.values().find(|s| s.address() == self.from).cloned()
    }

    /// Marks consumed the fills of the from-address the chain has passed in a final block,
    /// each by the self-send of its that was mined ("other" when none of them was).
    async fn settle_fills(&self, chain: &Chain) -> Result<(), ExecutorError> {
        let rpc = &chain.rpc;
        let from = Self::address(self.from);
        let chain_id = chain.spec.chain_id as i64;
        let unavailable = |e: qtg_store::StoreError| ExecutorError::Unavailable(format!("nonce reservations: {e}"));
        // The database first: there is rarely a fill at all.
        if nonces::passed_fills(&self.pool, chain_id, &from, i64::MAX).await.map_err(unavailable)?.is_empty() {
            return Ok(());
        }
        let head = rpc.quantity("eth_blockNumber", json!([])).await.map_err(rpc_down)?;
        let final_block = head.saturating_sub(u128::from(chain.spec.confirmations.saturating_sub(1)));
        let count =
            rpc.quantity("eth_getTransactionCount", json!([from, quantity(final_block)])).await.map_err(rpc_down)?;
        let passed = nonces::passed_fills(&self.pool, chain_id, &from, count as i64).await.map_err(unavailable)?;
        for fill in passed {
            let mut by = "other".to_string();
            for h in &fill.cancel_hashes {
                if matches!(self.receipt(chain, h).await?, Some(Onchain::Mined { .. })) {
                    by.clone_from(h);
                    break;
                }
            }
            if by == "other" {
                // A nonce qtg gave back (no signature of it should exist) was used by another
                // transaction than the fill: a person looks at what it was.
                tracing::error!(
                    executor_key = %self.key, nonce = fill.nonce,
                    "a filled nonce was consumed by a transaction that is not the fill: check the address's \
                     transaction with this nonce"
                );
            }
            nonces::mark_consumed(&self.pool, fill.id, &by).await.map_err(unavailable)?;
        }
        Ok(())
    }

    /// Fills the gaps below the node's nonce `nonce`: nonces of the from-address qtg gave back
    /// (no signature of them can exist) that no new reservation took, which the chain must
    /// pass before the node's transaction can be mined. Each gets a zero-value self-send,
    /// recorded (and audited) before it is sent; one already sent and still known to the
    /// chain's node is left to be mined. Answers the gaps it could not fill (no local signer
    /// of the address, or the fee caps): the node's transaction waits on them.
    async fn fill_gaps(&self, chain: &Chain, node: Uuid, nonce: u64) -> Result<Vec<i64>, ExecutorError> {
        let rpc = &chain.rpc;
        let from = Self::address(self.from);
        let chain_id = chain.spec.chain_id as i64;
        let store = |e: qtg_store::StoreError| ExecutorError::Unavailable(format!("nonce reservations: {e}"));
        // The database first: on the usual poll there is no gap and nothing more is asked.
        if nonces::gaps(&self.pool, chain_id, &from, 0, nonce as i64).await.map_err(store)?.is_empty() {
            return Ok(Vec::new());
        }
        self.settle_fills(chain).await?;
        let count = rpc.quantity("eth_getTransactionCount", json!([from, "latest"])).await.map_err(rpc_down)?;
        let gaps = nonces::gaps(&self.pool, chain_id, &from, count as i64, nonce as i64).await.map_err(store)?;
        let Some(signer) = self.own_signer() else {
            if !gaps.is_empty() {
                tracing::warn!(
                    executor_key = %self.key, nonce, gaps = ?gaps.iter().map(|g| g.nonce).collect::<Vec<_>>(),
                    "the transaction waits on nonces given back below it, and no local signer of the address can \
                     fill them: a person must consume them"
                );
            }
            return Ok(gaps.iter().map(|g| g.nonce).collect());
        };
        let actor = format!("executor:{}", self.key);
        let mut open = Vec::new();
        let resend_after = chain.spec.replace_after_seconds.unwrap_or(120.0);
        for gap in gaps {
            if gap.filling {
                // One fill at a time: another only when the chain's node knows none of them and
                // the last is older than the chain's replace_after_seconds.
                if gap.age_seconds < resend_after {
                    continue;
                }
                let mut known = false;
                for h in &gap.cancel_hashes {
                    if !rpc.call("eth_getTransactionByHash", json!([h])).await.map_err(rpc_down)?.is_null() {
                        known = true;
                        break;
                    }
                }
                if known {
                    continue;
                }
            }
            let Some((max_fee, tip)) = self.bumped_fees(chain, (0, 0)).await? else {
                open.push(gap.nonce);
                continue;
            };
            let (raw, hash) = signer
                .sign_cancel(chain.spec.chain_id, gap.nonce as u64, max_fee, tip)
                .map_err(ExecutorError::Unavailable)?;
            if !nonces::record_fill(&self.pool, gap.id, &hash, node, &actor).await.map_err(store)? {
                // A new reservation took the nonce meanwhile: its transaction fills the gap.
                continue;
            }
            tracing::warn!(
                executor_key = %self.key, waiting_nonce = nonce, nonce = gap.nonce, tx_hash = %hash,
                "filling a nonce given back below a pending transaction with a zero-value self-send"
            );
            if let Err(e) = rpc.call("eth_sendRawTransaction", json!([raw])).await {
                tracing::warn!(executor_key = %self.key, tx_hash = %hash, error = %e, "the fill was not accepted");
            }
        }
        Ok(open)
    }

    /// Where the node's transactions are: any of its hashes mined or pending, else whether a
    /// final transaction that is not the node's consumed its nonce.
    async fn locate(&self, node: Uuid, chain: &Chain) -> Result<(Onchain, Option<i64>), ExecutorError> {
        let rpc = &chain.rpc;
        let reservations = self.hashes(node, chain).await?;
        let Some((live_id, nonce, live_hashes)) = reservations.first().cloned() else {
            return Ok((Onchain::Absent, None));
        };
        // The count first: whatever is mined by then shows in the receipts read after it.
        let head = rpc.quantity("eth_blockNumber", json!([])).await.map_err(rpc_down)?;
        let final_block = head.saturating_sub(u128::from(chain.spec.confirmations.saturating_sub(1)));
        let count = rpc
            .quantity("eth_getTransactionCount", json!([Self::address(self.from), quantity(final_block)]))
            .await
            .map_err(rpc_down)?;
        // The newest reservation decides; an older one counts only if a transfer of it
        // succeeded (money moved; a reverted one is history).
        let mut pending = None;
        for (i, (id, _, hashes)) in reservations.iter().enumerate() {
            for h in hashes {
                if let Some(mined) = self.receipt(chain, h).await? {
                    if i == 0 || matches!(mined, Onchain::Mined { ok: true, .. }) {
                        return Ok((mined, Some(*id)));
                    }
                    continue;
                }
                if i == 0 && pending.is_none() {
                    let tx = rpc.call("eth_getTransactionByHash", json!([h])).await.map_err(rpc_down)?;
                    if !tx.is_null() {
                        pending = Some(h.clone());
                    }
                }
            }
        }
        if let Some(hash) = pending {
            return Ok((Onchain::Pending { hash }, Some(live_id)));
        }
        if count <= u128::from(nonce) {
            return Ok((Onchain::Absent, Some(live_id)));
        }
        // The nonce is consumed in a final block: by which transaction? Find it on chain
        // rather than conclude from not finding the node's own.
        match self.consumer(chain, nonce, final_block).await? {
            Some(hash) if live_hashes.iter().any(|h| h.eq_ignore_ascii_case(&hash)) => {
                match self.receipt(chain, &hash).await? {
                    Some(mined) => Ok((mined, Some(live_id))),
                    // Its own transaction, but the receipt is not served (yet): decide later.
                    None => Ok((Onchain::Pending { hash }, Some(live_id))),
                }
            }
            Some(_) => Ok((Onchain::ConsumedByOther, Some(live_id))),
            // The block with it does not show it: no conclusion now.
            None => Err(ExecutorError::Unavailable(format!(
                "nonce {nonce} is consumed, but the transaction that consumed it could not be found; asking again later"
            ))),
        }
    }

    /// The node's transaction `hash` as mined, if it is.
    async fn receipt(&self, chain: &Chain, hash: &str) -> Result<Option<Onchain>, ExecutorError> {
        let rpc = &chain.rpc;
        let receipt = rpc.call("eth_getTransactionReceipt", json!([hash])).await.map_err(rpc_down)?;
        let Some(block) = receipt.get("blockNumber").and_then(parse_quantity) else { return Ok(None) };
        let head = rpc.quantity("eth_blockNumber", json!([])).await.map_err(rpc_down)?;
        let ok = receipt.get("status").and_then(parse_quantity) == Some(1);
        let confirmations = head.saturating_sub(block).saturating_add(1) as u64;
        Ok(Some(Onchain::Mined { hash: hash.to_string(), block, confirmations, ok, receipt }))
    }

    /// The hash of the transaction from the from-address with `nonce`, mined at or before
    /// `upto`: the first block where the address' count passes `nonce`, then its transactions.
    async fn consumer(&self, chain: &Chain, nonce: u64, upto: u128) -> Result<Option<String>, ExecutorError> {
        let rpc = &chain.rpc;
        let from = Self::address(self.from);
        let (mut lo, mut hi) = (0u128, upto);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let count =
                rpc.quantity("eth_getTransactionCount", json!([from, quantity(mid)])).await.map_err(rpc_down)?;
            if count > u128::from(nonce) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let block = rpc.call("eth_getBlockByNumber", json!([quantity(lo), true])).await.map_err(rpc_down)?;
        let found = block.get("transactions").and_then(Value::as_array).and_then(|txs| {
            txs.iter().find(|t| {
                t.get("from").and_then(Value::as_str).is_some_and(|f| f.eq_ignore_ascii_case(&from))
                    && t.get("nonce").and_then(parse_quantity) == Some(u128::from(nonce))
            })
        });
        Ok(found.and_then(|t| t.get("hash").and_then(Value::as_str)).map(|h| h.to_ascii_lowercase()))
    }

    /// Whether the node's last broadcast is older than the chain's `replace_after_seconds`.
    fn stale(&self, ctx: &ExecutionContext, chain: &Chain) -> bool {
        let after = chain.spec.replace_after_seconds.unwrap_or(120.0);
        ctx.provider_refs
            .get("broadcast_at")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1000.0 >= after
            })
    }

    /// What observe and recover answer for the node's transactions ([`Follower`]).
    async fn follow<S: Follower>(
        &self,
        ctx: &ExecutionContext,
        t: &Action,
    ) -> Result<ExecutionResult<S>, ExecutorError> {
        let recovering = S::RECOVERING;
        let node: Uuid = ctx.request_node_id.parse().map_err(|_| ExecutorError::Protocol("request_node_id".into()))?;
        let chain = &t.chain;
        let (where_, reservation) = self.locate(node, chain).await?;
        let consumed = |by: &str| {
            let (pool, by) = (self.pool.clone(), by.to_string());
            async move {
                if let Some(id) = reservation {
                    nonces::mark_consumed(&pool, id, &by)
                        .await
                        .map_err(|e| ExecutorError::Unavailable(e.to_string()))?;
                }
                Ok::<_, ExecutorError>(())
            }
        };
        // Nothing of the node's was ever broadcast (or its nonce was given back when the effect
        // was found done): the chain's evidence of the effect decides, and a nonce nothing was
        // sent with goes back. (A dispatcher still holding a signature cannot send it then:
        // recording its hash needs the reservation live.)
        if matches!(where_, Onchain::Absent) && self.all_hashes(node, chain).await?.is_empty() {
            if let Some(mut done) = self.call.settled(ctx, t).await.map_err(rpc_down)? {
                if let Some((id, _)) = self.live_reservation(node, chain).await? {
                    nonces::release_unsent(&self.pool, id, node)
                        .await
                        .map_err(|e| ExecutorError::Unavailable(format!("nonce reservation: {e}")))?;
                }
                done.provider_refs.insert("sent".into(), json!(false));
                done.provider_refs.insert("chain_id".into(), json!(chain.spec.chain_id));
                return Ok(done.widen());
            }
        }
        // A transaction of the node's that is out but unmined may wait on a lower nonce qtg
        // gave back (a refused signature's) that nothing else will take: fill it.
        let mut gaps = None;
        if !recovering && matches!(where_, Onchain::Pending { .. } | Onchain::Absent) {
            if let Some((_, nonce)) = self.live_reservation(node, chain).await? {
                if !self.all_hashes(node, chain).await?.is_empty() {
                    gaps = Some(self.fill_gaps(chain, node, nonce).await?);
                }
            }
        }
        // Dropped (or gone with a reorg) for a while: the same transfer again, fees raised.
        if matches!(where_, Onchain::Absent) && !recovering && self.stale(ctx, chain) {
            if let Some(mut r) = self.replace(ctx, t, node).await? {
                r.provider_refs.insert("block_number".into(), Value::Null);
                r.provider_refs.insert("confirmations".into(), Value::Null);
                r.provider_refs.insert("chain_id".into(), json!(chain.spec.chain_id));
                return Ok(r.widen());
            }
        }
        let mut r: ExecutionResult<S> = match where_ {
            Onchain::Mined { hash, block, confirmations, ok, receipt } => {
                let final_ = confirmations >= chain.spec.confirmations;
                let mut r = if !final_ {
                    let mut r = ExecutionResult::new(S::PENDING);
                    r.retry_after_seconds = Some(POLL_SECONDS);
                    r
                } else if ok {
                    let mut r = ObserveOutcome::new(AfterObserve::Completed);
                    // What the call yields first: a receipt it cannot read leaves the nonce live.
                    self.call.completed(ctx, t, &receipt, &mut r).map_err(ExecutorError::Unavailable)?;
                    self.call
                        .stage(ctx, Stage::Completed { hash: &hash, result: &r })
                        .await
                        .map_err(ExecutorError::Unavailable)?;
                    consumed(&hash).await?;
                    // Fills below the nonce are passed now too.
                    self.settle_fills(chain).await?;
                    r.generated_artifacts
                        .push(json!({"kind": "evm_receipt", "tx_hash": hash, "block_number": block.to_string()}));
                    r.widen()
                } else {
                    consumed(&hash).await?;
                    failed(qtg_core::codes::EVM_REVERTED, format!("transaction {hash} reverted in block {block}"))
                };
                r.provider_ref_id = Some(hash.clone());
                // The call's own word (a burn's `burned`) wins over the generic one.
                r.provider_state.get_or_insert_with(|| if ok { "mined".into() } else { "reverted".into() });
                r.provider_refs.insert("tx_hash".into(), json!(hash));
                r.provider_refs.insert("block_number".into(), json!(block.to_string()));
                r.provider_refs.insert("confirmations".into(), json!(confirmations));
                r
            }
            Onchain::Pending { hash } if !recovering && self.stale(ctx, chain) => {
                match self.replace(ctx, t, node).await? {
                    Some(r) => r.widen(),
                    None => {
                        let mut r = ExecutionResult::new(S::from(AfterObserve::Observing));
                        r.provider_ref_id = Some(hash.clone());
                        r.provider_state = Some("pending_unreplaceable".into());
                        r.retry_after_seconds = Some(POLL_SECONDS * 5.0);
                        r
                    }
                }
            }
            Onchain::Pending { hash } => {
                let mut r = ExecutionResult::new(S::PENDING);
                r.provider_ref_id = Some(hash.clone());
                r.provider_state = Some("pending".into());
                if let Some(open) = gaps.filter(|g| !g.is_empty()) {
                    // What a person must consume before the transaction can be mined.
                    r.provider_state = Some("waiting_on_lower_nonce".into());
                    r.provider_refs.insert("nonce_gaps".into(), json!(open));
                }
                r.provider_refs.insert("tx_hash".into(), json!(hash));
                r.retry_after_seconds = Some(POLL_SECONDS);
                r
            }
            Onchain::ConsumedByOther => {
                consumed("other").await?;
                failed(
                    qtg_core::codes::EVM_NONCE_CONSUMED,
                    "a final transaction that is not this node's consumed its nonce; none of its \
                     transactions can be mined",
                )
            }
            Onchain::Absent if recovering => match self.force_nonce(ctx, chain, node).await? {
                Some(r) => r.widen(),
                None => {
                    // Nothing of the attempt is known, its nonce is free, and no local signer can
                    // force it: a signed transaction may still be held somewhere. A person decides.
                    let mut r = ExecutionResult::new(S::from(AfterObserve::Unknown));
                    r.error_code = Some(qtg_core::codes::EVM_NOT_FOUND.into());
                    r.error_detail = Some(
                        "no transaction of this node is known to the chain and its nonce is not consumed, and no local \
                         signer of this lane can force the nonce: a person decides (consume the nonce, then retry)"
                            .into(),
                    );
                    r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("evm_nonce_not_forceable"));
                    r
                }
            },
            Onchain::Absent => {
                let had_block = ctx.provider_refs.get("block_number").is_some_and(|b| !b.is_null());
                let mut r = ExecutionResult::new(S::from(AfterObserve::Observing));
                r.provider_state = Some(if had_block { "reorged".into() } else { "not_found".into() });
                if had_block {
                    // Its block is gone (a reorg): observing again until it is mined anew.
                    tracing::warn!(
                        executor_key = %self.key,
                        "the transaction's block is gone (reorg); observing again"
                    );
                    r.provider_refs.insert("block_number".into(), Value::Null);
                    r.provider_refs.insert("confirmations".into(), Value::Null);
                }
                r.retry_after_seconds = Some(POLL_SECONDS);
                r
            }
        };
        // The node's own transaction failed or lost its nonce: the effect may still have
        // happened by another hand (a message received by another caller), proven on chain.
        if r.next_state == S::FAILED
            && matches!(
                r.error_code.as_deref(),
                Some(qtg_core::codes::EVM_REVERTED | qtg_core::codes::EVM_NONCE_CONSUMED)
            )
        {
            if let Some(mut done) = self.call.settled(ctx, t).await.map_err(rpc_down)? {
                tracing::info!(
                    executor_key = %self.key, code = ?r.error_code,
                    "the node's transaction did not do it, but the chain shows the effect: completed by evidence"
                );
                done.provider_refs.insert("own_transaction".into(), json!(r.error_code));
                r = done.widen();
            }
        }
        r.provider_refs.insert("chain_id".into(), json!(chain.spec.chain_id));
        Ok(r)
    }
}

/// The facts of the lane's contracts on every configured chain (verify_drift).
#[async_trait]
impl<C: EvmCall> qtg_executor::DriftSource for EvmExecutor<C> {
    async fn facts(&self) -> Result<Vec<qtg_executor::DriftFact>, ExecutorError> {
        self.call.facts(&self.chains).await.map_err(rpc_down)
    }
}

#[async_trait]
impl<C: EvmCall> Executor for EvmExecutor<C> {
    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError> {
        let t = match self.action(ctx) {
            Ok(t) => t,
            Err((code, why)) => return Ok(Some(failed(&code, why))),
        };
        Ok(self.check(ctx, &t).await.map_err(rpc_down)?.map(|(code, why)| failed(&code, why)))
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        let t = match self.action(ctx) {
            Ok(t) => t,
            Err((code, why)) => return Ok(Prepared::Refused(failed(&code, why))),
        };
        match self.build(ctx, &t).await? {
            Ok(payload) => {
                let text = canonical_json(&serde_json::to_value(&payload).unwrap_or(Value::Null));
                Ok(Prepared::Action(PreparedAction::new(&ctx.action_type, PAYLOAD_FORMAT, text, true)))
            }
            Err((code, why)) => Ok(Prepared::Refused(failed(&code, why))),
        }
    }

    async fn submit(&self, ctx: &ExecutionContext, s: &Submission<'_>) -> Result<SubmitOutcome, ExecutorError> {
        let node: Uuid = ctx.request_node_id.parse().map_err(|_| ExecutorError::Protocol("request_node_id".into()))?;
        let payload: TxPayload = serde_json::from_str(&s.prepared.payload)
            .map_err(|e| ExecutorError::Protocol(format!("the prepared transaction does not parse: {e}")))?;
        let chain = self
            .chains
            .get(&payload.chain_id)
            .cloned()
            .ok_or_else(|| ExecutorError::Protocol(format!("chain {} is not configured", payload.chain_id)))?;
        let Some(raw) = s.signed.and_then(|r| r.signed_payload.clone()) else {
            return Ok(failed(
                qtg_core::codes::EVM_NOT_SIGNED,
                "the signer returned no signed transaction; nothing was sent",
            ));
        };
        // What is broadcast is what was prepared, signed by the from-address.
        let bytes = alloy::primitives::hex::decode(raw.trim_start_matches("0x"))
            .map_err(|_| ExecutorError::Protocol("the signed transaction is not hex".into()))?;
        let envelope = TxEnvelope::decode_2718(&mut bytes.as_slice())
            .map_err(|e| ExecutorError::Protocol(format!("the signed transaction does not decode: {e}")))?;
        let Some(signed) = envelope.as_eip1559() else {
            return Ok(failed(
                qtg_core::codes::EVM_SIGNED_MISMATCH,
                "the signed transaction is not EIP-1559; nothing was sent",
            ));
        };
        if signed.tx().encoded_for_signing() != payload.unsigned_tx.as_ref() {
            return Ok(failed(
                qtg_core::codes::EVM_SIGNED_MISMATCH,
                "the signed transaction is not the prepared one; nothing was sent",
            ));
        }
        match envelope.recover_signer() {
            Ok(a) if a == payload.from => {}
            Ok(a) => {
                // A signature by another address cannot spend this one's nonce: it goes back
                // now (unless an earlier attempt may hold a signature for it).
                // The release and its audit rows in one transaction: never one without the other.
                let unavailable = |e: String| ExecutorError::Unavailable(format!("nonce reservation: {e}"));
                let mut tx = self.pool.begin().await.map_err(|e| unavailable(e.to_string()))?;
                let why = format!("EVM_SIGNED_MISMATCH: signed by {a}, not {}", payload.from);
                let actor = format!("executor:{}", self.key);
                nonces::release_before_broadcast(&mut tx, node, Some(ctx.attempt_no), &why, &actor)
                    .await
                    .map_err(|e| unavailable(e.to_string()))?;
                tx.commit().await.map_err(|e| unavailable(e.to_string()))?;
                return Ok(failed(
                    qtg_core::codes::EVM_SIGNED_MISMATCH,
                    format!("signed by {a}, not {}; nothing was sent", payload.from),
                ));
            }
            Err(e) => return Err(ExecutorError::Protocol(format!("the signature does not recover: {e}"))),
        }
        let hash = envelope.tx_hash().to_string();
        // Done already by another hand (a CCTP message received): nothing is sent, and a nonce
        // nothing was ever broadcast with goes back.
        // Unreadable now: sent anyway — a transaction whose effect already happened fails on
        // chain (a used CCTP nonce reverts) and the evidence is read after it.
        if let Ok(action) = self.action(ctx) {
            match self.call.settled(ctx, &action).await {
                Ok(Some(mut done)) => {
                    let released = nonces::release_unsent(&self.pool, payload.reservation_id, node)
                        .await
                        .map_err(|e| ExecutorError::Unavailable(format!("nonce reservation: {e}")))?;
                    let live =
                        self.live_reservation(node, &chain).await?.is_some_and(|(id, _)| id == payload.reservation_id);
                    if released || !live {
                        // Given back now, or no longer the node's to send with at all.
                        tracing::info!(
                            executor_key = %self.key, nonce = payload.nonce,
                            "the chain already shows the effect; nothing was sent"
                        );
                        done.provider_refs.insert("sent".into(), json!(false));
                        return Ok(done.widen());
                    }
                    // An earlier attempt broadcast with this nonce: it is sent so the nonce is
                    // consumed (no gap for the address); the call reverts, the evidence decides.
                    tracing::info!(
                        executor_key = %self.key, nonce = payload.nonce,
                        "the effect is done; sending anyway to consume a nonce an earlier attempt used"
                    );
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(
                        executor_key = %self.key, error = %e,
                        "could not read whether the effect already happened; sending"
                    )
                }
            }
        }
        // Intent before effect: the call's record of the hash (a CCIP send's intent; an intent no
        // longer open stops here), then the reservation's — the node's before it can reach the chain.
        self.call
            .stage(ctx, Stage::Broadcasting { nonce: payload.nonce, hash: &hash })
            .await
            .map_err(ExecutorError::Unavailable)?;
        let owned = nonces::mark_broadcast(&self.pool, payload.reservation_id, node, &hash)
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("nonce reservation: {e}")))?;
        if !owned {
            return Ok(failed(
                qtg_core::codes::EVM_NONCE_NOT_OWNED,
                format!("nonce {} is no longer this node's reservation; nothing was sent", payload.nonce),
            ));
        }
        let all = self.all_hashes(node, &chain).await?;
        let earlier = all.iter().filter(|h| **h != hash).count();
        let mut r = SubmitOutcome::new(AfterSubmit::Submitted);
        r.provider_refs.insert("tx_hash".into(), json!(hash));
        r.provider_refs.insert("nonce".into(), json!(payload.nonce));
        r.provider_refs.insert("from".into(), json!(Self::address(payload.from)));
        r.provider_refs.insert("chain_id".into(), json!(payload.chain_id));
        r.provider_refs.insert("gas_limit".into(), json!(payload.gas_limit));
        r.provider_refs.insert("value".into(), json!(payload.value));
        r.provider_refs.insert("max_fee_per_gas".into(), json!(payload.max_fee_per_gas));
        r.provider_refs.insert("max_priority_fee_per_gas".into(), json!(payload.max_priority_fee_per_gas));
        r.provider_refs.insert("broadcast_at".into(), json!(chrono::Utc::now().to_rfc3339()));
        r.provider_refs.insert("tx_hashes".into(), json!(all));
        r.provider_ref_id = Some(hash.clone());
        r.retry_after_seconds = Some(1.0);
        tracing::info!(
            executor_key = %self.key, chain_id = payload.chain_id, nonce = payload.nonce, tx_hash = %hash,
            "broadcasting"
        );
        match chain.rpc.call("eth_sendRawTransaction", json!([raw])).await {
            Ok(_) => Ok(r),
            Err(RpcError::Node { message, .. }) if already_known(&message) => Ok(r),
            Err(RpcError::Node { message, .. }) if message.to_ascii_lowercase().contains("nonce too low") => {
                // Its nonce is used: by one of this node's transactions, or by another one.
                r.next_state = AfterSubmit::Unknown;
                r.error_code = Some(qtg_core::codes::EVM_NONCE_TOO_LOW.into());
                r.error_detail = Some(format!(
                    "the chain says nonce {} is used; recovery looks up the node's transactions",
                    payload.nonce
                ));
                Ok(r)
            }
            Err(RpcError::Node { message, code, .. }) if earlier == 0 && certainly_refused(&message) => Ok(failed(
                qtg_core::codes::EVM_BROADCAST_REJECTED,
                format!("the node refused the transaction: {message} (code {code})"),
            )),
            Err(RpcError::Node { message, .. }) => {
                // Not a refusal that proves the transaction is out (or an earlier one of this
                // node with the same nonce may still be mined): recovery decides.
                r.next_state = AfterSubmit::Unknown;
                r.error_code = Some(qtg_core::codes::EVM_BROADCAST_REJECTED.into());
                r.error_detail =
                    Some(format!("the node answered {message:?}; whether the transaction is out is not certain"));
                Ok(r)
            }
            Err(e) => {
                r.next_state = AfterSubmit::Unknown;
                r.error_code = Some(qtg_core::codes::EVM_BROADCAST_NO_ANSWER.into());
                r.error_detail = Some(e.to_string());
                Ok(r)
            }
        }
    }

    fn needs_signer(&self) -> bool {
        true
    }

    fn required_signer(&self, ctx: &ExecutionContext) -> Option<qtg_executor::SignerRequirement> {
        self.call.required_signer(ctx)
    }

    /// Every EVM call (a transfer, a CCTP burn or mint) pays `intent.destination`: a strict
    /// address (EIP-55 when mixed-case, not zero or a precompile unless allow-listed).
    fn check_intent(
        &self,
        _node_config: &Value,
        risk_controls: &Value,
        intent: &Value,
    ) -> Result<(), qtg_executor::IntentRefusal> {
        crate::call::check_destination(intent, risk_controls).map_err(qtg_executor::IntentRefusal::Intent)
    }

    /// The address every transaction of this entry is sent from.
    fn paying_account(&self, _node_config: &Value) -> Option<String> {
        Some(crate::call::hex_address(self.from))
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        let t = self.action(ctx).map_err(|(_, why)| ExecutorError::Protocol(why))?;
        self.follow(ctx, &t).await
    }

    async fn recover(&self, ctx: &ExecutionContext, _idempotency_key: &str) -> Result<SubmitOutcome, ExecutorError> {
        let t = self.action(ctx).map_err(|(_, why)| ExecutorError::Protocol(why))?;
        self.follow(ctx, &t).await
    }

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        let mut chains = serde_json::Map::new();
        for (id, c) in self.chains.iter() {
            let head = c.rpc.quantity("eth_blockNumber", json!([])).await.map_err(rpc_down)?;
            chains.insert(id.to_string(), json!({"head": head.to_string()}));
        }
        Ok(Some(json!({"status": "ok", "from": Self::address(self.from), "chains": chains})))
    }
}
