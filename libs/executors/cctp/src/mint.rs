//! `exec.cctp.mint[.<suffix>]`: `receiveMessage(message, attestation)` on the destination
//! chain's message transmitter, sent through the EVM lane. The message and attestation come
//! by `$ref` from the attestation step; preflight checks that the message is for this domain
//! and mints the intent's amount to the intent's destination. Idempotent by the message's
//! nonce: a message the transmitter already received (`usedNonces`) is COMPLETED by that
//! evidence — before any broadcast, and when the node's own transaction reverted or lost its
//! nonce — and never sent twice.

use std::sync::Arc;

use alloy::primitives::{keccak256, Address, Bytes, B256, U256};
use async_trait::async_trait;
use qtg_core::{AfterObserve, ExecutionContext, ObserveOutcome};
use qtg_evm::call::{call_word, chain_of, destination_allowed, intent_of, refusal, Action, EvmCall, Refusal};
use qtg_evm::calls::{
    address_of, receive_calldata, signature_threshold_calldata, used_nonces_calldata, AmountIs, Message, MessageV2,
    SIGNATURE_LENGTH,
};
use qtg_evm::{Chains, RpcError};
use serde_json::{json, Value};

use crate::burn::{deployment, token_amount, usdc_decimals};
use crate::domains::{Domains, Version};

/// Gas of a `receiveMessage` (a mint), unless the node's config sets `gas_limit`: fixed, so a
/// message already received does not fail the estimate before its evidence is read.
const MINT_GAS: u64 = 300_000;

pub struct Mint {
    pub domains: Arc<Domains>,
    /// The address this executor sends from (its denylist state is a drift fact).
    pub from: Address,
    /// Where attested V2 nonces are claimed for their movement (`qtg_store::cctp`).
    pub pool: sqlx::PgPool,
}

fn bytes(ctx: &ExecutionContext, key: &str) -> Result<Bytes, Refusal> {
    ctx.node_config
        .get(key)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Bytes>().ok())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| {
            refusal(
                qtg_core::codes::CCTP_MESSAGE_MISSING,
                format!("the node's config has no hex {key} (a $ref to the attestation step)"),
            )
        })
}

/// The attested message a mint receives, in its version's layout.
pub(crate) enum Received {
    V1(Message),
    V2(MessageV2),
}

impl Received {
    fn source_domain(&self) -> u32 {
        match self {
            Received::V1(m) => m.source_domain,
            Received::V2(m) => m.source_domain,
        }
    }

    fn destination_caller(&self) -> B256 {
        match self {
            Received::V1(m) => m.destination_caller,
            Received::V2(m) => m.destination_caller,
        }
    }

    /// The transmitter's `usedNonces` key (V1: of source domain and nonce; V2: the nonce).
    fn used_key(&self) -> B256 {
        match self {
            Received::V1(m) => m.used_key(),
            Received::V2(m) => m.used_key(),
        }
    }

    fn nonce(&self) -> String {
        match self {
            Received::V1(m) => m.nonce.to_string(),
            Received::V2(m) => m.nonce.to_string(),
        }
    }
}

impl Mint {
    /// A V2 message's attested nonce belongs to this movement: claimed for it, or claimed by
    /// it before. Two identical V2 burns emit the same bytes, so only this claim keeps the
    /// message attested for one of them from completing the other's mint by `usedNonces`.
    /// `Ok(Err(refusal))` when another movement holds it; a store error is an RPC-like outage.
    async fn owns_nonce(&self, ctx: &ExecutionContext, m: &Received) -> Result<Result<(), Refusal>, RpcError> {
        let Received::V2(m) = m else { return Ok(Ok(())) };
        let store_down = |detail: String| RpcError::Transport { method: "claim the attested nonce".into(), detail };
        let request = uuid::Uuid::parse_str(&ctx.request_id).map_err(|e| store_down(format!("request id: {e}")))?;
        let owner = qtg_store::cctp::claim_nonce(&self.pool, m.source_domain, &m.nonce.to_string(), request)
            .await
            .map_err(|e| store_down(e.to_string()))?;
        if owner == request {
            return Ok(Ok(()));
        }
        tracing::error!(
            source_domain = m.source_domain, message_nonce = %m.nonce, other_movement = %owner,
            "the attested V2 nonce belongs to another movement: this message was attested for another burn"
        );
        Ok(Err(refusal(
            qtg_core::codes::CCTP_MESSAGE_MISMATCH,
            format!(
                "the message's attested nonce {} (domain {}) belongs to movement {owner}: it was attested for \
                 another burn, and its mint is not this movement's",
                m.nonce, m.source_domain
            ),
        )))
    }

