//! `exec.ccip.send[.<suffix>]` (action `ccip_send`): one token transfer (and optionally data)
//! through the source chain's CCIP Router, `ccipSend(destChainSelector, EVM2AnyMessage)`, sent
//! by the EVM lane's executor (its nonces, fees, signer, replacement, recovery). The plan pins
//! the router (`config.contract`), the destination chain selector, the token and its decimals,
//! the fee token (`native` or the chain's LINK) and the fee cap, the receiver's gas limit and
//! ordering, and the data; the signer checks the call against them. Preflight reads the Router:
//! an OnRamp for the destination, a pool for the token, its outbound rate limit, the fee
//! (`getFee`) within the cap, and the sender's balances and allowances (qtg never sends
//! `approve`). Once final, the OnRamp's `CCIPMessageSent` in the receipt gives the message id.

use std::sync::Arc;

use alloy::primitives::{Address, Bytes, U256};
use alloy::sol_types::{SolEvent, SolValue};
use async_trait::async_trait;
use qtg_core::codes;
use qtg_core::{ExecutionContext, ObserveOutcome};
use qtg_evm::call::{
    call_word, chain_of, config_address, destination_allowed, hex_address, intent_of, refusal, token_balance_covers,
    token_decimals_match, Action, EvmCall, Refusal, Stage,
};
use qtg_evm::calls::allowance_calldata;
use qtg_evm::ccip_calls::{ccip_send_calldata, extra_args, get_fee_calldata, message, EVM2AnyMessage};
use qtg_evm::{Chains, RpcError};
use serde_json::{json, Value};

use crate::abi::{self, CCIPMessageSent, EVM2AnyRampMessage};
use crate::chains::{uint64, CcipChains};

pub struct Send {
    pub chains: Arc<CcipChains>,
    /// Every chain of `MG_EVM_CHAINS`: the destination token's decimals are read there.
    pub evm: Arc<Chains>,
    /// Where the send's intent is kept (`ccip_send_intent`).
    pub pool: sqlx::PgPool,
}

/// A CCIP send's terms, from the approved plan (the signer reads the same keys).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Terms {
    pub router: Address,
    pub source_selector: u64,
    pub destination_selector: u64,
    pub token: Address,
    pub decimals: u32,
    /// Zero: the native coin (paid as the transaction's value).
    pub fee_token: Address,
    /// In the fee token's base units (18 decimals).
    pub max_fee: U256,
    pub gas_limit: u64,
    pub allow_out_of_order: bool,
    pub data: Bytes,
}

fn invalid(why: impl Into<String>) -> Refusal {
    refusal(codes::CCIP_CONFIG_INVALID, why)
}

/// A decimal fee amount (18 decimals) from the node's config or risk controls.
fn fee_amount(v: Option<&Value>, what: &str) -> Result<Option<U256>, Refusal> {
    let text = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => return Err(invalid(format!("{what} {other} is not a decimal amount"))),
    };
    qtg_evm::tx::base_units(&text, 18)
        .map(Some)
        .ok_or_else(|| invalid(format!("{what} {text:?} is not an amount with 18 decimals")))
}

