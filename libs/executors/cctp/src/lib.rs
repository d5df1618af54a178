//! The CCTP lane (docs/architecture.md §9.6): Circle's burn → attestation → mint across two
//! EVM chains. `exec.cctp.burn` and `exec.cctp.mint` are transactions of the EVM lane's
//! executor ([`qtg_evm::EvmExecutor`]: its nonces, fees, signer and recovery) over the
//! contracts `MG_CCTP_DOMAINS` names; `exec.cctp.attestation` polls the attestation service
//! between them.
//!
//! ```toml
//! [executors."exec.cctp.burn"]
//! transport = "local"
//! impl = "cctp"
//! config = { from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266" }
//!
//! [executors."exec.cctp.attestation"]
//! transport = "local"
//! impl = "cctp"
//! config = { attestation_url = "https://iris-api.circle.com", source_domain = 0 }
//!
//! [executors."exec.cctp.mint"]
//! transport = "local"
//! impl = "cctp"
//! config = { from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266" }
//! ```

mod attestation;
mod burn;
pub mod domains;
pub mod fees;
mod mint;

use std::sync::Arc;

use alloy::primitives::Address;
use qtg_evm::{Chains, EvmExecutor, LocalSigners};
use qtg_executor::{Fence, LaneContext, LaneError, LaneExecutor, LanePlugin, Setting};
use serde::Deserialize;

pub use attestation::{AttestationConfig, AttestationObserver};
pub use burn::Burn;
pub use domains::{Contracts, Domain, Domains, Version};
pub use fees::FeeApi;
pub use mint::Mint;

/// An HTTP client for one of Circle's services at `url` (the attestation service, the fee
/// API): https, plain http only to loopback or when `insecure`; no proxy, no redirects.
pub(crate) fn service_client(
    what: &str,
    url: &str,
    insecure: bool,
    timeout_ms: Option<u64>,
) -> Result<reqwest::Client, String> {
    let loopback = ["http://127.", "http://localhost", "http://[::1]"].iter().any(|p| url.starts_with(p));
    if !url.starts_with("https://") && !(url.starts_with("http://") && (loopback || insecure)) {
        return Err(format!("{what} {url:?}: use https (plain http only to loopback, or insecure = true)"));
    }
    qtg_executor::remote::install_tls_provider();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_millis(timeout_ms.unwrap_or(5000)))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// The lane (`impl = "cctp"`).
pub struct CctpLane {
    pool: sqlx::PgPool,
    chains: Arc<Chains>,
    domains: Arc<Domains>,
    signers: LocalSigners,
}

/// The lane's factory (listed in `services/common/src/lanes.rs`): reads `MG_EVM_CHAINS` and
/// `MG_CCTP_DOMAINS`.
pub fn lane(ctx: &LaneContext<'_>) -> Result<Box<dyn LanePlugin>, LaneError> {
    let set = |k: &str| (ctx.setting)(k).filter(|v| !v.trim().is_empty());
    let chains = qtg_evm::chains_setting(ctx)?;
    let domains = match set("MG_CCTP_DOMAINS") {
        Some(text) => Domains::parse(&text, &chains).map_err(LaneError::Setting)?,
        None => Domains::default(),
    };
    Ok(Box::new(CctpLane {
        pool: ctx.pool.clone(),
        chains: Arc::new(chains),
        domains: Arc::new(domains),
        signers: qtg_evm::local_signers(ctx),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SenderConfig {
    /// The address the node's signer signs with (nonces are reserved for it).
    from: String,
    /// A burn's fee API (Circle's `https://iris-api.circle.com`): V2 burns read their route's
    /// fee there before signing.
    fee_url: Option<String>,
    /// Deadline of one fee request (default 5000 ms).
    timeout_ms: Option<u64>,
    /// `true` allows plain `http://` to a fee API that is not loopback.
    insecure: Option<bool>,
}

impl CctpLane {
    pub fn domains(&self) -> &Domains {
        &self.domains
    }

    fn sender(&self, key: &str, table: Option<&toml::Table>) -> Result<(Address, SenderConfig), LaneError> {
        let table = table.ok_or_else(|| LaneError::Config(format!("entry {key:?} needs a `config` table (from)")))?;
        let c: SenderConfig =
            toml::Value::Table(table.clone()).try_into().map_err(|e| LaneError::Config(format!("config: {e}")))?;
        if self.domains.is_empty() {
            return Err(LaneError::Setting(format!(
                "entry {key:?}: MG_CCTP_DOMAINS names no domain: a burn or mint has no contract"
            )));
        }
        let from =
            c.from.parse().map_err(|_| LaneError::Config(format!("config.from {:?} is not an address", c.from)))?;
        Ok((from, c))
    }
}

impl LanePlugin for CctpLane {
    fn name(&self) -> &'static str {
        "cctp"
    }

    /// Burns and mints are transactions: their nonce, once consumed, fences them.
    fn fence(&self) -> Fence {
        Fence::Sequence
    }

    fn executor(&self, key: &str, table: Option<&toml::Table>, _: Setting<'_>) -> Result<LaneExecutor, LaneError> {
        let (pool, chains, signers) = (self.pool.clone(), self.chains.clone(), self.signers.clone());
        match key.split('.').nth(2) {
            Some("burn") => {
                let (from, c) = self.sender(key, table)?;
                let fees = c
                    .fee_url
                    .as_deref()
                    .map(|url| FeeApi::new(url, c.insecure == Some(true), c.timeout_ms))
                    .transpose()
                    .map_err(LaneError::Config)?;
                let call = Burn { domains: self.domains.clone(), from, fees };
                Ok(LaneExecutor::watched(Arc::new(EvmExecutor::new(key, from, chains, pool, signers, call))))
            }
            Some("mint") => {
                let (from, c) = self.sender(key, table)?;
                if c.fee_url.is_some() || c.timeout_ms.is_some() || c.insecure.is_some() {
                    return Err(LaneError::Config(format!(
                        "entry {key:?}: fee_url, timeout_ms and insecure are a burn's settings; a mint has only from"
                    )));
                }
                let call = Mint { domains: self.domains.clone(), from, pool: self.pool.clone() };
                Ok(LaneExecutor::watched(Arc::new(EvmExecutor::new(key, from, chains, pool, signers, call))))
            }
            Some("attestation") => {
                let table = table.ok_or_else(|| {
                    LaneError::Config(format!("entry {key:?} needs a `config` table (attestation_url, source_domain)"))
                })?;
                let config: AttestationConfig = toml::Value::Table(table.clone())
                    .try_into()
                    .map_err(|e| LaneError::Config(format!("config: {e}")))?;
                let observer = AttestationObserver::new(config)
                    .map_err(LaneError::Config)?
                    .with_destinations(self.domains.clone(), self.chains.clone())
                    .with_store(self.pool.clone());
                Ok(LaneExecutor::new(Arc::new(observer)))
            }
            other => Err(LaneError::Unsupported(format!(
                "entry {key:?}: the cctp lane serves exec.cctp.burn, exec.cctp.attestation and \
                 exec.cctp.mint[.<suffix>]; not {other:?}"
            ))),
        }
    }
}