    /// The message, bound to the burn it mints for. V1: its hash is the plan's
    /// `burn_message_hash` (by `$ref` from the burn's receipt). V2: the attester filled in the
    /// nonce, finality, fee and expiry, so the hashes differ by construction; it must be the
    /// same transfer as the plan's `burn_message` (by `$ref`: the bytes the burn emitted) by
    /// every field the source chain wrote. Either way an attestation service cannot hand over
    /// another message (an older one, already received).
    fn message(ctx: &ExecutionContext) -> Result<(Bytes, Received), Refusal> {
        let raw = bytes(ctx, "message")?;
        let version =
            Version::of(&ctx.node_config).map_err(|why| refusal(qtg_core::codes::CCTP_CONFIG_INVALID, why))?;
        if Version::of_message(&raw) != Some(version) {
            return Err(refusal(
                qtg_core::codes::CCTP_MESSAGE_INVALID,
                format!("the message is not a CCTP {version} message"),
            ));
        }
        match version {
            Version::V1 => {
                let want = ctx
                    .node_config
                    .get("burn_message_hash")
                    .and_then(Value::as_str)
                    .and_then(|h| h.parse::<B256>().ok())
                    .ok_or_else(|| {
                        refusal(
                            qtg_core::codes::CCTP_CONFIG_INVALID,
                            "the node's config names no burn_message_hash (a $ref to the burn's message_hash)",
                        )
                    })?;
                if keccak256(&raw) != want {
                    return Err(refusal(
                        qtg_core::codes::CCTP_MESSAGE_MISMATCH,
                        format!("the message's hash {} is not the burn's {want}", keccak256(&raw)),
                    ));
                }
                let m = Message::parse(&raw).ok_or_else(|| {
                    refusal(qtg_core::codes::CCTP_MESSAGE_INVALID, "the message is not a CCTP message")
                })?;
                Ok((raw, Received::V1(m)))
            }
            Version::V2 => {
                let emitted = ctx
                    .node_config
                    .get("burn_message")
                    .and_then(Value::as_str)
                    .and_then(|h| h.parse::<Bytes>().ok())
                    .and_then(|b| MessageV2::parse(&b))
                    .ok_or_else(|| {
                        refusal(
                            qtg_core::codes::CCTP_CONFIG_INVALID,
                            "the node's config names no burn_message (a $ref to the burn's message)",
                        )
                    })?;
                let m = MessageV2::parse(&raw).ok_or_else(|| {
                    refusal(qtg_core::codes::CCTP_MESSAGE_INVALID, "the message is not a CCTP V2 message")
                })?;
                // Nonce 0 is the emitted message's, never an attested one's (Circle's transmitter
                // marks it used at deployment): taking its `usedNonces` as a mint would complete a
                // node whose burn was never minted.
                if m.nonce.is_zero() {
                    return Err(refusal(
                        qtg_core::codes::CCTP_MESSAGE_INVALID,
                        "the message has no attested nonce (0 is the emitted message's): it is not an attested V2 \
                         message",
                    ));
                }
                if !emitted.same_transfer(&m) {
                    return Err(refusal(
                        qtg_core::codes::CCTP_MESSAGE_MISMATCH,
                        "the attested message is not the burn's transfer (a field the source chain wrote differs)",
                    ));
                }
                Ok((raw, Received::V2(m)))
            }
        }
    }
}

