//! The CCIP lane (docs/architecture.md §9.7): Chainlink CCIP 1.6 token transfers between EVM
//! chains. `exec.ccip.send` is a transaction of the EVM lane's executor
//! ([`qtg_evm::EvmExecutor`]: its nonces, fees, signer and recovery) calling the source chain's
//! Router `ccipSend`; `exec.ccip.observe` follows the message to its execution on the
//! destination's OffRamp. Chains come from `MG_EVM_CHAINS`, their CCIP deployment (selector,
//! Router, LINK) from `MG_CCIP_CHAINS`.
//!
//! ```toml
//! [executors."exec.ccip.send"]
//! transport = "local"
//! impl = "ccip"
//! config = { from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266" }
//!
//! [executors."exec.ccip.observe"]
//! transport = "local"
//! impl = "ccip"
//! config = { poll_seconds = 60 }
//! ```

pub mod abi;
pub mod chains;
mod drift;
mod observe;
mod send;

use std::sync::Arc;

use alloy::primitives::Address;
use qtg_evm::{Chains, EvmExecutor, LocalSigners};
use qtg_executor::{Fence, LaneContext, LaneError, LaneExecutor, LanePlugin, Setting};
use serde::Deserialize;

pub use chains::{CcipChain, CcipChains};
pub use observe::{DeliveryObserver, ObserveConfig};
pub use send::Send;

/// The lane (`impl = "ccip"`).
pub struct CcipLane {
    pool: sqlx::PgPool,
    chains: Arc<Chains>,
    ccip: Arc<CcipChains>,
    signers: LocalSigners,
}

/// The lane's factory (listed in `services/common/src/lanes.rs`): reads `MG_EVM_CHAINS` and
/// `MG_CCIP_CHAINS`.
pub fn lane(ctx: &LaneContext<'_>) -> Result<Box<dyn LanePlugin>, LaneError> {
    let set = |k: &str| (ctx.setting)(k).filter(|v| !v.trim().is_empty());
    let chains = qtg_evm::chains_setting(ctx)?;
    let ccip = match set("MG_CCIP_CHAINS") {
        Some(text) => CcipChains::parse(&text, &chains).map_err(LaneError::Setting)?,
        None => CcipChains::default(),
    };
    Ok(Box::new(CcipLane {
        pool: ctx.pool.clone(),
        chains: Arc::new(chains),
        ccip: Arc::new(ccip),
        signers: qtg_evm::local_signers(ctx),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SenderConfig {
    /// The address the node's signer signs with (nonces are reserved for it).
    from: String,
}

impl LanePlugin for CcipLane {
    fn name(&self) -> &'static str {
        "ccip"
    }

    /// Sends are transactions: their nonce, once consumed, fences them.
    fn fence(&self) -> Fence {
        Fence::Sequence
    }

    fn executor(&self, key: &str, table: Option<&toml::Table>, _: Setting<'_>) -> Result<LaneExecutor, LaneError> {
        if self.ccip.is_empty() {
            return Err(LaneError::Setting(format!(
                "entry {key:?}: MG_CCIP_CHAINS names no chain: the CCIP lane has no router"
            )));
        }
        let config = |what: &str| {
            table.cloned().ok_or_else(|| LaneError::Config(format!("entry {key:?} needs a `config` table ({what})")))
        };
        match key.split('.').nth(2) {
            Some("send") => {
                let c: SenderConfig = toml::Value::Table(config("from")?)
                    .try_into()
                    .map_err(|e| LaneError::Config(format!("config: {e}")))?;
                let from: Address = c
                    .from
                    .parse()
                    .map_err(|_| LaneError::Config(format!("config.from {:?} is not an address", c.from)))?;
                let call = Send { chains: self.ccip.clone(), evm: self.chains.clone(), pool: self.pool.clone() };
                let (pool, chains, signers) = (self.pool.clone(), self.chains.clone(), self.signers.clone());
                Ok(LaneExecutor::watched(Arc::new(EvmExecutor::new(key, from, chains, pool, signers, call))))
            }
            Some("observe") => {
                let c: ObserveConfig = match table {
                    Some(t) => toml::Value::Table(t.clone())
                        .try_into()
                        .map_err(|e| LaneError::Config(format!("config: {e}")))?,
                    None => ObserveConfig::default(),
                };
                if c.poll_seconds.is_some_and(|s| !(s > 0.0 && s.is_finite())) {
                    return Err(LaneError::Config(format!("entry {key:?}: poll_seconds must be a positive number")));
                }
                let observer = DeliveryObserver {
                    config: c,
                    ccip: self.ccip.clone(),
                    chains: self.chains.clone(),
                    pool: Some(self.pool.clone()),
                };
                Ok(LaneExecutor::new(Arc::new(observer)))
            }
            other => Err(LaneError::Unsupported(format!(
                "entry {key:?}: the ccip lane serves exec.ccip.send and exec.ccip.observe[.<suffix>]; not {other:?}"
            ))),
        }
    }
}
