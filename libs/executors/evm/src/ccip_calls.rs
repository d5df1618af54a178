//! Chainlink CCIP's client side (`@chainlink/contracts-ccip` 1.6, `Client.sol` and
//! `Router.sol`): the `ccipSend` call the lane's signer checks against an approved intent, its
//! message and extra arguments. Shared by the signer (here) and the CCIP lane.

use alloy::primitives::{Address, Bytes, U256};
use alloy::sol;
use alloy::sol_types::{SolCall, SolValue};

sol! {
    /// `Client.EVMTokenAmount`.
    #[derive(Debug, PartialEq)]
    struct EVMTokenAmount {
        address token;
        uint256 amount;
    }

    /// `Client.EVM2AnyMessage`.
    #[derive(Debug, PartialEq)]
    struct EVM2AnyMessage {
        bytes receiver;
        bytes data;
        EVMTokenAmount[] tokenAmounts;
        address feeToken;
        bytes extraArgs;
    }

    /// `Client.GenericExtraArgsV2`.
    #[derive(Debug, PartialEq)]
    struct GenericExtraArgsV2 {
        uint256 gasLimit;
        bool allowOutOfOrderExecution;
    }

    function ccipSend(uint64 destinationChainSelector, EVM2AnyMessage message) payable returns (bytes32);
    function getFee(uint64 destinationChainSelector, EVM2AnyMessage message) returns (uint256 fee);
}

/// `bytes4(keccak256("CCIP EVMExtraArgsV2"))`: the tag of [`GenericExtraArgsV2`].
pub const GENERIC_EXTRA_ARGS_V2_TAG: [u8; 4] = [0x18, 0x1d, 0xcf, 0x10];

/// The extra arguments a send carries: `tag ‖ abi.encode(gasLimit, allowOutOfOrderExecution)`.
pub fn extra_args(gas_limit: u64, allow_out_of_order: bool) -> Bytes {
    let args = GenericExtraArgsV2 { gasLimit: U256::from(gas_limit), allowOutOfOrderExecution: allow_out_of_order };
    let mut out = GENERIC_EXTRA_ARGS_V2_TAG.to_vec();
    out.extend(args.abi_encode());
    out.into()
}

/// [`extra_args`] read back; `None` for any other form.
pub fn decode_extra_args(b: &[u8]) -> Option<GenericExtraArgsV2> {
    let rest = b.strip_prefix(&GENERIC_EXTRA_ARGS_V2_TAG[..])?;
    (rest.len() == 64).then(|| GenericExtraArgsV2::abi_decode(rest).ok()).flatten()
}

/// The message of one token transfer to `receiver` (an EVM address, ABI-encoded as CCIP wants)
/// with `data`, paying in `fee_token` (zero: the native coin).
pub fn message(
    receiver: Address,
    token: Address,
    amount: U256,
    data: Bytes,
    fee_token: Address,
    extra: Bytes,
) -> EVM2AnyMessage {
    EVM2AnyMessage {
        receiver: receiver.abi_encode().into(),
        data,
        tokenAmounts: vec![EVMTokenAmount { token, amount }],
        feeToken: fee_token,
        extraArgs: extra,
    }
}

pub fn ccip_send_calldata(destination_chain_selector: u64, message: EVM2AnyMessage) -> Bytes {
    ccipSendCall { destinationChainSelector: destination_chain_selector, message }.abi_encode().into()
}

pub fn get_fee_calldata(destination_chain_selector: u64, message: EVM2AnyMessage) -> Bytes {
    getFeeCall { destinationChainSelector: destination_chain_selector, message }.abi_encode().into()
}

/// A `ccipSend` call's arguments, or `None` for any other call.
pub fn decode_ccip_send(input: &[u8]) -> Option<(u64, EVM2AnyMessage)> {
    let c = ccipSendCall::abi_decode(input).ok()?;
    Some((c.destinationChainSelector, c.message))
}

/// The EVM address a message's `receiver` bytes encode (32 bytes, left-padded), if they do.
pub fn receiver_of(b: &[u8]) -> Option<Address> {
    (b.len() == 32 && b[..12].iter().all(|x| *x == 0)).then(|| Address::from_slice(&b[12..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selectors of Chainlink's Router ABI (`abi/v1_2_0/router.json`).
    #[test]
    fn selectors_are_the_routers() {
        assert_eq!(ccipSendCall::SELECTOR, [0x96, 0xf4, 0xe9, 0xf9]);
        assert_eq!(getFeeCall::SELECTOR, [0x20, 0x48, 0x7d, 0xed]);
        assert_eq!(&alloy::primitives::keccak256("CCIP EVMExtraArgsV2")[..4], &GENERIC_EXTRA_ARGS_V2_TAG);
    }

    #[test]
    fn a_send_reads_back_as_written() {
        let (to, token) = (Address::repeat_byte(0x11), Address::repeat_byte(0x22));
        let m = message(to, token, U256::from(5u8), Bytes::new(), Address::ZERO, extra_args(0, true));
        let input = ccip_send_calldata(42, m.clone());
        let (dest, back) = decode_ccip_send(&input).unwrap();
        assert_eq!((dest, &back), (42, &m));
        assert_eq!(receiver_of(&back.receiver), Some(to));
        let args = decode_extra_args(&back.extraArgs).unwrap();
        assert_eq!((args.gasLimit, args.allowOutOfOrderExecution), (U256::ZERO, true));
        assert!(decode_extra_args(&[0x97, 0xa6, 0x57, 0xc9]).is_none(), "V1's tag is another form");
    }
}