impl Terms {
    pub(crate) fn of(ctx: &ExecutionContext, chains: &CcipChains, chain_id: u64) -> Result<Terms, Refusal> {
        let c = &ctx.node_config;
        let here = chains.of_chain(chain_id).ok_or_else(|| {
            refusal(codes::CCIP_CHAIN_NOT_CONFIGURED, format!("chain {chain_id} is not in MG_CCIP_CHAINS"))
        })?;
        let router = config_address(ctx, "contract")
            .map_err(|(_, why)| invalid(why))?
            .ok_or_else(|| invalid("the node's config names no contract (the CCIP router)"))?;
        if router != here.router {
            return Err(refusal(
                codes::CCIP_ROUTER_MISMATCH,
                format!("the plan's contract {router} is not chain {chain_id}'s router {}", here.router),
            ));
        }
        let destination_selector = c
            .get("destination_chain_selector")
            .and_then(uint64)
            .ok_or_else(|| invalid("the node's config names no destination_chain_selector (a uint64)"))?;
        if destination_selector == here.selector {
            return Err(refusal(
                codes::CCIP_DESTINATION_NOT_SUPPORTED,
                format!("the destination chain selector {destination_selector} is the source chain's own"),
            ));
        }
        let token = config_address(ctx, "token_contract")
            .map_err(|(_, why)| invalid(why))?
            .ok_or_else(|| invalid("the node's config names no token_contract (the token sent)"))?;
        if c.get("decimals").is_none() {
            return Err(invalid("the node's config names no decimals (the token's)"));
        }
        let decimals = qtg_evm::call::decimals_of(ctx)?;
        let fee_token = match c.get("fee_token").and_then(Value::as_str).map(str::trim) {
            Some(t) if t.eq_ignore_ascii_case("native") => Address::ZERO,
            Some(t) => {
                let a: Address =
                    t.parse().map_err(|_| invalid(format!("fee_token {t:?} is neither native nor an address")))?;
                if here.link != Some(a) || a == Address::ZERO {
                    return Err(refusal(
                        codes::CCIP_FEE_TOKEN_NOT_ALLOWED,
                        format!("fee_token {a} is not chain {chain_id}'s LINK in MG_CCIP_CHAINS (or use native)"),
                    ));
                }
                a
            }
            None => return Err(invalid("the node's config names no fee_token (native, or the chain's LINK)")),
        };
        let cap = fee_amount(c.get("max_fee"), "config.max_fee")?.ok_or_else(|| {
            invalid("the node's config names no max_fee: the most the send may pay, in the fee token")
        })?;
        let risk = fee_amount(ctx.risk_controls.get("ccip_max_fee"), "risk_controls.ccip_max_fee")?;
        let gas_limit = match c.get("gas_limit") {
            None | Some(Value::Null) => 0,
            Some(g) => g.as_u64().ok_or_else(|| invalid(format!("gas_limit {g} is not a non-negative integer")))?,
        };
        let allow_out_of_order = match c.get("allow_out_of_order_execution") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(invalid(format!("allow_out_of_order_execution {other} is not a boolean"))),
        };
        let data: Bytes = match c.get("data") {
            None | Some(Value::Null) => Bytes::new(),
            Some(Value::String(h)) => h.trim().parse().map_err(|_| invalid(format!("data {h:?} is not hex bytes")))?,
            Some(other) => return Err(invalid(format!("data {other} is not hex bytes"))),
        };
        if !data.is_empty() && gas_limit == 0 {
            // The receiver would be called with no gas: the message would fail on the destination.
            return Err(invalid("data for the receiver needs a gas_limit above 0"));
        }
        Ok(Terms {
            router,
            source_selector: here.selector,
            destination_selector,
            token,
            decimals,
            fee_token,
            max_fee: risk.map_or(cap, |r| r.min(cap)),
            gas_limit,
            allow_out_of_order,
            data,
        })
    }

    fn message(&self, receiver: Address, amount: U256) -> EVM2AnyMessage {
        message(
            receiver,
            self.token,
            amount,
            self.data.clone(),
            self.fee_token,
            extra_args(self.gas_limit, self.allow_out_of_order),
        )
    }
}

