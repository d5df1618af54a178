//! `MG_CCIP_CHAINS`: the CCIP deployment of each chain of `MG_EVM_CHAINS` the lane uses — its
//! CCIP chain selector, its Router, its LINK, and the tokens the lane sends from it (their pools
//! are watched for drift). Everything else (the OnRamp for a destination,
//! the OffRamps for a source, the token pools) the lane reads from the Router on chain, and
//! `ccip_drift` watches.
//!
//! ```json
//! [{"chain_id": 31337, "selector": "7759470850252068959", "router": "0x…", "link": "0x…",
//!   "tokens": ["0x…"]},
//!  {"chain_id": 31338, "selector": "3379446385462418246", "router": "0x…"}]
//! ```

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::Deserialize;
use serde_json::Value;

/// One chain's CCIP deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct CcipChain {
    pub chain_id: u64,
    /// Chainlink's chain selector (a uint64 of the chain-selectors registry, not the chain id).
    pub selector: u64,
    pub router: Address,
    /// The chain's LINK: the one fee token besides the native coin a template may pay in.
    pub link: Option<Address>,
    /// The tokens the lane sends from this chain: their pools are drift facts.
    pub tokens: Vec<Address>,
}

/// Every configured chain, by chain id.
#[derive(Debug, Clone, Default)]
pub struct CcipChains(BTreeMap<u64, CcipChain>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    chain_id: u64,
    selector: Value,
    router: String,
    link: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
}

/// A uint64 written as a JSON number or a decimal string (selectors exceed 2^53: a string keeps
/// them exact for every JSON reader).
pub fn uint64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl CcipChains {
    /// Reads `MG_CCIP_CHAINS`; every chain must be one of `evm_chains` (`MG_EVM_CHAINS`: the lane
    /// sends and reads through the EVM lane's RPCs). Selectors and chain ids are unique.
    pub fn parse(text: &str, evm_chains: &qtg_evm::Chains) -> Result<CcipChains, String> {
        let entries: Vec<Entry> = serde_json::from_str(text).map_err(|e| format!("MG_CCIP_CHAINS: {e}"))?;
        let mut out = BTreeMap::new();
        let mut selectors = std::collections::BTreeSet::new();
        for e in entries {
            let at = format!("MG_CCIP_CHAINS chain {}", e.chain_id);
            let selector = uint64(&e.selector)
                .filter(|s| *s != 0)
                .ok_or_else(|| format!("{at}: selector {} is not a non-zero uint64", e.selector))?;
            let router: Address =
                e.router.trim().parse().map_err(|_| format!("{at}: router {:?} is not an address", e.router))?;
            if router == Address::ZERO {
                return Err(format!("{at}: router is the zero address"));
            }
            let link = e
                .link
                .as_deref()
                .map(|l| l.trim().parse::<Address>().map_err(|_| format!("{at}: link {l:?} is not an address")))
                .transpose()?;
            if !evm_chains.contains_key(&e.chain_id) {
                return Err(format!(
                    "{at} is not in MG_EVM_CHAINS: the lane reaches chains through the EVM lane's RPCs"
                ));
            }
            if !selectors.insert(selector) {
                return Err(format!("{at}: selector {selector} is given twice"));
            }
            let tokens = e
                .tokens
                .iter()
                .map(|t| t.trim().parse::<Address>().map_err(|_| format!("{at}: token {t:?} is not an address")))
                .collect::<Result<Vec<_>, _>>()?;
            let chain = CcipChain { chain_id: e.chain_id, selector, router, link, tokens };
            if out.insert(e.chain_id, chain).is_some() {
                return Err(format!("{at} is given twice"));
            }
        }
        Ok(CcipChains(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn of_chain(&self, chain_id: u64) -> Option<&CcipChain> {
        self.0.get(&chain_id)
    }

    pub fn of_selector(&self, selector: u64) -> Option<&CcipChain> {
        self.0.values().find(|c| c.selector == selector)
    }

    pub fn iter(&self) -> impl Iterator<Item = &CcipChain> {
        self.0.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evm() -> qtg_evm::Chains {
        let chain = |id: u64| {
            serde_json::json!({"chain_id": id, "rpc_urls": [format!("http://127.0.0.1:{id}")],
                "max_fee_per_gas_wei": "100", "max_priority_fee_per_gas_wei": "1"})
        };
        qtg_evm::parse_chains(&serde_json::json!([chain(1), chain(2)]).to_string()).unwrap()
    }

    #[test]
    fn selectors_read_exactly_from_strings_and_numbers() {
        let (a, b) = ("0x00000000000000000000000000000000000000aa", "0x00000000000000000000000000000000000000bb");
        let text = serde_json::json!([
            {"chain_id": 1, "selector": "7759470850252068959", "router": a},
            {"chain_id": 2, "selector": 3379446385462418246u64, "router": b},
        ]);
        let c = CcipChains::parse(&text.to_string(), &evm()).unwrap();
        assert_eq!(c.of_chain(1).unwrap().selector, 7759470850252068959);
        assert_eq!(c.of_selector(3379446385462418246).unwrap().chain_id, 2);
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        let r = "0x00000000000000000000000000000000000000aa";
        for (text, why) in [
            (format!(r#"[{{"chain_id": 9, "selector": "1", "router": "{r}"}}]"#), "not in MG_EVM_CHAINS"),
            (format!(r#"[{{"chain_id": 1, "selector": "0", "router": "{r}"}}]"#), "non-zero uint64"),
            (format!(r#"[{{"chain_id": 1, "selector": "x", "router": "{r}"}}]"#), "non-zero uint64"),
            (r#"[{"chain_id": 1, "selector": "1", "router": "nope"}]"#.to_string(), "not an address"),
            (
                format!(
                    r#"[{{"chain_id": 1, "selector": "5", "router": "{r}"}},
                        {{"chain_id": 2, "selector": "5", "router": "{r}"}}]"#
                ),
                "given twice",
            ),
            (format!(r#"[{{"chain_id": 1, "selector": "1", "router": "{r}", "extra": 1}}]"#), "unknown field"),
        ] {
            let e = CcipChains::parse(&text, &evm()).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
