//! What the simulator calls on Chainlink's CCIP 1.6 contracts to deploy and run a lane:
//! constructors and setters (layouts from the package's released ABIs, `abi/<version>/*.json`)
//! and the OffRamp's report types (`Internal.sol`, `OffRamp.sol`, `MultiOCR3Base.sol`).

#![allow(clippy::too_many_arguments)]

use alloy::sol;

pub use qtg_ccip::abi::RampMessageHeader;

sol! {
    // FeeQuoter 1.6.3
    struct FqStaticConfig { uint96 maxFeeJuelsPerMsg; address linkToken; uint32 tokenPriceStalenessThreshold; }
    struct TokenPriceFeedConfig { address dataFeedAddress; uint8 tokenDecimals; bool isEnabled; }
    struct TokenPriceFeedUpdate { address sourceToken; TokenPriceFeedConfig feedConfig; }
    struct TokenTransferFeeConfig {
        uint32 minFeeUSDCents; uint32 maxFeeUSDCents; uint16 deciBps; uint32 destGasOverhead; uint32 destBytesOverhead;
        bool isEnabled;
    }
    struct TokenTransferFeeConfigSingleTokenArgs { address token; TokenTransferFeeConfig tokenTransferFeeConfig; }
    struct TokenTransferFeeConfigArgs {
        uint64 destChainSelector; TokenTransferFeeConfigSingleTokenArgs[] tokenTransferFeeConfigs;
    }
    struct PremiumMultiplierWeiPerEthArgs { address token; uint64 premiumMultiplierWeiPerEth; }
    struct DestChainConfig {
        bool isEnabled; uint16 maxNumberOfTokensPerMsg; uint32 maxDataBytes; uint32 maxPerMsgGasLimit;
        uint32 destGasOverhead; uint8 destGasPerPayloadByteBase; uint8 destGasPerPayloadByteHigh;
        uint16 destGasPerPayloadByteThreshold; uint32 destDataAvailabilityOverheadGas;
        uint16 destGasPerDataAvailabilityByte; uint16 destDataAvailabilityMultiplierBps; bytes4 chainFamilySelector;
        bool enforceOutOfOrder; uint16 defaultTokenFeeUSDCents; uint32 defaultTokenDestGasOverhead;
        uint32 defaultTxGasLimit; uint64 gasMultiplierWeiPerEth; uint32 gasPriceStalenessThreshold;
        uint32 networkFeeUSDCents;
    }
    struct FqDestChainConfigArgs { uint64 destChainSelector; DestChainConfig destChainConfig; }
    struct TokenPriceUpdate { address sourceToken; uint224 usdPerToken; }
    struct GasPriceUpdate { uint64 destChainSelector; uint224 usdPerUnitGas; }
    struct PriceUpdates { TokenPriceUpdate[] tokenPriceUpdates; GasPriceUpdate[] gasPriceUpdates; }
    function updatePrices(PriceUpdates priceUpdates);
    struct AuthorizedCallerArgs { address[] addedCallers; address[] removedCallers; }
    function applyAuthorizedCallerUpdates(AuthorizedCallerArgs authorizedCallerArgs);

    // OnRamp 1.6.0
    struct OnRampStaticConfig {
        uint64 chainSelector; address rmnRemote; address nonceManager; address tokenAdminRegistry;
    }
    struct OnRampDynamicConfig {
        address feeQuoter; bool reentrancyGuardEntered; address messageInterceptor; address feeAggregator;
        address allowlistAdmin;
    }
    struct OnRampDestChainConfigArgs { uint64 destChainSelector; address router; bool allowlistEnabled; }
    function getExpectedNextSequenceNumber(uint64 destChainSelector) returns (uint64);

    // OffRamp 1.6.0
    struct OffRampStaticConfig {
        uint64 chainSelector; uint16 gasForCallExactCheck; address rmnRemote; address tokenAdminRegistry;
        address nonceManager;
    }
    struct OffRampDynamicConfig {
        address feeQuoter; uint32 permissionLessExecutionThresholdSeconds; address messageInterceptor;
    }
    struct SourceChainConfigArgs {
        address router; uint64 sourceChainSelector; bool isEnabled; bool isRMNVerificationDisabled; bytes onRamp;
    }
    struct OCRConfigArgs {
        bytes32 configDigest; uint8 ocrPluginType; uint8 F; bool isSignatureVerificationEnabled; address[] signers;
        address[] transmitters;
    }
    function setOCR3Configs(OCRConfigArgs[] ocrConfigArgs);
    struct MerkleRoot {
        uint64 sourceChainSelector; bytes onRampAddress; uint64 minSeqNr; uint64 maxSeqNr; bytes32 merkleRoot;
    }
    struct RmnSignature { bytes32 r; bytes32 s; }
    struct CommitReport {
        PriceUpdates priceUpdates; MerkleRoot[] blessedMerkleRoots; MerkleRoot[] unblessedMerkleRoots;
        RmnSignature[] rmnSignatures;
    }
    function commit(bytes32[2] reportContext, bytes report, bytes32[] rs, bytes32[] ss, bytes32 rawVs);
    #[derive(Debug, PartialEq)]
    struct Any2EVMTokenTransfer {
        bytes sourcePoolAddress; address destTokenAddress; uint32 destGasAmount; bytes extraData; uint256 amount;
    }
    #[derive(Debug, PartialEq)]
    struct Any2EVMRampMessage {
        RampMessageHeader header; bytes sender; bytes data; address receiver; uint256 gasLimit;
        Any2EVMTokenTransfer[] tokenAmounts;
    }
    struct ExecutionReport {
        uint64 sourceChainSelector; Any2EVMRampMessage[] messages; bytes[][] offchainTokenData; bytes32[] proofs;
        uint256 proofFlagBits;
    }
    function execute(bytes32[2] reportContext, bytes report);
    function getMerkleRoot(uint64 sourceChainSelector, bytes32 root) returns (uint256);

    // Router 1.2.0
    struct RouterOnRamp { uint64 destChainSelector; address onRamp; }
    struct RouterOffRampArg { uint64 sourceChainSelector; address offRamp; }
    function applyRampUpdates(
        RouterOnRamp[] onRampUpdates, RouterOffRampArg[] offRampRemoves, RouterOffRampArg[] offRampAdds
    );

    // Token pools 1.6.1
    struct RateLimiterConfig { bool isEnabled; uint128 capacity; uint128 rate; }
    struct ChainUpdate {
        uint64 remoteChainSelector; bytes[] remotePoolAddresses; bytes remoteTokenAddress;
        RateLimiterConfig outboundRateLimiterConfig; RateLimiterConfig inboundRateLimiterConfig;
    }
    function applyChainUpdates(uint64[] remoteChainSelectorsToRemove, ChainUpdate[] chainsToAdd);
    function setChainRateLimiterConfig(
        uint64 remoteChainSelector, RateLimiterConfig outboundConfig, RateLimiterConfig inboundConfig
    );

    // TokenAdminRegistry 1.5.0, FactoryBurnMintERC20 1.6.2, ERC-20
    function proposeAdministrator(address localToken, address administrator);
    function acceptAdminRole(address localToken);
    function setPool(address localToken, address pool);
    function grantMintAndBurnRoles(address burnAndMinter);
    function approve(address spender, uint256 amount) returns (bool);
    function mint(address account, uint256 amount);

    // Constructors with a uint8 argument, encoded as calls (their arguments are what follows the
    // selector).
    function tokenConstructor(
        string name, string symbol, uint8 decimals_, uint256 maxSupply_, uint256 preMint, address newOwner
    );
    function poolConstructor(
        address token, uint8 localTokenDecimals, address[] allowlist, address rmnProxy, address router
    );
}

/// A constructor's ABI-encoded arguments from its stand-in call (the call without its selector).
pub fn constructor_args<C: alloy::sol_types::SolCall>(c: C) -> Vec<u8> {
    c.abi_encode()[4..].to_vec()
}
