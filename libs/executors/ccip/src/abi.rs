//! The parts of Chainlink's CCIP 1.6 contracts (`@chainlink/contracts-ccip` 1.6.x: Router 1.2.0,
//! OnRamp and OffRamp 1.6.0, token pools 1.6.1) the lane reads: the OnRamp's `CCIPMessageSent`
//! (the message id), the OffRamp's execution state and `ExecutionStateChanged`, and the Router's
//! and pools' views used by preflight and drift. Layouts as in the package's `Internal.sol`.

use alloy::primitives::{keccak256, Address, Bytes, B256};
use alloy::sol;
use alloy::sol_types::{SolCall, SolEvent};
use qtg_evm::call::hex_address;
use qtg_evm::{Rpc, RpcError};
use serde_json::json;

sol! {
    #[derive(Debug, PartialEq)]
    struct RampMessageHeader {
        bytes32 messageId;
        uint64 sourceChainSelector;
        uint64 destChainSelector;
        uint64 sequenceNumber;
        uint64 nonce;
    }

    #[derive(Debug, PartialEq)]
    struct EVM2AnyTokenTransfer {
        address sourcePoolAddress;
        bytes destTokenAddress;
        bytes extraData;
        uint256 amount;
        bytes destExecData;
    }

    #[derive(Debug, PartialEq)]
    struct EVM2AnyRampMessage {
        RampMessageHeader header;
        address sender;
        bytes data;
        bytes receiver;
        bytes extraArgs;
        address feeToken;
        uint256 feeTokenAmount;
        uint256 feeValueJuels;
        EVM2AnyTokenTransfer[] tokenAmounts;
    }

    #[derive(Debug)]
    event CCIPMessageSent(uint64 indexed destChainSelector, uint64 indexed sequenceNumber, EVM2AnyRampMessage message);

    #[derive(Debug)]
    event ExecutionStateChanged(
        uint64 indexed sourceChainSelector,
        uint64 indexed sequenceNumber,
        bytes32 indexed messageId,
        bytes32 messageHash,
        uint8 state,
        bytes returnData,
        uint256 gasUsed
    );

    #[derive(Debug, PartialEq)]
    struct RouterOffRamp {
        uint64 sourceChainSelector;
        address offRamp;
    }

    #[derive(Debug, PartialEq)]
    struct SourceChainConfig {
        address router;
        bool isEnabled;
        uint64 minSeqNr;
        bool isRMNVerificationDisabled;
        bytes onRamp;
    }

    #[derive(Debug, PartialEq)]
    struct TokenBucket {
        uint128 tokens;
        uint32 lastUpdated;
        bool isEnabled;
        uint128 capacity;
        uint128 rate;
    }

    function getOnRamp(uint64 destChainSelector) returns (address);
    function getOffRamps() returns (RouterOffRamp[]);
    function getWrappedNative() returns (address);
    function getPoolBySourceToken(uint64 destChainSelector, address sourceToken) returns (address);
    function getExecutionState(uint64 sourceChainSelector, uint64 sequenceNumber) returns (uint8);
    function getSourceChainConfig(uint64 sourceChainSelector) returns (SourceChainConfig);
    function getCurrentOutboundRateLimiterState(uint64 remoteChainSelector) returns (TokenBucket);
    function getCurrentInboundRateLimiterState(uint64 remoteChainSelector) returns (TokenBucket);
    function typeAndVersion() returns (string);

    #[derive(Debug, PartialEq)]
    struct OnRampStaticConfig {
        uint64 chainSelector; address rmnRemote; address nonceManager; address tokenAdminRegistry;
    }
    #[derive(Debug, PartialEq)]
    struct OnRampDynamicConfig {
        address feeQuoter; bool reentrancyGuardEntered; address messageInterceptor; address feeAggregator;
        address allowlistAdmin;
    }
    function getStaticConfig() returns (OnRampStaticConfig);
    function getDynamicConfig() returns (OnRampDynamicConfig);
    function getPool(address token) returns (address);
    function getSupportedChains() returns (uint64[]);
    function getRemotePools(uint64 remoteChainSelector) returns (bytes[]);
    function getRemoteToken(uint64 remoteChainSelector) returns (bytes);
    function balanceOf(address account) returns (uint256);
}

/// The OffRamp's `Internal.MessageExecutionState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionState {
    Untouched,
    InProgress,
    Success,
    Failure,
}

