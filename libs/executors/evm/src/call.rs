//! What an EVM executor sends: one transaction per node, described by an [`EvmCall`] — a plain
//! transfer here, a CCTP burn or mint in the `cctp` lane. The executor around it
//! ([`crate::EvmExecutor`]) owns what every call shares: the nonce reservation, fees, the
//! signed-transaction checks, the broadcast, observation, replacement and recovery.

use std::sync::Arc;

use alloy::primitives::{Address, Bytes, U256};
use async_trait::async_trait;
use qtg_core::{ExecutionContext, ObserveOutcome};
use serde_json::{json, Value};

use crate::chains::{Chain, Chains};
use crate::rpc::{Rpc, RpcError};
use crate::tx::{balance_of_calldata, base_units, decimals_calldata, transfer_calldata};

/// Gas of a plain native transfer.
pub const NATIVE_GAS: u64 = 21_000;

/// A refusal before anything is sent: `(error_code, detail)`.
pub type Refusal = (String, String);

pub fn refusal(code: &str, detail: impl Into<String>) -> Refusal {
    (code.to_string(), detail.into())
}

/// The node's transaction, from its approved context.
#[derive(Debug, Clone)]
pub struct Action {
    pub chain: Arc<Chain>,
    pub to: Address,
    pub value: U256,
    pub input: Bytes,
    /// The token moved, or absent for the chain's coin (the payload's `token`).
    pub token: Option<Address>,
    /// Who receives the funds (the payload's `recipient`).
    pub recipient: Address,
    /// Base units moved (the payload's `amount_base_units`).
    pub amount: U256,
    pub decimals: u32,
    /// The gas limit when it is known in advance; else `eth_estimateGas` × 1.2.
    pub gas: Option<u64>,
}

/// A moment of the node's transaction a call may record ([`EvmCall::stage`]).
#[derive(Debug, Clone, Copy)]
pub enum Stage<'a> {
    /// Built: its nonce reserved, nothing signed yet.
    Built(&'a crate::tx::TxPayload),
    /// `hash` (with `nonce`) is about to be broadcast; already recorded on the reservation.
    Broadcasting { nonce: u64, hash: &'a str },
    /// `hash` is final and succeeded; `result` is the COMPLETED answer [`EvmCall::completed`]
    /// filled.
    Completed { hash: &'a str, result: &'a ObserveOutcome },
}

/// One kind of node transaction.
#[async_trait]
pub trait EvmCall: Send + Sync + 'static {
    /// The transaction the node's approved context describes, or why there is none.
    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal>;

    /// Preflight, once the RPC proved to serve the node's chain: `Some` refuses.
    async fn check(&self, ctx: &ExecutionContext, from: Address, a: &Action) -> Result<Option<Refusal>, RpcError>;

    /// The transaction's value, decided as it is built: the action's by default; a CCIP send
    /// paying its fee in the native coin quotes the fee then (and refuses above its cap).
    /// Replacements send the value first broadcast.
    async fn value(&self, _ctx: &ExecutionContext, a: &Action) -> Result<Result<U256, Refusal>, RpcError> {
        Ok(Ok(a.value))
    }

    /// Records a stage of the node's transaction (a CCIP send's intent). An error stops the
    /// step before it takes effect (at `Broadcasting`: nothing is sent) and is retried.
    async fn stage(&self, _ctx: &ExecutionContext, _stage: Stage<'_>) -> Result<(), String> {
        Ok(())
    }

    /// Evidence on chain that the call's effect already happened, whoever caused it (a CCTP
    /// message already received): read before a broadcast, and when the node's own
    /// transaction reverted or its nonce went to another. `Some` is the COMPLETED answer.
    async fn settled(&self, _ctx: &ExecutionContext, _a: &Action) -> Result<Option<ObserveOutcome>, RpcError> {
        Ok(None)
    }

    /// The on-chain facts this call relies on, for verify_drift (none by default).
    async fn facts(&self, _chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        Ok(Vec::new())
    }

    /// The address the node's signer must sign as ([`qtg_executor::Executor::required_signer`]);
    /// by default the rule by action type.
    fn required_signer(&self, ctx: &ExecutionContext) -> Option<qtg_executor::SignerRequirement> {
        ctx.action_type
            .trim()
            .eq_ignore_ascii_case("cctp_burn")
            .then(|| qtg_executor::SignerRequirement::burn_caller(&ctx.node_config))
    }

    /// What the node's own final, successful transaction yields, read from its receipt, added
    /// to the COMPLETED answer (a CCTP burn's message).
    fn completed(
        &self,
        _ctx: &ExecutionContext,
        _a: &Action,
        _receipt: &Value,
        _r: &mut ObserveOutcome,
    ) -> Result<(), String> {
        Ok(())
    }
}