#[async_trait]
impl EvmCall for Mint {
    async fn facts(&self, chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        crate::domains::facts(&self.domains, chains, &[self.from]).await
    }

    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal> {
        let chain = chain_of(ctx, chains)?;
        let (d, version, here) =
            deployment(&self.domains, ctx, chain.spec.chain_id, |c| c.message_transmitter, "message transmitter")?;
        let (raw, received) = Self::message(ctx)?;
        let attestation = bytes(ctx, "attestation")?;
        // The route: from another configured domain's messenger of this version, for its USDC,
        // to ours.
        let source_domain = received.source_domain();
        let source = self
            .domains
            .get(source_domain)
            .filter(|s| s.domain != d.domain)
            .and_then(|s| Some((s, s.contracts(version)?)))
            .ok_or_else(|| {
                refusal(
                    qtg_core::codes::CCTP_MESSAGE_MISMATCH,
                    format!("the message comes from domain {source_domain}, not another configured {version} one"),
                )
            })?;
        let (source, source_contracts) = source;
        let decimals = usdc_decimals(ctx)?;
        let (recipient, amount) = intent_of(ctx, decimals)?;
        let mismatch = |why: String| refusal(qtg_core::codes::CCTP_MESSAGE_MISMATCH, why);
        let route = |sender: &B256, to: &B256, token: &B256| {
            if *sender != source_contracts.token_messenger.into_word()
                || *to != here.token_messenger.into_word()
                || *token != source.usdc.into_word()
            {
                return Err(mismatch(format!(
                    "the message is not from domain {}'s {version} token messenger for its USDC to this domain's",
                    source.domain
                )));
            }
            Ok(())
        };
        let delivered = match &received {
            Received::V1(m) => {
                let burn = m.burn().ok_or_else(|| {
                    refusal(qtg_core::codes::CCTP_MESSAGE_INVALID, "the message body is not a burn message")
                })?;
                route(&m.sender, &m.recipient, &burn.burn_token)?;
                if m.destination_domain != d.domain
                    || address_of(&burn.mint_recipient) != Some(recipient)
                    || burn.amount != amount
                {
                    return Err(mismatch(format!(
                        "the message mints {} to {} on domain {}; the movement is {amount} to {recipient} on domain {}",
                        burn.amount, burn.mint_recipient, m.destination_domain, d.domain
                    )));
                }
                burn.amount
            }
            Received::V2(m) => {
                let burn = m.burn().ok_or_else(|| {
                    refusal(qtg_core::codes::CCTP_MESSAGE_INVALID, "the message body is not a V2 burn message")
                })?;
                route(&m.sender, &m.recipient, &burn.burn_token)?;
                if m.destination_domain != d.domain || address_of(&burn.mint_recipient) != Some(recipient) {
                    return Err(mismatch(format!(
                        "the message mints to {} on domain {}; the movement is to {recipient} on domain {}",
                        burn.mint_recipient, m.destination_domain, d.domain
                    )));
                }
                let amount_is = AmountIs::parse(ctx.node_config.get("amount_is").and_then(Value::as_str))
                    .map_err(|why| refusal(qtg_core::codes::CCTP_CONFIG_INVALID, why))?;
                amount_is.check(amount, &burn).map_err(mismatch)?;
                if let Some(cap) = token_amount(ctx.node_config.get("max_fee"), decimals, "config.max_fee")? {
                    if burn.max_fee > cap {
                        return Err(mismatch(format!(
                            "the message's maxFee {} is above the plan's {cap}",
                            burn.max_fee
                        )));
                    }
                }
                burn.amount - burn.fee_executed
            }
        };
        let gas = ctx.node_config.get("gas_limit").and_then(Value::as_u64).unwrap_or(MINT_GAS);
        Ok(Action {
            chain,
            to: here.message_transmitter,
            value: U256::ZERO,
            input: receive_calldata(&raw, &attestation),
            token: Some(d.usdc),
            recipient,
            amount: delivered,
            decimals,
            gas: Some(gas),
        })
    }

