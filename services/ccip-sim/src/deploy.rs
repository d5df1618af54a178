//! `qtg-ccip-sim deploy`: the lane A → B as Chainlink deploys one (docs/architecture.md §9.7):
//! on A a Router over an RMNProxy → RMNRemote, a FeeQuoter (LINK and the wrapped native coin as
//! fee tokens, their prices, B's gas price), a NonceManager, an OnRamp for B, and a BurnMint pool
//! of A's token registered in A's TokenAdminRegistry; on B the same registry and pool for B's
//! token, an OffRamp for A (its OCR configuration: commit signed by F+1 of 3F+1 signers, execute
//! by one transmitter) and two receivers (one that reverts). The pools know each other.

use std::path::PathBuf;

use alloy::primitives::{aliases::U224, keccak256, Address, FixedBytes, U256};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolValue};
use clap::Args;
use serde_json::json;

use crate::abi::*;
use crate::{artifact, Chain};

/// anvil's tenth account: deploys and owns the lane.
const DEPLOYER: &str = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720";
/// anvil's ninth account: the OffRamp's transmitter (commit and execute).
const TRANSMITTER: &str = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f";
/// anvil's first account: holds the tokens and LINK (qtg's sender in the tests and demo).
const HOLDER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
/// The chain-selectors registry's `anvil-devnet` and `geth-testnet`.
const SELECTOR_A: u64 = 7759470850252068959;
const SELECTOR_B: u64 = 3379446385462418246;
/// `Internal.CHAIN_FAMILY_SELECTOR_EVM`.
const EVM_FAMILY: [u8; 4] = [0x28, 0x12, 0xd5, 0x2c];
const E18: u128 = 1_000_000_000_000_000_000;

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// Chain A's RPC (the source).
    #[arg(long)]
    source: String,
    /// Chain B's RPC (the destination).
    #[arg(long)]
    destination: String,
    /// The unpacked `@chainlink/contracts-ccip` package (its `bytecode/`).
    #[arg(long, default_value = ".qtg/evm/ccip/package")]
    artifacts: PathBuf,
    /// Where the lane's JSON is written.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = SELECTOR_A)]
    source_selector: u64,
    #[arg(long, default_value_t = SELECTOR_B)]
    destination_selector: u64,
    /// Who receives A's token supply and LINK.
    #[arg(long, default_value = HOLDER)]
    holder: Address,
    /// Whole tokens minted to the holder on A (and LINK).
    #[arg(long, default_value_t = 1_000_000)]
    supply: u64,
    #[arg(long, default_value_t = 18)]
    source_decimals: u8,
    #[arg(long, default_value_t = 18)]
    destination_decimals: u8,
    /// Have the holder approve A's router for all of its token and LINK (qtg itself never sends
    /// `approve`).
    #[arg(long)]
    approve: bool,
    /// The OffRamp's `permissionLessExecutionThresholdSeconds` (when anyone may execute).
    #[arg(long, default_value_t = 3600)]
    permissionless_execution_seconds: u32,
}

/// The OCR signer keys of the stand-in (test keys, derived from fixed seeds).
pub fn ocr_signers() -> Vec<PrivateKeySigner> {
    (0..4u8)
        .map(|i| {
            let key = keccak256(format!("qtg-ccip-sim ocr signer {i}"));
            PrivateKeySigner::from_bytes(&key).expect("a hash is a valid key with overwhelming probability")
        })
        .collect()
}

pub fn commit_digest() -> FixedBytes<32> {
    keccak256("qtg-ccip-sim commit")
}

pub fn exec_digest() -> FixedBytes<32> {
    keccak256("qtg-ccip-sim execute")
}

fn encoded(a: Address) -> alloy::primitives::Bytes {
    qtg_ccip::abi::encoded(a)
}

fn disabled() -> RateLimiterConfig {
    RateLimiterConfig { isEnabled: false, capacity: 0, rate: 0 }
}

struct Side {
    wrapped_native: Address,
    link: Address,
    rmn_remote: Address,
    rmn_proxy: Address,
    registry: Address,
    router: Address,
    nonce_manager: Address,
    token: Address,
    pool: Address,
}