impl Send {
    /// The pool releases the amount on the destination rescaled to the destination token's
    /// decimals, rounding down: an amount finer than those decimals would arrive short (dust as
    /// 0). Refused unless it arrives whole; the destination's token and decimals are read from
    /// the pool (`getRemoteToken`) and the destination chain.
    async fn rescaled(&self, pool: Address, t: &Terms, a: &Action) -> Result<Option<Refusal>, RpcError> {
        let remote =
            abi::view(&a.chain.rpc, pool, abi::getRemoteTokenCall { remoteChainSelector: t.destination_selector })
                .await?;
        let Ok(remote) = Address::abi_decode(&remote) else {
            return Ok(Some(refusal(
                codes::CCIP_TOKEN_NOT_SUPPORTED,
                format!("the pool {pool} names no EVM token on chain selector {}", t.destination_selector),
            )));
        };
        let Some(dest) = self.chains.of_selector(t.destination_selector).and_then(|c| self.evm.get(&c.chain_id)) else {
            return Ok(Some(refusal(
                codes::CCIP_CHAIN_NOT_CONFIGURED,
                format!("chain selector {} is not in MG_CCIP_CHAINS and MG_EVM_CHAINS", t.destination_selector),
            )));
        };
        let decimals = call_word(&dest.rpc, remote, qtg_evm::tx::decimals_calldata()).await?;
        let Ok(decimals) = u32::try_from(decimals).map(|d| d.min(77)) else {
            return Ok(Some(invalid(format!("the destination token {remote} answers decimals {decimals}"))));
        };
        if decimals >= a.decimals {
            return Ok(None);
        }
        let unit = U256::from(10u64).pow(U256::from(a.decimals - decimals));
        let lost = a.amount % unit;
        if lost.is_zero() {
            return Ok(None);
        }
        Ok(Some(refusal(
            codes::CCIP_AMOUNT_NOT_REPRESENTABLE,
            format!(
                "the destination token {remote} has {decimals} decimals: {} base units would arrive as {} (the pool \
                 rounds down, losing {lost}); send a multiple of {unit}",
                a.amount,
                a.amount / unit
            ),
        )))
    }

    /// The router's fee for the message, in the fee token's base units.
    async fn fee(&self, a: &Action, t: &Terms) -> Result<U256, RpcError> {
        call_word(&a.chain.rpc, t.router, get_fee_calldata(t.destination_selector, t.message(a.recipient, a.amount)))
            .await
    }

    fn terms(&self, ctx: &ExecutionContext, a: &Action) -> Result<Terms, Refusal> {
        Terms::of(ctx, &self.chains, a.chain.spec.chain_id)
    }
}

#[async_trait]
impl EvmCall for Send {
    fn required_signer(&self, _ctx: &ExecutionContext) -> Option<qtg_executor::SignerRequirement> {
        None
    }

    async fn facts(&self, chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        crate::drift::facts(&self.chains, chains).await
    }

    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal> {
        let chain = chain_of(ctx, chains)?;
        let t = Terms::of(ctx, &self.chains, chain.spec.chain_id)?;
        let (receiver, amount) = intent_of(ctx, t.decimals)?;
        let input = ccip_send_calldata(t.destination_selector, t.message(receiver, amount));
        Ok(Action {
            chain,
            to: t.router,
            // A native fee is quoted as the transaction is built (`value`).
            value: U256::ZERO,
            input,
            token: Some(t.token),
            recipient: receiver,
            amount,
            decimals: t.decimals,
            gas: None,
        })
    }

