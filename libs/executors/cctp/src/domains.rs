//! `MG_CCTP_DOMAINS`: where CCTP is deployed on the chains of `MG_EVM_CHAINS` — per domain its
//! chain, token messenger, message transmitter and USDC — as a JSON array:
//!
//! ```json
//! [{"domain": 0, "chain_id": 1, "token_messenger": "0xBd3f…", "message_transmitter": "0x0a99…",
//!   "usdc": "0xA0b8…"}]
//! ```
//!
//! Circle's addresses make the lane talk to the real contracts; nothing else changes.

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Domain {
    pub domain: u32,
    pub chain_id: u64,
    pub token_messenger: Address,
    pub message_transmitter: Address,
    pub usdc: Address,
}

#[derive(Debug, Clone, Default)]
pub struct Domains(BTreeMap<u32, Domain>);

impl Domains {
    /// Parses `MG_CCTP_DOMAINS`; every chain must be one of `chains` (`MG_EVM_CHAINS`).
    pub fn parse(text: &str, chains: &qtg_evm::Chains) -> Result<Domains, String> {
        let list: Vec<Domain> = serde_json::from_str(text).map_err(|e| format!("MG_CCTP_DOMAINS: {e}"))?;
        let mut out = BTreeMap::new();
        for d in list {
            if !chains.contains_key(&d.chain_id) {
                return Err(format!(
                    "MG_CCTP_DOMAINS: domain {}: chain {} is not in MG_EVM_CHAINS",
                    d.domain, d.chain_id
                ));
            }
            if out.values().any(|o: &Domain| o.chain_id == d.chain_id) {
                return Err(format!("MG_CCTP_DOMAINS: chain {} has two domains", d.chain_id));
            }
            let id = d.domain;
            if out.insert(id, d).is_some() {
                return Err(format!("MG_CCTP_DOMAINS: domain {id} is listed twice"));
            }
        }
        Ok(Domains(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, domain: u32) -> Option<&Domain> {
        self.0.get(&domain)
    }

    pub fn of_chain(&self, chain_id: u64) -> Option<&Domain> {
        self.0.values().find(|d| d.chain_id == chain_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Domain> {
        self.0.values()
    }
}

/// EIP-1967's implementation slot (`keccak256("eip1967.proxy.implementation") - 1`) and the
/// one of Circle's USDC proxy (`FiatTokenProxy`, an `AdminUpgradeabilityProxy`:
/// `keccak256("org.zeppelinos.proxy.implementation")`).
const IMPLEMENTATION_SLOTS: [&str; 2] = [
    "0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc",
    "0x7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3",
];

/// The facts of every domain on its chain that the burn and the mint rely on, read through the
/// functions Circle's CCTP contracts have (V1: `TokenMessenger`, `TokenMinter`,
/// `MessageTransmitter` with `Attestable`, `Pausable`, `Ownable2Step`):
/// - the code hash of the token messenger, its local minter, the message transmitter and USDC,
///   and USDC's implementation behind its proxy (an upgrade changes it; `none` when USDC is
///   not a proxy); USDC's decimals;
/// - the messenger's transmitter, minter and the remote messenger of every other domain;
/// - the minter's per-message burn limit for USDC, its token controller and the local token it
///   links to every other domain's USDC;
/// - the transmitter's domain, its enabled attesters (sorted), signature threshold, attester
///   manager, owner, pauser and paused state.
///
/// A read the contract refuses is [`qtg_executor::DriftFact::UNREADABLE`], which verify_drift
/// reports on every check; only no answer from the chain fails the read.
pub async fn facts(
    domains: &Domains,
    chains: &qtg_evm::Chains,
) -> Result<Vec<qtg_executor::DriftFact>, qtg_evm::RpcError> {
    use alloy::primitives::{Bytes, U256};
    use qtg_evm::call::{call_word, chain_scope, code_hash, hex_address};
    use qtg_evm::calls::*;
    use qtg_evm::{Rpc, RpcError};
    const UNREADABLE: &str = qtg_executor::DriftFact::UNREADABLE;
    async fn word(rpc: &Rpc, to: Address, data: Bytes) -> Result<Option<U256>, RpcError> {
        match call_word(rpc, to, data).await {
            Ok(w) => Ok(Some(w)),
            Err(RpcError::Node { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn show(w: Option<U256>, f: fn(U256) -> String) -> String {
        w.map_or_else(|| UNREADABLE.to_string(), f)
    }
    let address = |w: U256| hex_address(Address::from_word(w.into()));
    let number = |w: U256| w.to_string();
    let hex_word = |w: U256| format!("{w:#066x}");
    let flag = |w: U256| (!w.is_zero()).to_string();
    let mut out = Vec::new();
    for d in domains.iter() {
        let Some(chain) = chains.get(&d.chain_id) else { continue };
        let rpc = &chain.rpc;
        let scope = chain_scope(d.chain_id);
        let mut facts: Vec<(String, String)> = Vec::new();
        let (messenger, transmitter, usdc) = (d.token_messenger, d.message_transmitter, d.usdc);
        let minter = word(rpc, messenger, local_minter_calldata()).await?.map(|w| Address::from_word(w.into()));
        for (name, at) in [("token_messenger", messenger), ("message_transmitter", transmitter), ("usdc", usdc)] {
            facts.push((format!("cctp.{name}.code_hash"), code_hash(rpc, at).await?));
        }
        facts.push((
            "cctp.token_minter.code_hash".into(),
            match minter {
                Some(m) => code_hash(rpc, m).await?,
                None => UNREADABLE.into(),
            },
        ));
        let mut implementation = "none".to_string();
        for slot in IMPLEMENTATION_SLOTS {
            let v = rpc.call("eth_getStorageAt", serde_json::json!([hex_address(usdc), slot, "latest"])).await?;
            let w = v.as_str().and_then(|h| U256::from_str_radix(h.trim_start_matches("0x"), 16).ok());
            if let Some(w) = w.filter(|w| !w.is_zero()) {
                implementation = address(w);
                break;
            }
        }
        facts.push(("cctp.usdc.implementation".into(), implementation));
        facts.push((
            "cctp.usdc.decimals".into(),
            show(word(rpc, usdc, qtg_evm::tx::decimals_calldata()).await?, number),
        ));
        facts.push((
            "cctp.token_messenger.local_message_transmitter".into(),
            show(word(rpc, messenger, local_transmitter_calldata()).await?, address),
        ));
        facts.push((
            "cctp.token_messenger.local_minter".into(),
            minter.map_or_else(|| UNREADABLE.to_string(), hex_address),
        ));
        for other in domains.iter().filter(|o| o.domain != d.domain) {
            facts.push((
                format!("cctp.token_messenger.remote_token_messenger.{}", other.domain),
                show(word(rpc, messenger, remote_messenger_calldata(other.domain)).await?, hex_word),
            ));
        }
        if let Some(minter) = minter {
            facts.push((
                "cctp.token_minter.burn_limit_per_message".into(),
                show(word(rpc, minter, burn_limit_calldata(usdc)).await?, number),
            ));
            facts.push((
                "cctp.token_minter.token_controller".into(),
                show(word(rpc, minter, token_controller_calldata()).await?, address),
            ));
            for other in domains.iter().filter(|o| o.domain != d.domain) {
                facts.push((
                    format!("cctp.token_minter.local_token.{}", other.domain),
                    show(word(rpc, minter, local_token_of_calldata(other.domain, other.usdc)).await?, address),
                ));
            }
        }
        facts.push((
            "cctp.message_transmitter.local_domain".into(),
            show(word(rpc, transmitter, local_domain_calldata()).await?, number),
        ));
        facts.push((
            "cctp.message_transmitter.signature_threshold".into(),
            show(word(rpc, transmitter, signature_threshold_calldata()).await?, number),
        ));
        facts.push(("cctp.message_transmitter.attesters".into(), attesters(rpc, transmitter).await?));
        for (name, data, f) in [
            ("attester_manager", attester_manager_calldata(), address as fn(U256) -> String),
            ("owner", owner_calldata(), address),
            ("pauser", pauser_calldata(), address),
            ("paused", paused_calldata(), flag),
        ] {
            facts.push((format!("cctp.message_transmitter.{name}"), show(word(rpc, transmitter, data).await?, f)));
        }
        out.extend(facts.into_iter().map(|(fact, value)| qtg_executor::DriftFact {
            scope: scope.clone(),
            fact,
            value,
        }));
    }
    Ok(out)
}

/// The transmitter's enabled attesters, sorted, comma-separated (`getNumEnabledAttesters`,
/// `getEnabledAttester(i)`); [`qtg_executor::DriftFact::UNREADABLE`] when it refuses a read.
async fn attesters(rpc: &qtg_evm::Rpc, transmitter: Address) -> Result<String, qtg_evm::RpcError> {
    use qtg_evm::call::{call_word, hex_address};
    use qtg_evm::calls::{enabled_attester_calldata, num_enabled_attesters_calldata};
    use qtg_evm::RpcError;
    let unreadable = || qtg_executor::DriftFact::UNREADABLE.to_string();
    let n = match call_word(rpc, transmitter, num_enabled_attesters_calldata()).await {
        Ok(n) => n,
        Err(RpcError::Node { .. }) => return Ok(unreadable()),
        Err(e) => return Err(e),
    };
    // More attesters than any deployment has is not a list to read one by one.
    let Some(n) = u64::try_from(n).ok().filter(|n| *n <= 64) else { return Ok(unreadable()) };
    let mut list = Vec::new();
    for i in 0..n {
        match call_word(rpc, transmitter, enabled_attester_calldata(i)).await {
            Ok(w) => list.push(hex_address(Address::from_word(w.into()))),
            Err(RpcError::Node { .. }) => return Ok(unreadable()),
            Err(e) => return Err(e),
        }
    }
    list.sort();
    Ok(list.join(","))
}
