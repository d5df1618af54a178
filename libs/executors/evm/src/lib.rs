//! The EVM lane (docs/architecture.md §9.5): native and ERC-20 transfers on the chains of
//! `MG_EVM_CHAINS`, signed only by a signer, with nonces reserved per (chain, address) and
//! owned by the node (`evm_nonce_reservation`), the lane's fence (`fence = sequence`).
//!
//! ```toml
//! [executors."exec.evm.transfer"]
//! transport = "local"
//! impl = "evm"
//! config = { from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266" }
//!
//! [signers."signer.evm.local"]
//! transport = "local"
//! impl = "evm"
//! config = { account = "treasury" }   # key from MG_TREASURY_PRIVATE_KEY (or …_FILE)
//! ```

pub mod call;
pub mod calls;
pub mod ccip_calls;
mod chains;
mod executor;
mod rpc;
mod signer;
pub mod tx;

use std::sync::Arc;

use alloy::primitives::Address;
use qtg_executor::{LaneContext, LaneError, LaneExecutor, LanePlugin, Setting, Signer};
use serde::Deserialize;

pub use call::{Action, EvmCall, Refusal, Stage, Transfer};
pub use chains::{parse as parse_chains, Chain, ChainSpec, Chains};
pub use executor::{EvmExecutor, TransferExecutor};
pub use rpc::{Rpc, RpcError};
pub use signer::LocalSigner;

/// The local signers this lane built, by registry key: a transfer executor asks the node's
/// own signer (when it is one of these) for a fee-bumped replacement — under the same policy —
/// and, in recovery, for a zero-value send that forces the nonce.
/// One map per registry, shared through [`LaneContext::shared`] with the lanes built on this
/// one (the `cctp` lane's burn and mint executors).
pub type LocalSigners = Arc<SignerMap>;
pub type SignerMap = std::sync::RwLock<std::collections::HashMap<String, Arc<LocalSigner>>>;

/// The local signers of the registry `ctx` builds (the same map for every lane that asks).
pub fn local_signers(ctx: &LaneContext<'_>) -> LocalSigners {
    ctx.shared.get::<SignerMap>()
}

pub struct EvmLane {
    pool: sqlx::PgPool,
    chains: Arc<Chains>,
    signers: LocalSigners,
}

/// `MG_EVM_CHAINS` of the lane context (none when unset): the chains of every lane built on
/// this one.
pub fn chains_setting(ctx: &LaneContext<'_>) -> Result<Chains, LaneError> {
    match (ctx.setting)("MG_EVM_CHAINS").filter(|v| !v.trim().is_empty()) {
        Some(text) => chains::parse(&text).map_err(LaneError::Setting),
        None => Ok(Chains::new()),
    }
}