async fn common(
    chain: &Chain,
    dir: &std::path::Path,
    selector: u64,
    holder: Address,
    supply: U256,
    decimals: u8,
    symbol: &str,
) -> anyhow::Result<Side> {
    let d: Address = DEPLOYER.parse()?;
    let erc20 = artifact(dir, "v1_6_2", "factory_burn_mint_erc20")?;
    let wrapped_native = chain
        .deploy(d, "QtgWrappedNative", include_str!("../../../contracts/QtgCcip_sol_QtgWrappedNative.bin"), vec![])
        .await?;
    let link = chain
        .deploy(
            d,
            "LINK",
            &erc20,
            constructor_args(tokenConstructorCall {
                name: "ChainLink Token".into(),
                symbol: "LINK".into(),
                decimals_: 18,
                maxSupply_: U256::ZERO,
                preMint: U256::from(1_000_000u64) * U256::from(E18),
                newOwner: holder,
            }),
        )
        .await?;
    let rmn_remote = chain
        .deploy(d, "RMNRemote", &artifact(dir, "v1_6_0", "rmn_remote")?, (selector, Address::ZERO).abi_encode_params())
        .await?;
    let rmn_proxy = chain
        .deploy(d, "RMNProxy", &artifact(dir, "v1_0_0", "rmn_proxy_contract")?, (rmn_remote,).abi_encode_params())
        .await?;
    let registry =
        chain.deploy(d, "TokenAdminRegistry", &artifact(dir, "v1_5_0", "token_admin_registry")?, vec![]).await?;
    let router = chain
        .deploy(d, "Router", &artifact(dir, "v1_2_0", "router")?, (wrapped_native, rmn_proxy).abi_encode_params())
        .await?;
    let nonce_manager = chain
        .deploy(
            d,
            "NonceManager",
            &artifact(dir, "v1_6_0", "nonce_manager")?,
            (Vec::<Address>::new(),).abi_encode_params(),
        )
        .await?;
    let token = chain
        .deploy(
            d,
            symbol,
            &erc20,
            constructor_args(tokenConstructorCall {
                name: symbol.into(),
                symbol: symbol.into(),
                decimals_: decimals,
                maxSupply_: U256::ZERO,
                preMint: supply,
                newOwner: holder,
            }),
        )
        .await?;
    let pool = chain
        .deploy(
            d,
            "BurnMintTokenPool",
            &artifact(dir, "v1_6_1", "burn_mint_token_pool")?,
            constructor_args(poolConstructorCall {
                token,
                localTokenDecimals: decimals,
                allowlist: vec![],
                rmnProxy: rmn_proxy,
                router,
            }),
        )
        .await?;
    chain.call(d, token, grantMintAndBurnRolesCall { burnAndMinter: pool }.abi_encode().into()).await?;
    chain
        .call(d, registry, proposeAdministratorCall { localToken: token, administrator: d }.abi_encode().into())
        .await?;
    chain.call(d, registry, acceptAdminRoleCall { localToken: token }.abi_encode().into()).await?;
    chain.call(d, registry, setPoolCall { localToken: token, pool }.abi_encode().into()).await?;
    Ok(Side { wrapped_native, link, rmn_remote, rmn_proxy, registry, router, nonce_manager, token, pool })
}

