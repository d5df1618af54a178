//! `exec.cctp.mint[.<suffix>]`: `receiveMessage(message, attestation)` on the destination
//! chain's message transmitter, sent through the EVM lane. The message and attestation come
//! by `$ref` from the attestation step; preflight checks that the message is for this domain
//! and mints the intent's amount to the intent's destination. Idempotent by the message's
//! nonce: a message the transmitter already received (`usedNonces`) is COMPLETED by that
//! evidence — before any broadcast, and when the node's own transaction reverted or lost its
//! nonce — and never sent twice.

use std::sync::Arc;

use alloy::primitives::{keccak256, Address, Bytes, U256};
use async_trait::async_trait;
use qtg_core::{AfterObserve, ExecutionContext, ObserveOutcome};
use qtg_evm::call::{call_word, chain_of, destination_allowed, intent_of, refusal, Action, EvmCall, Refusal};
use qtg_evm::calls::{
    address_of, receive_calldata, signature_threshold_calldata, used_nonces_calldata, Message, SIGNATURE_LENGTH,
};
use qtg_evm::{Chains, RpcError};
use serde_json::{json, Value};

use crate::burn::{deployment, usdc_decimals};
use crate::domains::Domains;

/// Gas of a `receiveMessage` (a mint), unless the node's config sets `gas_limit`: fixed, so a
/// message already received does not fail the estimate before its evidence is read.
const MINT_GAS: u64 = 300_000;

pub struct Mint {
    pub domains: Arc<Domains>,
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

impl Mint {
    /// The message, bound to the burn it mints for: its hash must be the plan's
    /// `burn_message_hash` (by `$ref` from the burn, read from the burn's own receipt), so an
    /// attestation service cannot hand over another message (an older one, already received).
    fn message(ctx: &ExecutionContext) -> Result<(Bytes, Message), Refusal> {
        let raw = bytes(ctx, "message")?;
        let want = ctx
            .node_config
            .get("burn_message_hash")
            .and_then(Value::as_str)
            .and_then(|h| h.parse::<alloy::primitives::B256>().ok())
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
        let m = Message::parse(&raw)
            .ok_or_else(|| refusal(qtg_core::codes::CCTP_MESSAGE_INVALID, "the message is not a CCTP message"))?;
        Ok((raw, m))
    }
}

#[async_trait]
impl EvmCall for Mint {
    async fn facts(&self, chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        crate::domains::facts(&self.domains, chains).await
    }

    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal> {
        let chain = chain_of(ctx, chains)?;
        let d = deployment(&self.domains, ctx, chain.spec.chain_id, |d| d.message_transmitter, "message transmitter")?;
        let (raw, m) = Self::message(ctx)?;
        let attestation = bytes(ctx, "attestation")?;
        let burn = m
            .burn()
            .ok_or_else(|| refusal(qtg_core::codes::CCTP_MESSAGE_INVALID, "the message body is not a burn message"))?;
        // The route: from another configured domain's messenger, for its USDC, to ours.
        let source = self.domains.get(m.source_domain).filter(|s| s.domain != d.domain).ok_or_else(|| {
            refusal(
                qtg_core::codes::CCTP_MESSAGE_MISMATCH,
                format!("the message comes from domain {}, not another configured one", m.source_domain),
            )
        })?;
        if m.sender != source.token_messenger.into_word()
            || m.recipient != d.token_messenger.into_word()
            || burn.burn_token != source.usdc.into_word()
        {
            return Err(refusal(
                qtg_core::codes::CCTP_MESSAGE_MISMATCH,
                format!(
                    "the message is not from domain {}'s token messenger for its USDC to this domain's token messenger",
                    source.domain
                ),
            ));
        }
        let decimals = usdc_decimals(ctx)?;
        let (recipient, amount) = intent_of(ctx, decimals)?;
        if m.destination_domain != d.domain
            || address_of(&burn.mint_recipient) != Some(recipient)
            || burn.amount != amount
        {
            return Err(refusal(
                qtg_core::codes::CCTP_MESSAGE_MISMATCH,
                format!(
                    "the message mints {} to {} on domain {}; the movement is {amount} to {recipient} on domain {}",
                    burn.amount, burn.mint_recipient, m.destination_domain, d.domain
                ),
            ));
        }
        let gas = ctx.node_config.get("gas_limit").and_then(Value::as_u64).unwrap_or(MINT_GAS);
        Ok(Action {
            chain,
            to: d.message_transmitter,
            value: U256::ZERO,
            input: receive_calldata(&raw, &attestation),
            token: Some(d.usdc),
            recipient,
            amount,
            decimals,
            gas: Some(gas),
        })
    }

    /// The recipient allowed, the attestation as long as the transmitter's m-of-n check needs
    /// (`signatureThreshold()` signatures of 65 bytes), the message's destination caller (when
    /// it names one) this executor's address.
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
            if !m.destination_caller.is_zero() && address_of(&m.destination_caller) != Some(from) {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_MINT_CALLER_MISMATCH,
                    format!(
                        "the message may be received only by {}; this executor sends from {from}",
                        m.destination_caller
                    ),
                )));
            }
        }
        Ok(None)
    }

    /// The transmitter already received the message (whoever sent it): the mint happened.
    async fn settled(&self, ctx: &ExecutionContext, a: &Action) -> Result<Option<ObserveOutcome>, RpcError> {
        let Ok((raw, m)) = Self::message(ctx) else { return Ok(None) };
        let used = call_word(&a.chain.rpc, a.to, used_nonces_calldata(m.used_key())).await?;
        if used.is_zero() {
            return Ok(None);
        }
        tracing::info!(
            source_domain = m.source_domain,
            message_nonce = m.nonce,
            "the message transmitter already received this message"
        );
        let mut r = ObserveOutcome::new(AfterObserve::Completed);
        r.provider_state = Some("received".into());
        r.provider_ref_id = Some(keccak256(&raw).to_string());
        r.provider_refs.insert("message_hash".into(), json!(keccak256(&raw).to_string()));
        r.provider_refs.insert("message_nonce".into(), json!(m.nonce.to_string()));
        r.provider_refs.insert("message_nonce_used".into(), json!(true));
        r.generated_artifacts.push(json!({
            "kind": "cctp_message_received",
            "message_hash": keccak256(&raw).to_string(),
            "source_domain": m.source_domain,
            "message_nonce": m.nonce.to_string(),
            "used_nonces_key": m.used_key().to_string(),
        }));
        Ok(Some(r))
    }

    fn completed(&self, ctx: &ExecutionContext, _: &Action, _: &Value, r: &mut ObserveOutcome) -> Result<(), String> {
        if let Ok((raw, m)) = Self::message(ctx) {
            r.provider_refs.insert("message_hash".into(), json!(keccak256(&raw).to_string()));
            r.provider_refs.insert("message_nonce".into(), json!(m.nonce.to_string()));
        }
        r.provider_state = Some("minted".into());
        Ok(())
    }
}
