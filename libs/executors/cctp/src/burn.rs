//! `exec.cctp.burn[.<suffix>]`: `depositForBurn` on the source chain's token messenger, sent
//! through the EVM lane (its nonces, fees, signer and recovery). The plan pins the contract
//! (`config.contract`, the messenger), the token (`config.token_contract`, the chain's USDC),
//! the destination domain and the burn caller; preflight checks them against
//! `MG_CCTP_DOMAINS` and the chain, then balance and allowance. Once final, the burn's
//! `MessageSent` gives the message, its hash and nonce to the attestation step.

use std::sync::Arc;

use alloy::primitives::{keccak256, Address, Bytes, U256};
use alloy::sol_types::SolValue;
use async_trait::async_trait;
use qtg_core::{ExecutionContext, ObserveOutcome};
use qtg_evm::call::{
    call_word, chain_of, config_address, destination_allowed, hex_address, intent_of, refusal, token_balance_covers,
    token_decimals_match, Action, EvmCall, Refusal,
};
use qtg_evm::calls::{allowance_calldata, burn_calldata, message_sent_topic, remote_messenger_calldata, Message};
use qtg_evm::{Chains, RpcError};
use serde_json::{json, Value};

use crate::domains::{Domain, Domains};

pub struct Burn {
    pub domains: Arc<Domains>,
}

/// The CCTP deployment of the node's chain, and the contract the plan names is its `want`.
pub(crate) fn deployment<'a>(
    domains: &'a Domains,
    ctx: &ExecutionContext,
    chain_id: u64,
    want: impl Fn(&Domain) -> Address,
    what: &str,
) -> Result<&'a Domain, Refusal> {
    let d = domains.of_chain(chain_id).ok_or_else(|| {
        refusal(
            qtg_core::codes::CCTP_CHAIN_NOT_CONFIGURED,
            format!("chain {chain_id} has no domain in MG_CCTP_DOMAINS"),
        )
    })?;
    let contract = config_address(ctx, "contract")?.ok_or_else(|| {
        refusal(qtg_core::codes::CCTP_CONFIG_INVALID, format!("the node's config names no contract (the {what})"))
    })?;
    if contract != want(d) {
        return Err(refusal(
            qtg_core::codes::CCTP_CONTRACT_MISMATCH,
            format!("the plan's contract {contract} is not the {what} {} of domain {}", want(d), d.domain),
        ));
    }
    if let Some(token) = config_address(ctx, "token_contract")? {
        if token != d.usdc {
            return Err(refusal(
                qtg_core::codes::CCTP_TOKEN_MISMATCH,
                format!("the plan's token {token} is not the USDC {} of domain {}", d.usdc, d.domain),
            ));
        }
    }
    Ok(d)
}

/// Node config `decimals`, required (6 for USDC): the signer reads the same value from the
/// approved plan, so neither side may assume one.
pub(crate) fn usdc_decimals(ctx: &ExecutionContext) -> Result<u32, Refusal> {
    match ctx.node_config.get("decimals") {
        None => Err(refusal(qtg_core::codes::CCTP_CONFIG_INVALID, "the node's config names no decimals (6 for USDC)")),
        Some(_) => qtg_evm::call::decimals_of(ctx),
    }
}

fn destination_domain(ctx: &ExecutionContext) -> Result<u32, Refusal> {
    ctx.node_config
        .get("destination_domain")
        .and_then(Value::as_u64)
        .and_then(|d| u32::try_from(d).ok())
        .ok_or_else(|| refusal(qtg_core::codes::CCTP_CONFIG_INVALID, "the node's config names no destination_domain"))
}

#[async_trait]
impl EvmCall for Burn {
    /// A burn is always sent by its `burn_caller`, whatever the action is called.
    fn required_signer(&self, ctx: &ExecutionContext) -> Option<qtg_executor::SignerRequirement> {
        Some(qtg_executor::SignerRequirement::burn_caller(&ctx.node_config))
    }

    async fn facts(&self, chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        crate::domains::facts(&self.domains, chains).await
    }

    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal> {
        let chain = chain_of(ctx, chains)?;
        let d = deployment(&self.domains, ctx, chain.spec.chain_id, |d| d.token_messenger, "token messenger")?;
        if config_address(ctx, "token_contract")?.is_none() {
            return Err(refusal(
                qtg_core::codes::CCTP_CONFIG_INVALID,
                "the node's config names no token_contract (the USDC burned)",
            ));
        }
        let decimals = usdc_decimals(ctx)?;
        let (recipient, amount) = intent_of(ctx, decimals)?;
        let to_domain = destination_domain(ctx)?;
        let input = burn_calldata(amount, to_domain, recipient, d.usdc);
        Ok(Action {
            chain,
            to: d.token_messenger,
            value: U256::ZERO,
            input,
            token: Some(d.usdc),
            recipient,
            amount,
            decimals,
            gas: None,
        })
    }