impl ExecutionState {
    pub fn of(v: u8) -> Option<ExecutionState> {
        Some(match v {
            0 => ExecutionState::Untouched,
            1 => ExecutionState::InProgress,
            2 => ExecutionState::Success,
            3 => ExecutionState::Failure,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionState::Untouched => "UNTOUCHED",
            ExecutionState::InProgress => "IN_PROGRESS",
            ExecutionState::Success => "SUCCESS",
            ExecutionState::Failure => "FAILURE",
        }
    }
}

pub fn message_sent_topic() -> B256 {
    CCIPMessageSent::SIGNATURE_HASH
}

pub fn execution_state_changed_topic() -> B256 {
    ExecutionStateChanged::SIGNATURE_HASH
}

/// `eth_call` of a typed call on `to` at the latest block, its answer decoded; a reverted call,
/// or an answer that does not decode as the call's (no such function there), is `RpcError::Node`;
/// an answer that is not hex is the node's garbage (`Transport`).
pub async fn view<C: SolCall>(rpc: &Rpc, to: Address, call: C) -> Result<C::Return, RpcError> {
    let data: Bytes = call.abi_encode().into();
    let v = rpc.call("eth_call", json!([{"to": hex_address(to), "data": data}, "latest"])).await?;
    let garbage = |detail: String| RpcError::Transport { method: "eth_call".into(), detail };
    let raw: Bytes = v
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| garbage(format!("not hex: {}", v.to_string().chars().take(80).collect::<String>())))?;
    // The node answered, but not what the contract the lane expects would (an account without
    // code answers `0x`): as a revert, the contract is not the one expected.
    C::abi_decode_returns(&raw).map_err(|e| RpcError::Node {
        method: "eth_call".into(),
        code: 0,
        message: format!("the answer of {to} does not decode as {}: {e}", std::any::type_name::<C>()),
    })
}

/// The 32-byte ABI form of an address CCIP uses for remote addresses (`abi.encode(address)`).
pub fn encoded(a: Address) -> Bytes {
    Bytes::copy_from_slice(a.into_word().as_slice())
}

/// The OnRamp's message id, recomputed from the message as `Internal._hash(EVM2AnyRampMessage,
/// metadataHash)` does (with the id itself zero): what the log says must be what the message is.
pub fn message_id(m: &EVM2AnyRampMessage, on_ramp: Address) -> B256 {
    use alloy::sol_types::SolValue;
    let metadata = keccak256(
        (keccak256("EVM2AnyMessageHashV1"), m.header.sourceChainSelector, m.header.destChainSelector, on_ramp)
            .abi_encode(),
    );
    let fixed = (m.sender, m.header.sequenceNumber, m.header.nonce, m.feeToken, m.feeTokenAmount).abi_encode();
    keccak256(
        (
            B256::ZERO,
            metadata,
            keccak256(fixed),
            keccak256(&m.receiver),
            keccak256(&m.data),
            keccak256(m.tokenAmounts.abi_encode()),
            keccak256(&m.extraArgs),
        )
            .abi_encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The topics and selectors of Chainlink's released ABIs (`abi/v1_6_0/onramp.json`,
    /// `offramp.json`, `abi/v1_2_0/router.json`, `abi/v1_6_1/burn_mint_token_pool.json`).
    #[test]
    fn topics_and_selectors_are_the_packages() {
        let hex = |b: &[u8]| alloy::primitives::hex::encode(b);
        assert_eq!(
            hex(message_sent_topic().as_slice()),
            "192442a2b2adb6a7948f097023cb6b57d29d3a7a5dd33e6666d33c39cc456f32"
        );
        assert_eq!(
            hex(execution_state_changed_topic().as_slice()),
            "05665fe9ad095383d018353f4cbcba77e84db27dd215081bbf7cdf9ae6fbe48b"
        );
        assert_eq!(hex(&getOffRampsCall::SELECTOR), "a40e69c7");
        assert_eq!(hex(&getPoolBySourceTokenCall::SELECTOR), "48a98aa4");
        assert_eq!(hex(&getExecutionStateCall::SELECTOR), "5e36480c");
        assert_eq!(hex(&getSourceChainConfigCall::SELECTOR), "e9d68a8e");
        assert_eq!(hex(&getCurrentOutboundRateLimiterStateCall::SELECTOR), "c75eea9c");
    }
}

#[cfg(test)]
mod vectors {
    use alloy::sol_types::SolValue;
    use serde_json::Value;

    use super::*;

    /// A lane run on two anvils with Chainlink's released 1.6 bytecode (testdata/README.md): the
    /// OnRamp's log decodes to a message whose recomputed id is the id the OnRamp emitted.
    #[test]
    fn the_message_id_is_the_onramps() {
        let v: Value = serde_json::from_str(include_str!("../testdata/ccip_v1_6_lane.json")).unwrap();
        let log = &v["send"]["rawLog"];
        let data: Bytes = log["data"].as_str().unwrap().parse().unwrap();
        let m = EVM2AnyRampMessage::abi_decode(&data).unwrap();
        let on_ramp: Address = log["address"].as_str().unwrap().parse().unwrap();
        let id: B256 = v["exec"]["any2evm"]["header"]["messageId"].as_str().unwrap().parse().unwrap();
        assert_eq!(m.header.messageId, id);
        assert_eq!(message_id(&m, on_ramp), id);
        assert_eq!(m.header.sequenceNumber, 1);
        assert_eq!(m.header.destChainSelector, 3379446385462418246);
        assert_ne!(message_id(&m, Address::repeat_byte(1)), id, "another OnRamp is another id");
    }
}