    /// The router serves the destination (an OnRamp) and the token (a pool on that OnRamp) with
    /// room in the pool's outbound rate limit; the receiver is allowed; the token's decimals are
    /// the plan's; `from` holds the amount and allows the router it; and the router's fee is
    /// within the cap and payable (LINK: balance and allowance to the router; native: balance).
    /// Anything else refuses before a signature exists.
    async fn check(&self, ctx: &ExecutionContext, from: Address, a: &Action) -> Result<Option<Refusal>, RpcError> {
        let rpc = &a.chain.rpc;
        let t = match self.terms(ctx, a) {
            Ok(t) => t,
            Err(r) => return Ok(Some(r)),
        };
        if let Some(allowed) = ctx.risk_controls.get("allowed_destination_chain_selectors").and_then(Value::as_array) {
            if !allowed.iter().filter_map(uint64).any(|s| s == t.destination_selector) {
                return Ok(Some(refusal(
                    codes::CCIP_DESTINATION_NOT_SUPPORTED,
                    format!(
                        "chain selector {} is not in risk_controls.allowed_destination_chain_selectors",
                        t.destination_selector
                    ),
                )));
            }
        }
        if let Some(r) = destination_allowed(ctx, a.recipient) {
            return Ok(Some(r));
        }
        let on_ramp =
            abi::view(rpc, t.router, abi::getOnRampCall { destChainSelector: t.destination_selector }).await?;
        if on_ramp == Address::ZERO {
            return Ok(Some(refusal(
                codes::CCIP_DESTINATION_NOT_SUPPORTED,
                format!("the router {} has no OnRamp for chain selector {}", t.router, t.destination_selector),
            )));
        }
        let pool = abi::view(
            rpc,
            on_ramp,
            abi::getPoolBySourceTokenCall { destChainSelector: t.destination_selector, sourceToken: t.token },
        )
        .await?;
        if pool == Address::ZERO {
            return Ok(Some(refusal(
                codes::CCIP_TOKEN_NOT_SUPPORTED,
                format!(
                    "the OnRamp {on_ramp} has no pool for {} to chain selector {}",
                    t.token, t.destination_selector
                ),
            )));
        }
        let bucket = abi::view(
            rpc,
            pool,
            abi::getCurrentOutboundRateLimiterStateCall { remoteChainSelector: t.destination_selector },
        )
        .await?;
        if bucket.isEnabled && U256::from(bucket.tokens) < a.amount {
            return Ok(Some(refusal(
                codes::CCIP_RATE_LIMITED,
                format!(
                    "the pool {pool}'s outbound rate limit to chain selector {} holds {} of {}; the send needs {} \
                     (capacity {}, refill {} a second)",
                    t.destination_selector, bucket.tokens, t.token, a.amount, bucket.capacity, bucket.rate
                ),
            )));
        }
        if let Some(r) = token_decimals_match(rpc, t.token, a.decimals).await? {
            return Ok(Some(r));
        }
        if let Some(r) = self.rescaled(pool, &t, a).await? {
            return Ok(Some(r));
        }
        if let Some(r) = token_balance_covers(rpc, t.token, from, a.amount).await? {
            return Ok(Some(r));
        }
        let allowance = call_word(rpc, t.token, allowance_calldata(from, t.router)).await?;
        if allowance < a.amount {
            return Ok(Some(refusal(
                codes::CCIP_ALLOWANCE_INSUFFICIENT,
                format!(
                    "{from} allows the router {} {allowance} of {}; the send needs {} (approve it first)",
                    t.router, t.token, a.amount
                ),
            )));
        }
        let fee = self.fee(a, &t).await?;
        if let Some(r) = above_cap(fee, &t) {
            return Ok(Some(r));
        }
        let funds = if t.fee_token == Address::ZERO {
            rpc.quantity("eth_getBalance", json!([hex_address(from), "latest"])).await.map(U256::from)?
        } else {
            let balance = abi::view(rpc, t.fee_token, abi::balanceOfCall { account: from }).await?;
            let allowed = call_word(rpc, t.fee_token, allowance_calldata(from, t.router)).await?;
            balance.min(allowed)
        };
        if funds < fee {
            return Ok(Some(refusal(
                codes::CCIP_FEE_FUNDS_INSUFFICIENT,
                format!(
                    "{from} can pay {funds} of the fee token {} (balance{}); the router's fee is {fee}",
                    if t.fee_token == Address::ZERO { "native".to_string() } else { t.fee_token.to_string() },
                    if t.fee_token == Address::ZERO { "" } else { " and allowance to the router" }
                ),
            )));
        }
        tracing::info!(
            destination_chain_selector = t.destination_selector, fee = %fee, cap = %t.max_fee,
            fee_token = %t.fee_token, "CCIP send: the router's fee is within the cap"
        );
        Ok(None)
    }