pub fn hex_address(a: Address) -> String {
    format!("{a:#x}")
}

/// `eth_call` of `data` on `to` at the latest block, as a 256-bit word. `0x` (an account
/// without code answers no words) is zero; anything but hex words is the node's fault, an
/// error — never read as a number.
pub async fn call_word(rpc: &Rpc, to: Address, data: Bytes) -> Result<U256, RpcError> {
    let v = rpc.call("eth_call", json!([{"to": hex_address(to), "data": data}, "latest"])).await?;
    let garbage = || RpcError::Transport {
        method: "eth_call".into(),
        detail: format!("not hex words: {}", v.to_string().chars().take(80).collect::<String>()),
    };
    let hex = v.as_str().and_then(|s| s.strip_prefix("0x")).ok_or_else(garbage)?;
    if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(garbage());
    }
    // A call answers whole words; the first is the value of a single return.
    let first = &hex[..hex.len().min(64)];
    if first.is_empty() {
        return Ok(U256::ZERO);
    }
    U256::from_str_radix(first, 16).map_err(|_| garbage())
}

/// The chain the node's config names.
pub fn chain_of(ctx: &ExecutionContext, chains: &Chains) -> Result<Arc<Chain>, Refusal> {
    let id = ctx
        .node_config
        .get("chain_id")
        .and_then(Value::as_u64)
        .ok_or_else(|| refusal(qtg_core::codes::EVM_CHAIN_MISSING, "the node's config names no chain_id"))?;
    chains.get(&id).cloned().ok_or_else(|| {
        refusal(qtg_core::codes::EVM_CHAIN_NOT_CONFIGURED, format!("chain {id} is not in MG_EVM_CHAINS"))
    })
}

/// Node config `decimals` (18 when absent).
pub fn decimals_of(ctx: &ExecutionContext) -> Result<u32, Refusal> {
    match ctx.node_config.get("decimals") {
        None => Ok(18),
        Some(d) => d.as_u64().filter(|d| *d <= 77).map(|d| d as u32).ok_or_else(|| {
            refusal(qtg_core::codes::EVM_CONFIG_INVALID, format!("decimals {d} is not an integer from 0 to 77"))
        }),
    }
}

/// An address in the node's config, if the key is present.
pub fn config_address(ctx: &ExecutionContext, key: &str) -> Result<Option<Address>, Refusal> {
    match ctx.node_config.get(key).and_then(Value::as_str) {
        Some(t) => t
            .parse::<Address>()
            .map(Some)
            .map_err(|_| refusal(qtg_core::codes::EVM_CONFIG_INVALID, format!("{key} {t:?}"))),
        None => Ok(None),
    }
}

