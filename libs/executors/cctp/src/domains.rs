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

/// The facts of every domain on its chain that the burn and the mint rely on: the code hash of
/// the token messenger, message transmitter and USDC; USDC's decimals; the messenger's
/// transmitter, token and remote messenger of every other domain; the transmitter's domain
/// and attester. A read the contract refuses (replaced code that reverts) is a fact too
/// (`reverted`); only no answer from the chain fails the read.
pub async fn facts(
    domains: &Domains,
    chains: &qtg_evm::Chains,
) -> Result<Vec<qtg_executor::DriftFact>, qtg_evm::RpcError> {
    use alloy::primitives::{Address, Bytes, U256};
    use qtg_evm::call::{call_word, chain_scope, code_hash, hex_address};
    use qtg_evm::calls::*;
    use qtg_evm::{Rpc, RpcError};
    async fn read(rpc: &Rpc, to: Address, data: Bytes, show: fn(U256) -> String) -> Result<String, RpcError> {
        match call_word(rpc, to, data).await {
            Ok(w) => Ok(show(w)),
            Err(RpcError::Node { .. }) => Ok("reverted".into()),
            Err(e) => Err(e),
        }
    }
    let address = |w: U256| hex_address(Address::from_word(w.into()));
    let number = |w: U256| w.to_string();
    let word = |w: U256| format!("{w:#066x}");
    let mut out = Vec::new();
    for d in domains.iter() {
        let Some(chain) = chains.get(&d.chain_id) else { continue };
        let rpc = &chain.rpc;
        let scope = chain_scope(d.chain_id);
        let mut facts: Vec<(String, String)> = Vec::new();
        for (name, at) in
            [("token_messenger", d.token_messenger), ("message_transmitter", d.message_transmitter), ("usdc", d.usdc)]
        {
            facts.push((format!("cctp.{name}.code_hash"), code_hash(rpc, at).await?));
        }
        facts.push(("cctp.usdc.decimals".into(), read(rpc, d.usdc, qtg_evm::tx::decimals_calldata(), number).await?));
        facts.push((
            "cctp.token_messenger.local_message_transmitter".into(),
            read(rpc, d.token_messenger, local_transmitter_calldata(), address).await?,
        ));
        facts.push((
            "cctp.token_messenger.local_token".into(),
            read(rpc, d.token_messenger, local_token_calldata(), address).await?,
        ));
        for other in domains.iter().filter(|o| o.domain != d.domain) {
            facts.push((
                format!("cctp.token_messenger.remote_token_messenger.{}", other.domain),
                read(rpc, d.token_messenger, remote_messenger_calldata(other.domain), word).await?,
            ));
        }
        facts.push((
            "cctp.message_transmitter.local_domain".into(),
            read(rpc, d.message_transmitter, local_domain_calldata(), number).await?,
        ));
        facts.push((
            "cctp.message_transmitter.attester".into(),
            read(rpc, d.message_transmitter, attester_calldata(), address).await?,
        ));
        out.extend(facts.into_iter().map(|(fact, value)| qtg_executor::DriftFact {
            scope: scope.clone(),
            fact,
            value,
        }));
    }
    Ok(out)
}