    /// The fee quoted again as the transaction is built, within the cap whatever the fee
    /// token: a native fee is the transaction's value (the router keeps all of the value, so
    /// exactly the fee is sent); a LINK fee is pulled by the router, so no value.
    async fn value(&self, ctx: &ExecutionContext, a: &Action) -> Result<Result<U256, Refusal>, RpcError> {
        let t = match self.terms(ctx, a) {
            Ok(t) => t,
            Err(r) => return Ok(Err(r)),
        };
        let fee = self.fee(a, &t).await?;
        Ok(match above_cap(fee, &t) {
            Some(r) => Err(r),
            None if t.fee_token == Address::ZERO => Ok(fee),
            None => Ok(U256::ZERO),
        })
    }

    /// The send's intent: recorded when its transaction is built (before anything is signed),
    /// every hash added before it is broadcast, the message id once the send is final.
    async fn stage(&self, ctx: &ExecutionContext, stage: Stage<'_>) -> Result<(), String> {
        let node: uuid::Uuid = ctx.request_node_id.parse().map_err(|_| "request_node_id is not a UUID".to_string())?;
        let store = |e: qtg_store::StoreError| format!("ccip_send_intent: {e}");
        match stage {
            Stage::Built(p) => {
                let t = Terms::of(ctx, &self.chains, p.chain_id).map_err(|(_, why)| why)?;
                let fee_token =
                    if t.fee_token == Address::ZERO { "native".to_string() } else { hex_address(t.fee_token) };
                let intent = qtg_store::ccip::Intent {
                    request_node_id: node,
                    attempt_no: ctx.attempt_no,
                    chain_id: p.chain_id as i64,
                    from_address: &hex_address(p.from),
                    nonce: p.nonce as i64,
                    reservation_id: p.reservation_id,
                    router: &hex_address(t.router),
                    destination_chain_selector: &t.destination_selector.to_string(),
                    receiver: &hex_address(p.recipient),
                    token: &hex_address(t.token),
                    amount: &p.amount_base_units,
                    fee_token: &fee_token,
                    max_fee: &t.max_fee.to_string(),
                };
                qtg_store::ccip::record(&self.pool, &intent).await.map_err(store)
            }
            Stage::Broadcasting { nonce, hash } => {
                if qtg_store::ccip::mark_broadcast(&self.pool, node, nonce as i64, hash).await.map_err(store)? {
                    Ok(())
                } else {
                    Err(format!("no open CCIP send intent for nonce {nonce}: nothing is broadcast"))
                }
            }
            Stage::Completed { hash, result } => {
                let refs = &result.provider_refs;
                let id = refs.get("message_id").and_then(Value::as_str).ok_or("no message id")?;
                let seq = refs
                    .get("sequence_number")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or("no sequence number")?;
                qtg_store::ccip::mark_sent(&self.pool, node, hash, id, seq).await.map_err(store)
            }
        }
    }