/// The lane's factory (listed in `services/common/src/lanes.rs`): reads `MG_EVM_CHAINS`.
pub fn lane(ctx: &LaneContext<'_>) -> Result<Box<dyn LanePlugin>, LaneError> {
    let chains = chains_setting(ctx)?;
    Ok(Box::new(EvmLane { pool: ctx.pool.clone(), chains: Arc::new(chains), signers: local_signers(ctx) }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutorConfig {
    /// The address the node's signer signs with (nonces are reserved for it).
    from: String,
}

/// `[balances."<venue_key>"]`: the coin and tokens of addresses on one chain.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BalancesConfig {
    chain_id: u64,
    addresses: Vec<String>,
    /// The chain's coin (default "ETH").
    native_asset: Option<String>,
    #[serde(default)]
    tokens: Vec<TokenConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenConfig {
    asset: String,
    contract: String,
    decimals: u32,
}

/// The balances of `addresses` on one chain.
struct EvmBalances {
    chain: Arc<Chain>,
    addresses: Vec<Address>,
    native: String,
    tokens: Vec<(String, Address, u32)>,
}

#[async_trait::async_trait]
impl qtg_executor::BalanceFetcher for EvmBalances {
    async fn fetch(&self) -> Result<Vec<qtg_executor::Balance>, qtg_executor::ExecutorError> {
        let down = |e: RpcError| qtg_executor::ExecutorError::Unavailable(e.to_string());
        let rpc = &self.chain.rpc;
        let mut out = Vec::new();
        for a in &self.addresses {
            let account = call::hex_address(*a);
            let wei = rpc.quantity("eth_getBalance", serde_json::json!([account, "latest"])).await.map_err(down)?;
            let free = tx::format_units(alloy::primitives::U256::from(wei), 18);
            out.push(qtg_executor::Balance {
                account: account.clone(),
                asset: self.native.clone(),
                free,
                locked: "0".into(),
            });
            for (asset, contract, decimals) in &self.tokens {
                let units = call::call_word(rpc, *contract, tx::balance_of_calldata(*a)).await.map_err(down)?;
                let free = tx::format_units(units, *decimals);
                out.push(qtg_executor::Balance {
                    account: account.clone(),
                    asset: asset.clone(),
                    free,
                    locked: "0".into(),
                });
            }
        }
        Ok(out)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignerConfig {
    /// `MG_<ACCOUNT>_PRIVATE_KEY` (or `…_FILE`) holds the key.
    account: String,
}

fn config<T: for<'de> Deserialize<'de>>(key: &str, table: Option<&toml::Table>) -> Result<T, LaneError> {
    let table =
        table.ok_or_else(|| LaneError::Config(format!("the evm lane needs a `config` table for entry {key:?}")))?;
    toml::Value::Table(table.clone()).try_into().map_err(|e| LaneError::Config(format!("config: {e}")))
}

impl LanePlugin for EvmLane {
    fn name(&self) -> &'static str {
        "evm"
    }

    /// A transaction never expires on chain: what fences it is its nonce, once consumed.
    fn fence(&self) -> qtg_executor::Fence {
        qtg_executor::Fence::Sequence
    }

    fn executor(&self, key: &str, table: Option<&toml::Table>, _: Setting<'_>) -> Result<LaneExecutor, LaneError> {
        let c: ExecutorConfig = config(key, table)?;
        let from: Address =
            c.from.parse().map_err(|_| LaneError::Config(format!("config.from {:?} is not an address", c.from)))?;
        if self.chains.is_empty() {
            return Err(LaneError::Setting("MG_EVM_CHAINS names no chain: an evm executor has nowhere to send".into()));
        }
        if key.split('.').nth(2) != Some("transfer") {
            return Err(LaneError::Unsupported(format!(
                "entry {key:?}: the evm lane serves exec.evm.transfer[.<suffix>]"
            )));
        }
        let executor =
            TransferExecutor::new(key, from, self.chains.clone(), self.pool.clone(), self.signers.clone(), Transfer);
        Ok(LaneExecutor::watched(Arc::new(executor)))
    }

    fn balance_fetcher(
        &self,
        venue_key: &str,
        table: Option<&toml::Table>,
        _: Setting<'_>,
    ) -> Result<Arc<dyn qtg_executor::BalanceFetcher>, LaneError> {
        let c: BalancesConfig = config(venue_key, table)?;
        let chain = self
            .chains
            .get(&c.chain_id)
            .cloned()
            .ok_or_else(|| LaneError::Config(format!("config.chain_id {} is not in MG_EVM_CHAINS", c.chain_id)))?;
        let addresses = c
            .addresses
            .iter()
            .map(|a| a.parse::<Address>().map_err(|_| format!("config.addresses: {a:?} is not an address")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(LaneError::Config)?;
        if addresses.is_empty() {
            return Err(LaneError::Config("config.addresses names no address".into()));
        }
        let tokens = c
            .tokens
            .iter()
            .map(|t| {
                let contract = t
                    .contract
                    .parse::<Address>()
                    .map_err(|_| format!("config.tokens: {:?} is not an address", t.contract))?;
                if t.asset.is_empty() || t.decimals > 77 {
                    return Err(format!("config.tokens: {:?} needs an asset name and decimals up to 77", t.contract));
                }
                Ok((t.asset.clone(), contract, t.decimals))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(LaneError::Config)?;
        let native = c.native_asset.unwrap_or_else(|| "ETH".into());
        Ok(Arc::new(EvmBalances { chain, addresses, native, tokens }))
    }

    fn signer(
        &self,
        key: &str,
        table: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<Arc<dyn Signer>, LaneError> {
        let c: SignerConfig = config(key, table)?;
        if c.account.is_empty() || !c.account.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
            return Err(LaneError::Config(format!("config.account {:?}: letters, digits and '_' only", c.account)));
        }
        let var = format!("MG_{}_PRIVATE_KEY", c.account.to_ascii_uppercase());
        let file = format!("{var}_FILE");
        let secret = match setting(&var).filter(|v| !v.is_empty()) {
            Some(v) => v,
            None => match setting(&file).filter(|v| !v.is_empty()) {
                Some(path) => {
                    std::fs::read_to_string(&path).map_err(|e| LaneError::Setting(format!("{file} = {path:?}: {e}")))?
                }
                None => return Err(LaneError::Setting(format!("the signer's key is not set: {var} (or {file})"))),
            },
        };
        let signer = Arc::new(LocalSigner::new(key, &secret).map_err(LaneError::Setting)?);
        self.signers
            .write()
            .map_err(|_| LaneError::Unsupported("the lane's signer map is poisoned".into()))?
            .insert(key.to_string(), signer.clone());
        Ok(signer)
    }
}