/// An address a person wrote for money to go to, read strictly: `0x` and 40 hex digits; when
/// the digits mix cases, they must be the EIP-55 checksum (a typo in a checksummed address is
/// caught, not paid); all-lower and all-upper carry no checksum and are taken as written. The
/// zero address and the precompile / system range (up to `0xffff`) burn or misdirect funds
/// and are refused unless `risk_controls.allowed_destinations` names the address.
pub fn recipient(text: &str, risk_controls: &Value) -> Result<Address, String> {
    let hex = text
        .strip_prefix("0x")
        .filter(|h| h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("{text:?} is not an EVM address (0x followed by 40 hex digits)"))?;
    let address: Address = text.parse().map_err(|_| format!("{text:?} is not an EVM address"))?;
    let mixed = hex.bytes().any(|b| b.is_ascii_lowercase()) && hex.bytes().any(|b| b.is_ascii_uppercase());
    if mixed && address.to_checksum(None) != text {
        return Err(format!(
            "{text:?} mixes upper and lower case but its EIP-55 checksum is wrong (a mistyped address?); \
             write it as {} or all lower case",
            address.to_checksum(None)
        ));
    }
    if address.as_slice()[..18].iter().all(|b| *b == 0) && !allow_listed(risk_controls, address) {
        return Err(format!(
            "{text} is the zero address or a precompile / system address (0x0 to 0xffff): funds sent there are \
             lost; name it in the template's risk_controls.allowed_destinations to allow it"
        ));
    }
    Ok(address)
}

fn allow_listed(risk_controls: &Value, address: Address) -> bool {
    risk_controls
        .get("allowed_destinations")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().filter_map(Value::as_str).any(|a| a.parse::<Address>().ok() == Some(address)))
}

/// The creation-time check of an EVM lane's intent (`Executor::check_intent`): a string
/// destination [`recipient`] accepts.
pub fn check_destination(intent: &Value, risk_controls: &Value) -> Result<(), String> {
    match intent.get("destination") {
        Some(Value::String(d)) => {
            recipient(d, risk_controls).map(|_| ()).map_err(|e| format!("intent.destination {e}"))
        }
        Some(Value::Object(_)) => Err("intent.destination must be an EVM address string (0x followed by 40 hex \
                                       digits), not an object"
            .into()),
        _ => Err("intent.destination must be an EVM address string (0x followed by 40 hex digits)".into()),
    }
}

/// The intent's `destination` (an address, read by [`recipient`]) and `amount` (positive, no
/// finer than `decimals`).
pub fn intent_of(ctx: &ExecutionContext, decimals: u32) -> Result<(Address, U256), Refusal> {
    let text = |k: &str| ctx.intent.get(k).and_then(Value::as_str).map(str::trim).unwrap_or("").to_string();
    let recipient = recipient(&text("destination"), &ctx.risk_controls)
        .map_err(|e| refusal(qtg_core::codes::EVM_INTENT_INVALID, format!("destination {e}")))?;
    let amount = base_units(&text("amount"), decimals).filter(|a| !a.is_zero()).ok_or_else(|| {
        refusal(
            qtg_core::codes::EVM_INTENT_INVALID,
            format!("amount {:?} is not a positive amount with {decimals} decimals", text("amount")),
        )
    })?;
    Ok((recipient, amount))
}

/// The destination is in the plan's `risk_controls.allowed_destinations`, when it has them.
pub fn destination_allowed(ctx: &ExecutionContext, recipient: Address) -> Option<Refusal> {
    let allowed = ctx.risk_controls.get("allowed_destinations").and_then(Value::as_array)?;
    let ok = allowed.iter().filter_map(Value::as_str).any(|a| a.parse::<Address>().ok() == Some(recipient));
    (!ok).then(|| {
        refusal(
            qtg_core::codes::EVM_DESTINATION_NOT_ALLOWED,
            format!("{recipient} is not in risk_controls.allowed_destinations"),
        )
    })
}

