//! The on-chain facts the CCIP lane relies on, for drift detection (`verify_drift`, and
//! `ccip_drift` on its own pace), in a scope of their own per chain (`ccip:<chain id>`, apart
//! from the other lanes' `evm:<chain id>`): the Router's code, version and wrapped native coin; per
//! other configured chain its OnRamp (code, fee quoter, token admin registry) and the OffRamps
//! the Router lists for it (code, router, onRamp, enabled); the chain's LINK; each of the lane's
//! tokens (`MG_CCIP_CHAINS` `tokens`), its pool (code, chains), and per configured remote chain
//! the pool's remote pools and token
//! and its outbound and inbound rate limits (enabled, capacity, rate — never the bucket's level,
//! which moves with every transfer). A read that reverts is
//! [`qtg_executor::DriftFact::UNREADABLE`] (never a value a baseline could keep quiet).

use alloy::primitives::Address;
use alloy::sol_types::SolCall;
use qtg_evm::call::{code_hash, hex_address};
use qtg_evm::{Rpc, RpcError};
use qtg_executor::DriftFact;

use crate::abi;
use crate::chains::CcipChains;

/// The drift scope of chain `chain_id`'s CCIP facts.
pub fn scope(chain_id: u64) -> String {
    format!("ccip:{chain_id}")
}

/// A view's answer, or `None` when it reverted; transport errors propagate.
async fn read<C: SolCall>(rpc: &Rpc, to: Address, call: C) -> Result<Option<C::Return>, RpcError> {
    match abi::view(rpc, to, call).await {
        Ok(v) => Ok(Some(v)),
        Err(RpcError::Node { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn shown<T>(v: Option<T>, show: impl FnOnce(T) -> String) -> String {
    v.map(show).unwrap_or_else(|| DriftFact::UNREADABLE.to_string())
}

fn bucket(b: &abi::TokenBucket) -> String {
    format!("enabled={} capacity={} rate={}", b.isEnabled, b.capacity, b.rate)
}

pub async fn facts(ccip: &CcipChains, chains: &qtg_evm::Chains) -> Result<Vec<DriftFact>, RpcError> {
    let mut out = Vec::new();
    for c in ccip.iter() {
        let Some(chain) = chains.get(&c.chain_id) else { continue };
        let rpc = &chain.rpc;
        let mut facts: Vec<(String, String)> = Vec::new();
        facts.push(("router.code_hash".into(), code_hash(rpc, c.router).await?));
        facts.push((
            "router.type_and_version".into(),
            shown(read(rpc, c.router, abi::typeAndVersionCall {}).await?, |v| v),
        ));
        facts.push((
            "router.wrapped_native".into(),
            shown(read(rpc, c.router, abi::getWrappedNativeCall {}).await?, hex_address),
        ));
        if let Some(link) = c.link {
            facts.push(("link.code_hash".into(), code_hash(rpc, link).await?));
        }
        let mut registries = std::collections::BTreeSet::new();
        for dest in ccip.iter().filter(|d| d.selector != c.selector) {
            let sel = dest.selector;
            let on_ramp = read(rpc, c.router, abi::getOnRampCall { destChainSelector: sel }).await?;
            facts.push((format!("router.on_ramp.{sel}"), shown(on_ramp, hex_address)));
            let Some(ramp) = on_ramp.filter(|a| *a != Address::ZERO) else { continue };
            facts.push((format!("on_ramp.{sel}.code_hash"), code_hash(rpc, ramp).await?));
            let fixed = read(rpc, ramp, abi::getStaticConfigCall {}).await?;
            facts.push((
                format!("on_ramp.{sel}.token_admin_registry"),
                shown(fixed.as_ref(), |s| hex_address(s.tokenAdminRegistry)),
            ));
            if let Some(s) = fixed {
                registries.insert(s.tokenAdminRegistry);
            }
            let dynamic = read(rpc, ramp, abi::getDynamicConfigCall {}).await?;
            facts.push((format!("on_ramp.{sel}.fee_quoter"), shown(dynamic, |d| hex_address(d.feeQuoter))));
        }
        match read(rpc, c.router, abi::getOffRampsCall {}).await? {
            Some(ramps) => {
                let mut listed: Vec<String> =
                    ramps.iter().map(|r| format!("{}:{}", r.sourceChainSelector, hex_address(r.offRamp))).collect();
                listed.sort();
                facts.push(("router.off_ramps".into(), listed.join(",")));
                for r in ramps {
                    let at = format!("off_ramp.{}.{}", r.sourceChainSelector, hex_address(r.offRamp));
                    facts.push((format!("{at}.code_hash"), code_hash(rpc, r.offRamp).await?));
                    let config = read(
                        rpc,
                        r.offRamp,
                        abi::getSourceChainConfigCall { sourceChainSelector: r.sourceChainSelector },
                    )
                    .await?;
                    facts.push((
                        format!("{at}.source"),
                        shown(config, |s| {
                            format!("router={} enabled={} on_ramp={}", hex_address(s.router), s.isEnabled, s.onRamp)
                        }),
                    ));
                }
            }
            None => facts.push(("router.off_ramps".into(), DriftFact::UNREADABLE.into())),
        }
        // The lane's own tokens (MG_CCIP_CHAINS `tokens`), never the whole registry: anyone may
        // register a token, which is no drift of this lane.
        for registry in registries {
            for &token in &c.tokens {
                let at = format!("token.{}", hex_address(token));
                let pool = read(rpc, registry, abi::getPoolCall { token }).await?;
                facts.push((format!("{at}.pool"), shown(pool, hex_address)));
                let Some(pool) = pool.filter(|p| *p != Address::ZERO) else { continue };
                facts.push((format!("{at}.pool.code_hash"), code_hash(rpc, pool).await?));
                let Some(remotes) = read(rpc, pool, abi::getSupportedChainsCall {}).await? else {
                    facts.push((format!("{at}.pool.chains"), DriftFact::UNREADABLE.into()));
                    continue;
                };
                facts.push((
                    format!("{at}.pool.chains"),
                    remotes.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
                ));
                // The remote chains the lane uses (configured ones), not every chain the pool serves.
                for r in remotes.into_iter().filter(|r| ccip.of_selector(*r).is_some()) {
                    let pools = read(rpc, pool, abi::getRemotePoolsCall { remoteChainSelector: r }).await?;
                    facts.push((
                        format!("{at}.pool.{r}.remote_pools"),
                        shown(pools, |p| p.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(",")),
                    ));
                    let token = read(rpc, pool, abi::getRemoteTokenCall { remoteChainSelector: r }).await?;
                    facts.push((format!("{at}.pool.{r}.remote_token"), shown(token, |t| t.to_string())));
                    let outbound =
                        read(rpc, pool, abi::getCurrentOutboundRateLimiterStateCall { remoteChainSelector: r }).await?;
                    facts.push((format!("{at}.pool.{r}.outbound_rate_limit"), shown(outbound.as_ref(), bucket)));
                    let inbound =
                        read(rpc, pool, abi::getCurrentInboundRateLimiterStateCall { remoteChainSelector: r }).await?;
                    facts.push((format!("{at}.pool.{r}.inbound_rate_limit"), shown(inbound.as_ref(), bucket)));
                }
            }
        }
        let scope = scope(c.chain_id);
        out.extend(facts.into_iter().map(|(fact, value)| DriftFact { scope: scope.clone(), fact, value }));
    }
    Ok(out)
}