    /// The recipient allowed, the attestation as long as the transmitter's m-of-n check needs
    /// (`signatureThreshold()` signatures of 65 bytes), the message's destination caller (when
    /// it names one) this executor's address, and a V2 attestation not expired.
    async fn check(&self, ctx: &ExecutionContext, from: Address, a: &Action) -> Result<Option<Refusal>, RpcError> {
        if let Some(r) = destination_allowed(ctx, a.recipient) {
            return Ok(Some(r));
        }
        let length = bytes(ctx, "attestation").map(|b| b.len()).unwrap_or(0);
        let threshold = match call_word(&a.chain.rpc, a.to, signature_threshold_calldata()).await {
            Ok(t) => usize::try_from(t).ok().filter(|t| (1..=64).contains(t)),
            Err(RpcError::Node { .. }) => None,
            Err(e) => return Err(e),
        };
        match threshold {
            Some(t) if length == t * SIGNATURE_LENGTH => {}
            Some(t) => {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_ATTESTATION_INVALID,
                    format!(
                        "the attestation is {length} bytes; the message transmitter requires {t} attester \
                         signature(s) of {SIGNATURE_LENGTH} bytes ({} bytes)",
                        t * SIGNATURE_LENGTH
                    ),
                )))
            }
            None => {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_ATTESTATION_INVALID,
                    format!(
                        "the message transmitter {} does not say its signatureThreshold(): the attestation cannot \
                         be checked against it",
                        a.to
                    ),
                )))
            }
        }
        if let Ok((_, m)) = Self::message(ctx) {
            if let Err(r) = self.owns_nonce(ctx, &m).await? {
                return Ok(Some(r));
            }
            let caller = m.destination_caller();
            if !caller.is_zero() && address_of(&caller) != Some(from) {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_MINT_CALLER_MISMATCH,
                    format!("the message may be received only by {caller}; this executor sends from {from}"),
                )));
            }
            if let Received::V2(m) = &m {
                let expiry = m.burn().map_or(U256::ZERO, |b| b.expiration_block);
                if !expiry.is_zero() {
                    let head = a.chain.rpc.call("eth_blockNumber", json!([])).await?;
                    let head = head
                        .as_str()
                        .and_then(|h| U256::from_str_radix(h.trim_start_matches("0x"), 16).ok())
                        .ok_or_else(|| RpcError::Transport {
                            method: "eth_blockNumber".into(),
                            detail: format!("not a block number: {head}"),
                        })?;
                    // The transmitter wants expirationBlock > block.number, and the mint lands in
                    // the next block at the earliest.
                    if head + U256::from(1u64) >= expiry {
                        return Ok(Some(refusal(
                            qtg_core::codes::CCTP_ATTESTATION_EXPIRED,
                            format!(
                                "the Fast attestation expired at block {expiry} (the chain is at {head}); it must be \
                                 re-attested, never sent"
                            ),
                        )));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The transmitter already received the message (whoever sent it): the mint happened.
    async fn settled(&self, ctx: &ExecutionContext, a: &Action) -> Result<Option<ObserveOutcome>, RpcError> {
        let Ok((raw, m)) = Self::message(ctx) else { return Ok(None) };
        // Another movement's nonce is no evidence for this one.
        if self.owns_nonce(ctx, &m).await?.is_err() {
            return Ok(None);
        }
        let used = call_word(&a.chain.rpc, a.to, used_nonces_calldata(m.used_key())).await?;
        if used.is_zero() {
            return Ok(None);
        }
        tracing::info!(
            source_domain = m.source_domain(),
            message_nonce = %m.nonce(),
            "the message transmitter already received this message"
        );
        let mut r = ObserveOutcome::new(AfterObserve::Completed);
        r.provider_state = Some("received".into());
        r.provider_ref_id = Some(keccak256(&raw).to_string());
        r.provider_refs.insert("message_hash".into(), json!(keccak256(&raw).to_string()));
        r.provider_refs.insert("message_nonce".into(), json!(m.nonce()));
        r.provider_refs.insert("message_nonce_used".into(), json!(true));
        if let Received::V2(m) = &m {
            if let Some(b) = m.burn() {
                r.provider_refs.insert("fee_executed".into(), json!(b.fee_executed.to_string()));
                r.provider_refs.insert("amount_delivered".into(), json!(a.amount.to_string()));
            }
        }
        r.generated_artifacts.push(json!({
            "kind": "cctp_message_received",
            "message_hash": keccak256(&raw).to_string(),
            "source_domain": m.source_domain(),
            "message_nonce": m.nonce(),
            "used_nonces_key": m.used_key().to_string(),
        }));
        Ok(Some(r))
    }

    fn completed(&self, ctx: &ExecutionContext, a: &Action, _: &Value, r: &mut ObserveOutcome) -> Result<(), String> {
        if let Ok((raw, m)) = Self::message(ctx) {
            r.provider_refs.insert("message_hash".into(), json!(keccak256(&raw).to_string()));
            r.provider_refs.insert("message_nonce".into(), json!(m.nonce()));
            if let Received::V2(m) = &m {
                if let Some(b) = m.burn() {
                    r.provider_refs.insert("fee_executed".into(), json!(b.fee_executed.to_string()));
                    r.provider_refs.insert("amount_delivered".into(), json!(a.amount.to_string()));
                }
            }
        }
        r.provider_state = Some("minted".into());
        Ok(())
    }
}
