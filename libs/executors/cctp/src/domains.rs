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
