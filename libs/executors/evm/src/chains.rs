//! `MG_EVM_CHAINS`: the chains the lane may use — chain id, RPC URL(s), confirmations, fee
//! caps — as a JSON array:
//!
//! ```json
//! [{"chain_id": 31337, "rpc_urls": ["http://127.0.0.1:8545"], "confirmations": 1,
//!   "max_fee_per_gas_wei": "200000000000", "max_priority_fee_per_gas_wei": "2000000000"}]
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::rpc::Rpc;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSpec {
    pub chain_id: u64,
    #[serde(default)]
    pub name: Option<String>,
    pub rpc_urls: Vec<String>,
    /// Blocks on top of a transaction's block before it counts as final (1 = its own block).
    #[serde(default = "one")]
    pub confirmations: u64,
    /// Cap of `maxFeePerGas`, wei (decimal string).
    pub max_fee_per_gas_wei: String,
    /// Cap of `maxPriorityFeePerGas`, wei (decimal string).
    pub max_priority_fee_per_gas_wei: String,
    /// Deadline of one RPC call (default 5000 ms).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// A broadcast transaction still unmined (dropped, or stuck below the market) after this
    /// long is replaced with the same nonce and fees raised by at least 12.5 %, within the
    /// caps (default 120 s).
    #[serde(default)]
    pub replace_after_seconds: Option<f64>,
}

fn one() -> u64 {
    1
}

/// A configured chain with its client.
#[derive(Debug, Clone)]
pub struct Chain {
    pub spec: ChainSpec,
    pub rpc: Rpc,
    pub max_fee: u128,
    pub max_priority_fee: u128,
}

pub type Chains = BTreeMap<u64, Arc<Chain>>;

/// Parses `MG_EVM_CHAINS`; URLs and caps are checked here, not at the first call.
pub fn parse(text: &str) -> Result<Chains, String> {
    let specs: Vec<ChainSpec> = serde_json::from_str(text).map_err(|e| format!("MG_EVM_CHAINS: {e}"))?;
    let mut out = Chains::new();
    for spec in specs {
        let id = spec.chain_id;
        if spec.rpc_urls.is_empty()
            || spec.rpc_urls.iter().any(|u| !u.starts_with("http://") && !u.starts_with("https://"))
        {
            return Err(format!("MG_EVM_CHAINS: chain {id}: rpc_urls must be http(s) URLs"));
        }
        // Userinfo over plain http would cross the network in the clear (a provider's key).
        if spec.rpc_urls.iter().any(|u| u.starts_with("http://") && qtg_core::urls::has_userinfo(u)) {
            return Err(format!(
                "MG_EVM_CHAINS: chain {id}: an rpc_url carries credentials over plain http: use https"
            ));
        }
        let wei = |what: &str, v: &str| {
            v.parse::<u128>()
                .map_err(|_| format!("MG_EVM_CHAINS: chain {id}: {what} {v:?} is not a decimal number of wei"))
        };
        let max_fee = wei("max_fee_per_gas_wei", &spec.max_fee_per_gas_wei)?;
        let max_priority_fee = wei("max_priority_fee_per_gas_wei", &spec.max_priority_fee_per_gas_wei)?;
        if max_priority_fee > max_fee {
            return Err(format!("MG_EVM_CHAINS: chain {id}: the priority fee cap is above the fee cap"));
        }
        if spec.confirmations == 0 {
            return Err(format!("MG_EVM_CHAINS: chain {id}: confirmations must be at least 1"));
        }
        let rpc = Rpc::new(spec.rpc_urls.clone(), Duration::from_millis(spec.timeout_ms.unwrap_or(5000)))?;
        if out.insert(id, Arc::new(Chain { spec, rpc, max_fee, max_priority_fee })).is_some() {
            return Err(format!("MG_EVM_CHAINS: chain {id} is listed twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_are_checked() {
        let ok = r#"[{"chain_id": 1, "rpc_urls": ["http://127.0.0.1:8545"],
                      "max_fee_per_gas_wei": "100", "max_priority_fee_per_gas_wei": "2"}]"#;
        let c = parse(ok).unwrap();
        assert_eq!(c[&1].spec.confirmations, 1);
        assert!(parse(&ok.replace("\"2\"", "\"200\"")).is_err());
        assert!(parse(&ok.replace("http://", "ws://")).is_err());
        assert!(parse(&ok.replace("chain_id", "chainid")).is_err());
        assert!(parse(&ok.replace("http://", "http://u:key@")).is_err());
        assert!(parse(&ok.replace("http://", "https://u:key@")).is_ok());
    }
}