    /// The message the send left: the router's OnRamp's `CCIPMessageSent` for this sender and
    /// destination, its id recomputed from its content, its sequence number and what arrives.
    fn completed(
        &self,
        ctx: &ExecutionContext,
        a: &Action,
        receipt: &Value,
        r: &mut ObserveOutcome,
    ) -> Result<(), String> {
        let t = self.terms(ctx, a).map_err(|(_, why)| why)?;
        let (on_ramp, m) = sent_message(receipt, &t, a)?;
        if m.feeTokenAmount > t.max_fee {
            // A LINK fee is pulled at mining: quoted within the cap, it rose before the send was mined.
            tracing::error!(
                message_id = %m.header.messageId, fee = %m.feeTokenAmount, cap = %t.max_fee,
                "the CCIP send paid a fee above its cap"
            );
            r.provider_refs.insert("fee_above_cap".into(), json!(true));
        }
        let destination_token =
            m.tokenAmounts.first().and_then(|x| Address::abi_decode(&x.destTokenAddress).ok()).map(hex_address);
        let refs = &mut r.provider_refs;
        refs.insert("message_id".into(), json!(m.header.messageId.to_string()));
        refs.insert("sequence_number".into(), json!(m.header.sequenceNumber.to_string()));
        refs.insert("message_nonce".into(), json!(m.header.nonce.to_string()));
        refs.insert("source_chain_selector".into(), json!(m.header.sourceChainSelector.to_string()));
        refs.insert("destination_chain_selector".into(), json!(m.header.destChainSelector.to_string()));
        refs.insert("on_ramp".into(), json!(hex_address(on_ramp)));
        refs.insert("fee_token".into(), json!(hex_address(m.feeToken)));
        refs.insert("fee_token_amount".into(), json!(m.feeTokenAmount.to_string()));
        refs.insert("destination_token".into(), json!(destination_token));
        r.provider_state = Some("sent".into());
        tracing::info!(
            message_id = %m.header.messageId, sequence_number = m.header.sequenceNumber,
            destination_chain_selector = m.header.destChainSelector, "CCIP send final; message sent"
        );
        Ok(())
    }
}

fn above_cap(fee: U256, t: &Terms) -> Option<Refusal> {
    (fee > t.max_fee).then(|| {
        tracing::warn!(
            destination_chain_selector = t.destination_selector, fee = %fee, cap = %t.max_fee,
            "CCIP send refused: the router's fee is above the cap; nothing signed"
        );
        refusal(
            codes::CCIP_FEE_ABOVE_CAP,
            format!(
                "the router's fee to chain selector {} is {fee} (base units of {}); the cap is {}",
                t.destination_selector,
                if t.fee_token == Address::ZERO { "the native coin".to_string() } else { t.fee_token.to_string() },
                t.max_fee
            ),
        )
    })
}

/// The one `CCIPMessageSent` of the receipt that is this send's: the sender is `from`'s
/// transaction's (the plan's token, amount and receiver), the selectors the plan's, and its id
/// the hash of its content under the log's OnRamp.
fn sent_message(receipt: &Value, t: &Terms, a: &Action) -> Result<(Address, EVM2AnyRampMessage), String> {
    let topic = abi::message_sent_topic().to_string();
    let logs = receipt.get("logs").and_then(Value::as_array).ok_or("the send's receipt has no logs")?;
    for log in logs {
        if log.pointer("/topics/0").and_then(Value::as_str) != Some(topic.as_str()) {
            continue;
        }
        let on_ramp: Address =
            log.get("address").and_then(Value::as_str).and_then(|x| x.parse().ok()).ok_or("a log without address")?;
        let data: Bytes = log.get("data").and_then(Value::as_str).unwrap_or("0x").parse().map_err(|_| "log data")?;
        let topics: Vec<alloy::primitives::B256> = log
            .get("topics")
            .and_then(Value::as_array)
            .map(|ts| ts.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
            .unwrap_or_default();
        let Ok(event) = CCIPMessageSent::decode_raw_log(topics, &data) else { continue };
        let m = event.message;
        let ours = m.header.sourceChainSelector == t.source_selector
            && m.header.destChainSelector == t.destination_selector
            && m.receiver.as_ref() == a.recipient.into_word().as_slice()
            && m.tokenAmounts.len() == 1
            && m.tokenAmounts[0].amount == a.amount;
        if !ours {
            continue;
        }
        if abi::message_id(&m, on_ramp) != m.header.messageId {
            return Err(format!(
                "the CCIPMessageSent of {on_ramp} carries id {} that is not the hash of its message",
                m.header.messageId
            ));
        }
        return Ok((on_ramp, m));
    }
    Err("the send's receipt has no CCIPMessageSent for this destination, receiver and amount".into())
}