/// A token's `decimals()` is the plan's.
pub async fn token_decimals_match(rpc: &Rpc, token: Address, decimals: u32) -> Result<Option<Refusal>, RpcError> {
    let v = rpc.call("eth_call", json!([{"to": hex_address(token), "data": decimals_calldata()}, "latest"])).await?;
    let on_chain = v.as_str().and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok());
    Ok((on_chain != Some(u64::from(decimals))).then(|| {
        refusal(
            qtg_core::codes::EVM_TOKEN_DECIMALS_MISMATCH,
            format!("token {token} reports decimals {on_chain:?}, the plan says {decimals}"),
        )
    }))
}

/// `owner`'s balance of `token` covers `amount`.
pub async fn token_balance_covers(
    rpc: &Rpc,
    token: Address,
    owner: Address,
    amount: U256,
) -> Result<Option<Refusal>, RpcError> {
    let balance = call_word(rpc, token, balance_of_calldata(owner)).await?;
    Ok((balance < amount).then(|| {
        refusal(
            qtg_core::codes::EVM_INSUFFICIENT_BALANCE,
            format!("{owner} holds {balance}, the transfer needs {amount}"),
        )
    }))
}

/// The scope of `chain_id`'s facts.
pub fn chain_scope(chain_id: u64) -> String {
    format!("evm:{chain_id}")
}

/// keccak256 of the code at `address` (`0x` + 64 hex; the hash of no code for an account
/// without code).
pub async fn code_hash(rpc: &Rpc, address: Address) -> Result<String, RpcError> {
    let code = rpc.call("eth_getCode", json!([hex_address(address), "latest"])).await?;
    let bytes: Bytes = code.as_str().unwrap_or("0x").parse().unwrap_or_default();
    Ok(alloy::primitives::keccak256(&bytes).to_string())
}

/// `exec.evm.transfer`: the chain's coin, or an ERC-20 token (`config.token_contract`).
pub struct Transfer;

#[async_trait]
impl EvmCall for Transfer {
    fn action(&self, ctx: &ExecutionContext, chains: &Chains) -> Result<Action, Refusal> {
        let chain = chain_of(ctx, chains)?;
        let token = config_address(ctx, "token_contract")?;
        let decimals = decimals_of(ctx)?;
        let (recipient, amount) = intent_of(ctx, decimals)?;
        let (to, value, input, gas) = match token {
            None => (recipient, amount, Bytes::new(), Some(NATIVE_GAS)),
            Some(token) => (token, U256::ZERO, transfer_calldata(recipient, amount), None),
        };
        Ok(Action { chain, to, value, input, token, recipient, amount, decimals, gas })
    }

    /// Each configured chain answers with its own id.
    async fn facts(&self, chains: &Chains) -> Result<Vec<qtg_executor::DriftFact>, RpcError> {
        let mut out = Vec::new();
        for (id, chain) in chains {
            let served = chain.rpc.quantity("eth_chainId", json!([])).await?;
            out.push(qtg_executor::DriftFact {
                scope: chain_scope(*id),
                fact: "chain_id".into(),
                value: served.to_string(),
            });
        }
        Ok(out)
    }

    /// The destination is allowed by the plan's risk controls, the token's decimals are the
    /// plan's, and the balance covers the amount (gas not counted).
    async fn check(&self, ctx: &ExecutionContext, from: Address, a: &Action) -> Result<Option<Refusal>, RpcError> {
        if let Some(r) = destination_allowed(ctx, a.recipient) {
            return Ok(Some(r));
        }
        let rpc = &a.chain.rpc;
        match a.token {
            None => {
                let balance = U256::from(rpc.quantity("eth_getBalance", json!([hex_address(from), "latest"])).await?);
                Ok((balance < a.amount).then(|| {
                    refusal(
                        qtg_core::codes::EVM_INSUFFICIENT_BALANCE,
                        format!("{from} holds {balance}, the transfer needs {}", a.amount),
                    )
                }))
            }
            Some(token) => {
                if let Some(r) = token_decimals_match(rpc, token, a.decimals).await? {
                    return Ok(Some(r));
                }
                token_balance_covers(rpc, token, from, a.amount).await
            }
        }
    }
}