    /// The destination domain is another configured one with a remote messenger on chain and
    /// allowed by the plan, the recipient allowed, the burn caller the plan expects is this
    /// executor's address, the token's decimals the plan's, and balance and allowance cover
    /// the amount.
    async fn check(&self, ctx: &ExecutionContext, from: Address, a: &Action) -> Result<Option<Refusal>, RpcError> {
        let rpc = &a.chain.rpc;
        let Ok(to_domain) = destination_domain(ctx) else {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_CONFIG_INVALID,
                "the node's config names no destination_domain",
            )));
        };
        let here = self.domains.of_chain(a.chain.spec.chain_id).map(|d| d.domain);
        if here == Some(to_domain) || self.domains.get(to_domain).is_none() {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_DESTINATION_DOMAIN_NOT_ALLOWED,
                format!("domain {to_domain} is not another domain of MG_CCTP_DOMAINS"),
            )));
        }
        if let Some(allowed) = ctx.risk_controls.get("allowed_destination_domains").and_then(Value::as_array) {
            if !allowed.iter().any(|d| d.as_u64() == Some(u64::from(to_domain))) {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_DESTINATION_DOMAIN_NOT_ALLOWED,
                    format!("domain {to_domain} is not in risk_controls.allowed_destination_domains"),
                )));
            }
        }
        if let Some(r) = destination_allowed(ctx, a.recipient) {
            return Ok(Some(r));
        }
        match config_address(ctx, "burn_caller") {
            Ok(Some(caller)) if caller == from => {}
            Ok(Some(caller)) => {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_BURN_CALLER_MISMATCH,
                    format!("the plan expects {caller} to call depositForBurn; this executor sends from {from}"),
                )))
            }
            Ok(None) => {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_CONFIG_INVALID,
                    "the node's config names no burn_caller",
                )))
            }
            Err(r) => return Ok(Some(r)),
        }
        let remote = call_word(rpc, a.to, remote_messenger_calldata(to_domain)).await?;
        if remote.is_zero() {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_DESTINATION_DOMAIN_NOT_ALLOWED,
                format!("the token messenger {} has no remote messenger for domain {to_domain}", a.to),
            )));
        }
        let token = a.token.unwrap_or(Address::ZERO);
        if let Some(r) = token_decimals_match(rpc, token, a.decimals).await? {
            return Ok(Some(r));
        }
        if let Some(r) = token_balance_covers(rpc, token, from, a.amount).await? {
            return Ok(Some(r));
        }
        let allowance = call_word(rpc, token, allowance_calldata(from, a.to)).await?;
        if allowance < a.amount {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_ALLOWANCE_INSUFFICIENT,
                format!(
                    "{from} allows the token messenger {} {allowance} of {token}; the burn needs {} (approve it first)",
                    a.to, a.amount
                ),
            )));
        }
        Ok(None)
    }

    /// The message the burn sent (the transmitter's `MessageSent`), its hash and nonce.
    fn completed(
        &self,
        _: &ExecutionContext,
        a: &Action,
        receipt: &Value,
        r: &mut ObserveOutcome,
    ) -> Result<(), String> {
        let d = self.domains.of_chain(a.chain.spec.chain_id).ok_or("the burn's chain has no domain")?;
        let transmitter = hex_address(d.message_transmitter);
        let topic = message_sent_topic().to_string();
        let log = receipt
            .get("logs")
            .and_then(Value::as_array)
            .and_then(|logs| {
                logs.iter().find(|l| {
                    l.get("address").and_then(Value::as_str).is_some_and(|x| x.eq_ignore_ascii_case(&transmitter))
                        && l.pointer("/topics/0").and_then(Value::as_str) == Some(topic.as_str())
                })
            })
            .ok_or("the burn's receipt has no MessageSent of the domain's message transmitter")?;
        let data: Bytes =
            log.get("data").and_then(Value::as_str).unwrap_or("0x").parse().map_err(|_| "MessageSent data")?;
        let message = Bytes::abi_decode(&data).map_err(|e| format!("MessageSent data: {e}"))?;
        let m = Message::parse(&message).ok_or("MessageSent carries no CCTP message")?;
        r.provider_refs.insert("message".into(), json!(message.to_string()));
        r.provider_refs.insert("message_hash".into(), json!(keccak256(&message).to_string()));
        r.provider_refs.insert("message_nonce".into(), json!(m.nonce.to_string()));
        r.provider_refs.insert("source_domain".into(), json!(m.source_domain));
        r.provider_refs.insert("destination_domain".into(), json!(m.destination_domain));
        r.provider_state = Some("burned".into());
        tracing::info!(
            source_domain = m.source_domain,
            destination_domain = m.destination_domain,
            message_nonce = m.nonce,
            "burn final; message sent"
        );
        Ok(())
    }
}
