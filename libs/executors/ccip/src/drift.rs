//! The on-chain facts the CCIP lane relies on, for drift detection: per configured chain, the
//! Router's code, wrapped native coin and OnRamp for every other configured chain; the OffRamps
//! the Router lists; the code of each OnRamp and OffRamp. A read that reverts is
//! [`qtg_executor::DriftFact::UNREADABLE`] (never a value a baseline could keep quiet).

use alloy::primitives::Address;
use alloy::sol_types::SolCall;
use qtg_evm::call::{chain_scope, code_hash, hex_address};
use qtg_evm::{Rpc, RpcError};
use qtg_executor::DriftFact;

use crate::abi;
use crate::chains::CcipChains;

/// A view's answer as a fact value: reverted reads are unreadable, transport errors propagate.
async fn shown<C: SolCall>(
    rpc: &Rpc,
    to: Address,
    call: C,
    show: impl Fn(C::Return) -> String,
) -> Result<String, RpcError> {
    match abi::view(rpc, to, call).await {
        Ok(v) => Ok(show(v)),
        Err(RpcError::Node { .. }) => Ok(DriftFact::UNREADABLE.to_string()),
        Err(e) => Err(e),
    }
}

pub async fn facts(ccip: &CcipChains, chains: &qtg_evm::Chains) -> Result<Vec<DriftFact>, RpcError> {
    let mut out = Vec::new();
    for c in ccip.iter() {
        let Some(chain) = chains.get(&c.chain_id) else { continue };
        let rpc = &chain.rpc;
        let mut facts: Vec<(String, String)> = Vec::new();
        facts.push(("ccip.router.code_hash".into(), code_hash(rpc, c.router).await?));
        facts.push((
            "ccip.router.type_and_version".into(),
            shown(rpc, c.router, abi::typeAndVersionCall {}, |v| v).await?,
        ));
        facts.push((
            "ccip.router.wrapped_native".into(),
            shown(rpc, c.router, abi::getWrappedNativeCall {}, hex_address).await?,
        ));
        for dest in ccip.iter().filter(|d| d.selector != c.selector) {
            let on_ramp = abi::view(rpc, c.router, abi::getOnRampCall { destChainSelector: dest.selector }).await;
            let (value, ramp) = match on_ramp {
                Ok(a) => (hex_address(a), Some(a).filter(|a| *a != Address::ZERO)),
                Err(RpcError::Node { .. }) => (DriftFact::UNREADABLE.to_string(), None),
                Err(e) => return Err(e),
            };
            facts.push((format!("ccip.router.on_ramp.{}", dest.selector), value));
            if let Some(ramp) = ramp {
                facts.push((format!("ccip.on_ramp.{}.code_hash", dest.selector), code_hash(rpc, ramp).await?));
            }
        }
        match abi::view(rpc, c.router, abi::getOffRampsCall {}).await {
            Ok(ramps) => {
                let mut listed: Vec<String> =
                    ramps.iter().map(|r| format!("{}:{}", r.sourceChainSelector, hex_address(r.offRamp))).collect();
                listed.sort();
                facts.push(("ccip.router.off_ramps".into(), listed.join(",")));
                for r in ramps {
                    facts.push((
                        format!("ccip.off_ramp.{}.{}.code_hash", r.sourceChainSelector, hex_address(r.offRamp)),
                        code_hash(rpc, r.offRamp).await?,
                    ));
                }
            }
            Err(RpcError::Node { .. }) => facts.push(("ccip.router.off_ramps".into(), DriftFact::UNREADABLE.into())),
            Err(e) => return Err(e),
        }
        let scope = chain_scope(c.chain_id);
        out.extend(facts.into_iter().map(|(fact, value)| DriftFact { scope: scope.clone(), fact, value }));
    }
    Ok(out)
}