pub async fn run(a: DeployArgs) -> anyhow::Result<()> {
    let d: Address = DEPLOYER.parse()?;
    let transmitter: Address = TRANSMITTER.parse()?;
    let (ca, cb) = (Chain::connect(&a.source).await?, Chain::connect(&a.destination).await?);
    anyhow::ensure!(ca.chain_id != cb.chain_id, "the two chains have the same chain id {}", ca.chain_id);
    let dir = a.artifacts.as_path();
    let units = |decimals: u8| U256::from(a.supply) * U256::from(10u64).pow(U256::from(decimals));
    let (sa, sb) = (a.source_selector, a.destination_selector);
    let side_a = common(&ca, dir, sa, a.holder, units(a.source_decimals), a.source_decimals, "QCA").await?;
    let side_b = common(&cb, dir, sb, a.holder, units(a.destination_decimals), a.destination_decimals, "QCB").await?;

    // A: the FeeQuoter, its prices, the OnRamp for B and the Router's ramp.
    let dest_config = DestChainConfig {
        isEnabled: true,
        maxNumberOfTokensPerMsg: 1,
        maxDataBytes: 30_000,
        maxPerMsgGasLimit: 3_000_000,
        destGasOverhead: 300_000,
        destGasPerPayloadByteBase: 16,
        destGasPerPayloadByteHigh: 40,
        destGasPerPayloadByteThreshold: 3000,
        destDataAvailabilityOverheadGas: 0,
        destGasPerDataAvailabilityByte: 16,
        destDataAvailabilityMultiplierBps: 0,
        chainFamilySelector: EVM_FAMILY.into(),
        enforceOutOfOrder: false,
        defaultTokenFeeUSDCents: 25,
        defaultTokenDestGasOverhead: 90_000,
        defaultTxGasLimit: 200_000,
        gasMultiplierWeiPerEth: 1_100_000_000_000_000_000,
        gasPriceStalenessThreshold: 0,
        networkFeeUSDCents: 10,
    };
    let fee_quoter = ca
        .deploy(
            d,
            "FeeQuoter",
            &artifact(dir, "v1_6_3", "fee_quoter")?,
            (
                FqStaticConfig {
                    maxFeeJuelsPerMsg: alloy::primitives::aliases::U96::from(10u128.pow(27)),
                    linkToken: side_a.link,
                    tokenPriceStalenessThreshold: 90_000,
                },
                vec![d],
                vec![side_a.link, side_a.wrapped_native],
                Vec::<TokenPriceFeedUpdate>::new(),
                Vec::<TokenTransferFeeConfigArgs>::new(),
                vec![
                    PremiumMultiplierWeiPerEthArgs {
                        token: side_a.link,
                        premiumMultiplierWeiPerEth: 900_000_000_000_000_000,
                    },
                    PremiumMultiplierWeiPerEthArgs {
                        token: side_a.wrapped_native,
                        premiumMultiplierWeiPerEth: 1_000_000_000_000_000_000,
                    },
                ],
                vec![FqDestChainConfigArgs { destChainSelector: sb, destChainConfig: dest_config }],
            )
                .abi_encode_params(),
        )
        .await?;
    let prices = PriceUpdates {
        tokenPriceUpdates: vec![
            TokenPriceUpdate { sourceToken: side_a.link, usdPerToken: U224::from(15 * E18) },
            TokenPriceUpdate { sourceToken: side_a.wrapped_native, usdPerToken: U224::from(2000 * E18) },
        ],
        gasPriceUpdates: vec![GasPriceUpdate {
            destChainSelector: sb,
            usdPerUnitGas: U224::from(2_000_000_000_000u128),
        }],
    };
    ca.call(d, fee_quoter, updatePricesCall { priceUpdates: prices }.abi_encode().into()).await?;
    let on_ramp = ca
        .deploy(
            d,
            "OnRamp",
            &artifact(dir, "v1_6_0", "onramp")?,
            (
                OnRampStaticConfig {
                    chainSelector: sa,
                    rmnRemote: side_a.rmn_remote,
                    nonceManager: side_a.nonce_manager,
                    tokenAdminRegistry: side_a.registry,
                },
                OnRampDynamicConfig {
                    feeQuoter: fee_quoter,
                    reentrancyGuardEntered: false,
                    messageInterceptor: Address::ZERO,
                    feeAggregator: d,
                    allowlistAdmin: Address::ZERO,
                },
                vec![OnRampDestChainConfigArgs {
                    destChainSelector: sb,
                    router: side_a.router,
                    allowlistEnabled: false,
                }],
            )
                .abi_encode_params(),
        )
        .await?;
    let callers = |added: Address| AuthorizedCallerArgs { addedCallers: vec![added], removedCallers: vec![] };
    ca.call(
        d,
        side_a.nonce_manager,
        applyAuthorizedCallerUpdatesCall { authorizedCallerArgs: callers(on_ramp) }.abi_encode().into(),
    )
    .await?;
    ca.call(
        d,
        side_a.router,
        applyRampUpdatesCall {
            onRampUpdates: vec![RouterOnRamp { destChainSelector: sb, onRamp: on_ramp }],
            offRampRemoves: vec![],
            offRampAdds: vec![],
        }
        .abi_encode()
        .into(),
    )
    .await?;

    // B: a FeeQuoter for prices in reports, the OffRamp for A, its OCR configuration.
    let fee_quoter_b = cb
        .deploy(
            d,
            "FeeQuoter",
            &artifact(dir, "v1_6_3", "fee_quoter")?,
            (
                FqStaticConfig {
                    maxFeeJuelsPerMsg: alloy::primitives::aliases::U96::from(10u128.pow(27)),
                    linkToken: side_b.link,
                    tokenPriceStalenessThreshold: 90_000,
                },
                vec![d],
                vec![side_b.link],
                Vec::<TokenPriceFeedUpdate>::new(),
                Vec::<TokenTransferFeeConfigArgs>::new(),
                Vec::<PremiumMultiplierWeiPerEthArgs>::new(),
                Vec::<FqDestChainConfigArgs>::new(),
            )
                .abi_encode_params(),
        )
        .await?;
    let off_ramp = cb
        .deploy(
            d,
            "OffRamp",
            &artifact(dir, "v1_6_0", "offramp")?,
            (
                OffRampStaticConfig {
                    chainSelector: sb,
                    gasForCallExactCheck: 5000,
                    rmnRemote: side_b.rmn_remote,
                    tokenAdminRegistry: side_b.registry,
                    nonceManager: side_b.nonce_manager,
                },
                OffRampDynamicConfig {
                    feeQuoter: fee_quoter_b,
                    permissionLessExecutionThresholdSeconds: a.permissionless_execution_seconds,
                    messageInterceptor: Address::ZERO,
                },
                vec![SourceChainConfigArgs {
                    router: side_b.router,
                    sourceChainSelector: sa,
                    isEnabled: true,
                    isRMNVerificationDisabled: true,
                    onRamp: encoded(on_ramp),
                }],
            )
                .abi_encode_params(),
        )
        .await?;
    for target in [side_b.nonce_manager, fee_quoter_b] {
        cb.call(
            d,
            target,
            applyAuthorizedCallerUpdatesCall { authorizedCallerArgs: callers(off_ramp) }.abi_encode().into(),
        )
        .await?;
    }
    cb.call(
        d,
        side_b.router,
        applyRampUpdatesCall {
            onRampUpdates: vec![],
            offRampRemoves: vec![],
            offRampAdds: vec![RouterOffRampArg { sourceChainSelector: sa, offRamp: off_ramp }],
        }
        .abi_encode()
        .into(),
    )
    .await?;
    let signers = ocr_signers();
    cb.call(
        d,
        off_ramp,
        setOCR3ConfigsCall {
            ocrConfigArgs: vec![
                OCRConfigArgs {
                    configDigest: commit_digest(),
                    ocrPluginType: 0,
                    F: 1,
                    isSignatureVerificationEnabled: true,
                    signers: signers.iter().map(|s| s.address()).collect(),
                    transmitters: vec![transmitter],
                },
                OCRConfigArgs {
                    configDigest: exec_digest(),
                    ocrPluginType: 1,
                    F: 1,
                    isSignatureVerificationEnabled: false,
                    signers: vec![],
                    transmitters: vec![transmitter],
                },
            ],
        }
        .abi_encode()
        .into(),
    )
    .await?;

    // The pools know each other (no rate limit until a test sets one).
    for (chain, side, remote_selector, remote) in [(&ca, &side_a, sb, &side_b), (&cb, &side_b, sa, &side_a)] {
        chain
            .call(
                d,
                side.pool,
                applyChainUpdatesCall {
                    remoteChainSelectorsToRemove: vec![],
                    chainsToAdd: vec![ChainUpdate {
                        remoteChainSelector: remote_selector,
                        remotePoolAddresses: vec![encoded(remote.pool)],
                        remoteTokenAddress: encoded(remote.token),
                        outboundRateLimiterConfig: disabled(),
                        inboundRateLimiterConfig: disabled(),
                    }],
                }
                .abi_encode()
                .into(),
            )
            .await?;
    }
    let receiver_code = include_str!("../../../contracts/QtgCcip_sol_QtgCcipReceiver.bin");
    let receiver = cb.deploy(d, "QtgCcipReceiver", receiver_code, (side_b.router, false).abi_encode_params()).await?;
    let failing_receiver =
        cb.deploy(d, "QtgCcipReceiver (failing)", receiver_code, (side_b.router, true).abi_encode_params()).await?;
    if a.approve {
        for token in [side_a.token, side_a.link] {
            ca.call(a.holder, token, approveCall { spender: side_a.router, amount: U256::MAX }.abi_encode().into())
                .await?;
        }
    }

    let side_json = |c: &Chain, s: &Side, selector: u64| {
        json!({
            "url": c.url, "chain_id": c.chain_id, "selector": selector.to_string(),
            "router": s.router, "link": s.link, "wrapped_native": s.wrapped_native, "rmn_remote": s.rmn_remote,
            "rmn_proxy": s.rmn_proxy, "token_admin_registry": s.registry, "nonce_manager": s.nonce_manager,
            "token": s.token, "pool": s.pool,
        })
    };
    let mut source = side_json(&ca, &side_a, sa);
    source["on_ramp"] = json!(on_ramp);
    source["fee_quoter"] = json!(fee_quoter);
    source["decimals"] = json!(a.source_decimals);
    let mut destination = side_json(&cb, &side_b, sb);
    destination["off_ramp"] = json!(off_ramp);
    destination["fee_quoter"] = json!(fee_quoter_b);
    destination["decimals"] = json!(a.destination_decimals);
    destination["receiver"] = json!(receiver);
    destination["failing_receiver"] = json!(failing_receiver);
    let lane = json!({
        "source": source,
        "destination": destination,
        "deployer": d,
        "transmitter": transmitter,
        "holder": a.holder,
        "mg_ccip_chains": [
            {"chain_id": ca.chain_id, "selector": sa.to_string(), "router": side_a.router, "link": side_a.link,
             "tokens": [side_a.token]},
            {"chain_id": cb.chain_id, "selector": sb.to_string(), "router": side_b.router, "link": side_b.link,
             "tokens": [side_b.token]},
        ],
    });
    std::fs::write(&a.out, serde_json::to_string_pretty(&lane)?)?;
    tracing::info!(out = %a.out.display(), %on_ramp, %off_ramp, "the lane A -> B is deployed");
    Ok(())
}
