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
use qtg_evm::calls::{
    allowance_calldata, burn_calldata, burn_v2_calldata, burn_v2_with_hook_calldata, finality_of,
    is_denylisted_calldata, message_sent_topic, min_fee_calldata, remote_messenger_calldata, AmountIs, Message,
    MessageV2, FINALITY_FAST,
};
use qtg_evm::{Chains, RpcError};
use serde_json::{json, Value};

use crate::domains::{Contracts, Domain, Domains, Version};
use crate::fees::{FeeApi, FeeError};

pub struct Burn {
    pub domains: Arc<Domains>,
    /// The address this executor sends from (its denylist state is a drift fact).
    pub from: Address,
    /// Circle's fee API (the burn executor's `config.fee_url`): every V2 burn reads its route's
    /// fee there before anything is signed.
    pub fees: Option<FeeApi>,
}

/// The CCTP deployment of the node's chain in the node's version, and the contract the plan
/// names is its `want`.
pub(crate) fn deployment<'a>(
    domains: &'a Domains,
    ctx: &ExecutionContext,
    chain_id: u64,
    want: impl Fn(&Contracts) -> Address,
    what: &str,
) -> Result<(&'a Domain, Version, &'a Contracts), Refusal> {
    let d = domains.of_chain(chain_id).ok_or_else(|| {
        refusal(
            qtg_core::codes::CCTP_CHAIN_NOT_CONFIGURED,
            format!("chain {chain_id} has no domain in MG_CCTP_DOMAINS"),
        )
    })?;
    let version = Version::of(&ctx.node_config).map_err(|why| refusal(qtg_core::codes::CCTP_CONFIG_INVALID, why))?;
    let contracts = d.contracts(version).ok_or_else(|| {
        refusal(
            qtg_core::codes::CCTP_VERSION_NOT_CONFIGURED,
            format!("domain {} has no CCTP {version} contracts in MG_CCTP_DOMAINS", d.domain),
        )
    })?;
    let contract = config_address(ctx, "contract")?.ok_or_else(|| {
        refusal(qtg_core::codes::CCTP_CONFIG_INVALID, format!("the node's config names no contract (the {what})"))
    })?;
    if contract != want(contracts) {
        return Err(refusal(
            qtg_core::codes::CCTP_CONTRACT_MISMATCH,
            format!(
                "the plan's contract {contract} is not the CCTP {version} {what} {} of domain {}",
                want(contracts),
                d.domain
            ),
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
    Ok((d, version, contracts))
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

/// A decimal amount of the token from node config or risk controls, in base units.
pub(crate) fn token_amount(v: Option<&Value>, decimals: u32, what: &str) -> Result<Option<U256>, Refusal> {
    let text = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(refusal(
                qtg_core::codes::CCTP_CONFIG_INVALID,
                format!("{what} {other} is not a decimal amount"),
            ))
        }
    };
    qtg_evm::tx::base_units(&text, decimals).map(Some).ok_or_else(|| {
        refusal(
            qtg_core::codes::CCTP_CONFIG_INVALID,
            format!("{what} {text:?} is not an amount of USDC with {decimals} decimals"),
        )
    })
}

/// A V2 burn's terms from the approved plan (the signer reads the same keys): the finality the
/// template chose, the fee cap (`config.max_fee`, lowered by `risk_controls.cctp_max_fee`)
/// sent as `maxFee`, what the intent's amount is, and the destination caller.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Terms {
    pub finality: u32,
    pub max_fee: U256,
    pub amount_is: AmountIs,
    pub destination_caller: Option<Address>,
    /// `config.hook_data` (hex): burned by `depositForBurnWithHook`; empty: `depositForBurn`.
    pub hook_data: Bytes,
}

impl Terms {
    pub(crate) fn of(ctx: &ExecutionContext, decimals: u32) -> Result<Terms, Refusal> {
        let invalid = |why: String| refusal(qtg_core::codes::CCTP_CONFIG_INVALID, why);
        let text = |k: &str| ctx.node_config.get(k).and_then(Value::as_str);
        let finality = finality_of(text("finality")).map_err(invalid)?;
        let cap = token_amount(ctx.node_config.get("max_fee"), decimals, "config.max_fee")?.ok_or_else(|| {
            invalid("a V2 burn needs config.max_fee: the most it may pay the route's fee, in USDC".into())
        })?;
        let risk = token_amount(ctx.risk_controls.get("cctp_max_fee"), decimals, "risk_controls.cctp_max_fee")?;
        let amount_is = AmountIs::parse(text("amount_is")).map_err(invalid)?;
        let hook_data = match ctx.node_config.get("hook_data") {
            None | Some(Value::Null) => Bytes::new(),
            Some(Value::String(h)) => {
                h.trim().parse::<Bytes>().map_err(|_| invalid(format!("config.hook_data {h:?} is not hex bytes")))?
            }
            Some(other) => return Err(invalid(format!("config.hook_data {other} is not hex bytes"))),
        };
        Ok(Terms {
            finality,
            max_fee: risk.map_or(cap, |r| r.min(cap)),
            amount_is,
            destination_caller: config_address(ctx, "destination_caller")?,
            hook_data,
        })
    }

    /// V1 nodes carry none of V2's terms: a template that names one meant V2.
    pub(crate) fn none_on_v1(ctx: &ExecutionContext) -> Result<(), Refusal> {
        for k in ["finality", "max_fee", "amount_is", "destination_caller", "hook_data"] {
            if ctx.node_config.get(k).is_some() {
                return Err(refusal(
                    qtg_core::codes::CCTP_CONFIG_INVALID,
                    format!("config.{k} is a CCTP V2 term; this node is V1 (set cctp_version = 2 for V2)"),
                ));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl EvmCall for Burn {
    /// A burn is always sent by its `burn_caller`, whatever the action is called.
    fn required_signer(&self, ctx: &ExecutionContext) -> Option<qtg_executor::SignerRequirement> {
        Some(qtg_executor::SignerRequirement::burn_caller(&ctx.node_config))
    }

    async fn facts(&self, chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        crate::domains::facts(&self.domains, chains, &[self.from]).await
    }

    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal> {
        let chain = chain_of(ctx, chains)?;
        let (d, version, c) =
            deployment(&self.domains, ctx, chain.spec.chain_id, |c| c.token_messenger, "token messenger")?;
        if config_address(ctx, "token_contract")?.is_none() {
            return Err(refusal(
                qtg_core::codes::CCTP_CONFIG_INVALID,
                "the node's config names no token_contract (the USDC burned)",
            ));
        }
        let decimals = usdc_decimals(ctx)?;
        let (recipient, amount) = intent_of(ctx, decimals)?;
        let to_domain = destination_domain(ctx)?;
        let (input, amount) = match version {
            Version::V1 => {
                Terms::none_on_v1(ctx)?;
                (burn_calldata(amount, to_domain, recipient, d.usdc), amount)
            }
            Version::V2 => {
                let t = Terms::of(ctx, decimals)?;
                let burned = t.amount_is.burned(amount, t.max_fee);
                if t.max_fee >= burned {
                    return Err(refusal(
                        qtg_core::codes::CCTP_CONFIG_INVALID,
                        format!("the fee cap {} is not below the amount burned {burned}", t.max_fee),
                    ));
                }
                let input = if t.hook_data.is_empty() {
                    burn_v2_calldata(burned, to_domain, recipient, d.usdc, t.destination_caller, t.max_fee, t.finality)
                } else {
                    burn_v2_with_hook_calldata(
                        burned,
                        to_domain,
                        recipient,
                        d.usdc,
                        t.destination_caller,
                        t.max_fee,
                        t.finality,
                        t.hook_data.clone(),
                    )
                };
                (input, burned)
            }
        };
        Ok(Action {
            chain,
            to: c.token_messenger,
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
    /// the amount burned. On V2 also: the sender is not denylisted, and the route's fee — the
    /// fee API's minimum for the chosen finality and the messenger's on-chain minimum — is
    /// within the cap sent as `maxFee`; above it, nothing is signed.
    async fn check(&self, ctx: &ExecutionContext, from: Address, a: &Action) -> Result<Option<Refusal>, RpcError> {
        let rpc = &a.chain.rpc;
        let Ok(to_domain) = destination_domain(ctx) else {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_CONFIG_INVALID,
                "the node's config names no destination_domain",
            )));
        };
        let here = self.domains.of_chain(a.chain.spec.chain_id);
        let version = Version::of(&ctx.node_config).unwrap_or(Version::V1);
        if here.map(|d| d.domain) == Some(to_domain)
            || self.domains.get(to_domain).and_then(|d| d.contracts(version)).is_none()
        {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_DESTINATION_DOMAIN_NOT_ALLOWED,
                format!("domain {to_domain} is not another domain of MG_CCTP_DOMAINS with CCTP {version} contracts"),
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
        if version == Version::V2 {
            if let Some(r) = self.check_v2(ctx, from, a, here.map_or(0, |d| d.domain), to_domain).await? {
                return Ok(Some(r));
            }
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

    /// The message the burn sent (the transmitter's `MessageSent`), its hash and, on V1, its
    /// nonce (a V2 message gets its nonce from the attester).
    fn completed(
        &self,
        ctx: &ExecutionContext,
        a: &Action,
        receipt: &Value,
        r: &mut ObserveOutcome,
    ) -> Result<(), String> {
        let d = self.domains.of_chain(a.chain.spec.chain_id).ok_or("the burn's chain has no domain")?;
        let version = Version::of(&ctx.node_config)?;
        let c = d.contracts(version).ok_or("the burn's domain has no contracts of its version")?;
        let transmitter = hex_address(c.message_transmitter);
        let topic = message_sent_topic().to_string();
        // MessageSent has the same topic on V1 and V2: only the version's transmitter counts.
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
        r.provider_refs.insert("message".into(), json!(message.to_string()));
        r.provider_refs.insert("message_hash".into(), json!(keccak256(&message).to_string()));
        r.provider_refs.insert("cctp_version".into(), json!(version.number()));
        r.provider_state = Some("burned".into());
        match version {
            Version::V1 => {
                let m = Message::parse(&message).ok_or("MessageSent carries no CCTP message")?;
                r.provider_refs.insert("message_nonce".into(), json!(m.nonce.to_string()));
                r.provider_refs.insert("source_domain".into(), json!(m.source_domain));
                r.provider_refs.insert("destination_domain".into(), json!(m.destination_domain));
                tracing::info!(
                    source_domain = m.source_domain,
                    destination_domain = m.destination_domain,
                    message_nonce = m.nonce,
                    "burn final; message sent"
                );
            }
            Version::V2 => {
                let m = MessageV2::parse(&message)
                    .filter(|m| m.version == 1)
                    .ok_or("MessageSent carries no CCTP V2 message")?;
                let b = m.burn().ok_or("the V2 message is not a burn")?;
                r.provider_refs.insert("source_domain".into(), json!(m.source_domain));
                r.provider_refs.insert("destination_domain".into(), json!(m.destination_domain));
                r.provider_refs.insert("amount_burned".into(), json!(b.amount.to_string()));
                r.provider_refs.insert("max_fee".into(), json!(b.max_fee.to_string()));
                r.provider_refs.insert("min_finality_threshold".into(), json!(m.min_finality_threshold));
                tracing::info!(
                    source_domain = m.source_domain,
                    destination_domain = m.destination_domain,
                    amount_burned = %b.amount,
                    max_fee = %b.max_fee,
                    min_finality_threshold = m.min_finality_threshold,
                    "V2 burn final; message sent (its nonce comes with the attestation)"
                );
            }
        }
        Ok(())
    }
}

impl Burn {
    /// V2's own preflight: `from` not on the messenger's denylist, and the route's fee within
    /// the cap (`maxFee`). A Fast transfer whose cap is below the Fast fee would silently go
    /// Standard: it is refused instead, as any fee above the cap.
    async fn check_v2(
        &self,
        ctx: &ExecutionContext,
        from: Address,
        a: &Action,
        source: u32,
        destination: u32,
    ) -> Result<Option<Refusal>, RpcError> {
        let rpc = &a.chain.rpc;
        if !call_word(rpc, a.to, is_denylisted_calldata(from)).await?.is_zero() {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_DENYLISTED,
                format!("{from} is on the token messenger {}'s denylist: its burn would revert", a.to),
            )));
        }
        let t = match Terms::of(ctx, a.decimals) {
            Ok(t) => t,
            Err(r) => return Ok(Some(r)),
        };
        // minFee() exists from V2.1; a messenger without it has no on-chain minimum.
        let min_fee = match call_word(rpc, a.to, min_fee_calldata()).await {
            Ok(f) => f,
            Err(RpcError::Node { .. }) => U256::ZERO,
            Err(e) => return Err(e),
        };
        let Some(onchain) = crate::fees::onchain_min_fee(a.amount, min_fee) else {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_FEE_ABOVE_CAP,
                format!("the amount burned {} is too low for the messenger's minimum fee", a.amount),
            )));
        };
        let Some(api) = &self.fees else {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_CONFIG_INVALID,
                "a V2 burn reads its route's fee first: the burn executor's config names no fee_url",
            )));
        };
        let quotes = match api.quotes(source, destination).await {
            Ok(q) => q,
            Err(FeeError::Unavailable(detail)) => {
                return Err(RpcError::Transport { method: "GET /v2/burn/USDC/fees".into(), detail })
            }
            Err(FeeError::Refused(why)) => {
                return Ok(Some(refusal(
                    qtg_core::codes::CCTP_FEE_UNKNOWN,
                    format!("the route from domain {source} to {destination} has no fee qtg can read: {why}"),
                )))
            }
        };
        let Some(quote) = quotes.iter().find(|q| q.finality_threshold == t.finality) else {
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_FEE_UNKNOWN,
                format!(
                    "the fee API quotes no fee for finality {} from domain {source} to {destination}: the route's fee \
                     is unknown",
                    t.finality
                ),
            )));
        };
        let quoted = quote.minimum_fee.of(a.amount);
        let fee = quoted.max(onchain);
        let kind = if t.finality == FINALITY_FAST { "Fast" } else { "Standard" };
        if fee > t.max_fee {
            tracing::warn!(
                source_domain = source, destination_domain = destination, finality = t.finality,
                quoted = %quoted, onchain_minimum = %onchain, cap = %t.max_fee,
                "V2 burn refused: the route's fee is above the cap; nothing signed"
            );
            return Ok(Some(refusal(
                qtg_core::codes::CCTP_FEE_ABOVE_CAP,
                format!(
                    "the {kind} fee for burning {} from domain {source} to {destination} is {fee} (fee API {quoted}, \
                     on-chain minimum {onchain}); the cap is {}",
                    a.amount, t.max_fee
                ),
            )));
        }
        tracing::info!(
            source_domain = source, destination_domain = destination, finality = t.finality,
            fee = %fee, cap = %t.max_fee, amount_burned = %a.amount, "V2 burn: the route's fee is within the cap"
        );
        Ok(None)
    }
}
