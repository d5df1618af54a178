//! The contract calls beyond an ERC-20 `transfer` that the lane's signer knows how to check
//! against an approved intent: Circle's CCTP (v1) `depositForBurn` on a token messenger and
//! `receiveMessage` on a message transmitter, with the message layout both sides share.

use alloy::primitives::{keccak256, Address, Bytes, FixedBytes, B256, U256};
use alloy::sol;
use alloy::sol_types::SolCall;

sol! {
    function depositForBurn(
        uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken
    ) returns (uint64);
    function receiveMessage(bytes message, bytes attestation) returns (bool);
    function usedNonces(bytes32 key) returns (uint256);
    function allowance(address owner, address spender) returns (uint256);
    function localMessageTransmitter() returns (address);
    function localMinter() returns (address);
    function remoteTokenMessengers(uint32 domain) returns (bytes32);
    function localDomain() returns (uint32);
    function signatureThreshold() returns (uint256);
    function getNumEnabledAttesters() returns (uint256);
    function getEnabledAttester(uint256 index) returns (address);
    function attesterManager() returns (address);
    function owner() returns (address);
    function pauser() returns (address);
    function paused() returns (bool);
    function burnLimitsPerMessage(address token) returns (uint256);
    function getLocalToken(uint32 remoteDomain, bytes32 remoteToken) returns (address);
    function tokenController() returns (address);
    function minFee() returns (uint256);
    function feeRecipient() returns (address);
    function denylister() returns (address);
    function isDenylisted(address account) returns (bool);
}

/// V2 `TokenMessengerV2.minFee()`: the on-chain minimum fee in 1/1000 basis points (V2.1).
pub fn min_fee_calldata() -> Bytes {
    minFeeCall {}.abi_encode().into()
}

pub fn fee_recipient_calldata() -> Bytes {
    feeRecipientCall {}.abi_encode().into()
}

pub fn denylister_calldata() -> Bytes {
    denylisterCall {}.abi_encode().into()
}

pub fn is_denylisted_calldata(account: Address) -> Bytes {
    isDenylistedCall { account }.abi_encode().into()
}

/// `keccak256("MessageSent(bytes)")`, the topic of the transmitter's event.
pub fn message_sent_topic() -> B256 {
    keccak256("MessageSent(bytes)")
}

/// An address as CCTP's 32-byte form (left-padded).
pub fn word(a: Address) -> FixedBytes<32> {
    a.into_word()
}

/// The 32-byte form back to an address, when its upper 12 bytes are zero.
pub fn address_of(w: &FixedBytes<32>) -> Option<Address> {
    w[..12].iter().all(|b| *b == 0).then(|| Address::from_slice(&w[12..]))
}

/// `depositForBurn(amount, destinationDomain, mintRecipient, burnToken)` calldata.
pub fn burn_calldata(amount: U256, destination_domain: u32, mint_recipient: Address, burn_token: Address) -> Bytes {
    depositForBurnCall {
        amount,
        destinationDomain: destination_domain,
        mintRecipient: word(mint_recipient),
        burnToken: burn_token,
    }
    .abi_encode()
    .into()
}

/// The arguments of a `depositForBurn` call, if `input` is one.
pub fn decode_burn(input: &[u8]) -> Option<depositForBurnCall> {
    depositForBurnCall::abi_decode(input).ok()
}

/// `receiveMessage(message, attestation)` calldata.
pub fn receive_calldata(message: &Bytes, attestation: &Bytes) -> Bytes {
    receiveMessageCall { message: message.clone(), attestation: attestation.clone() }.abi_encode().into()
}

/// `(message, attestation)` of a `receiveMessage` call, if `input` is one.
pub fn decode_receive(input: &[u8]) -> Option<(Bytes, Bytes)> {
    receiveMessageCall::abi_decode(input).ok().map(|c| (c.message, c.attestation))
}

/// Calldata of a read-only call with no arguments or simple ones.
pub fn used_nonces_calldata(key: B256) -> Bytes {
    usedNoncesCall { key }.abi_encode().into()
}

pub fn allowance_calldata(owner: Address, spender: Address) -> Bytes {
    allowanceCall { owner, spender }.abi_encode().into()
}

pub fn remote_messenger_calldata(domain: u32) -> Bytes {
    remoteTokenMessengersCall { domain }.abi_encode().into()
}

/// Reads of Circle's CCTP contracts (no arguments or simple ones): the messenger's
/// `localMessageTransmitter()`, `localMinter()`; the transmitter's `localDomain()` and its
/// `Attestable` / `Pausable` / `Ownable` state; the minter's `burnLimitsPerMessage(token)`,
/// `getLocalToken(remoteDomain, remoteToken)`, `tokenController()`.
pub fn local_transmitter_calldata() -> Bytes {
    localMessageTransmitterCall {}.abi_encode().into()
}

pub fn local_minter_calldata() -> Bytes {
    localMinterCall {}.abi_encode().into()
}

pub fn local_domain_calldata() -> Bytes {
    localDomainCall {}.abi_encode().into()
}

pub fn signature_threshold_calldata() -> Bytes {
    signatureThresholdCall {}.abi_encode().into()
}

pub fn num_enabled_attesters_calldata() -> Bytes {
    getNumEnabledAttestersCall {}.abi_encode().into()
}

pub fn enabled_attester_calldata(index: u64) -> Bytes {
    getEnabledAttesterCall { index: U256::from(index) }.abi_encode().into()
}

pub fn attester_manager_calldata() -> Bytes {
    attesterManagerCall {}.abi_encode().into()
}

pub fn owner_calldata() -> Bytes {
    ownerCall {}.abi_encode().into()
}

pub fn pauser_calldata() -> Bytes {
    pauserCall {}.abi_encode().into()
}

pub fn paused_calldata() -> Bytes {
    pausedCall {}.abi_encode().into()
}

pub fn burn_limit_calldata(token: Address) -> Bytes {
    burnLimitsPerMessageCall { token }.abi_encode().into()
}

pub fn local_token_of_calldata(remote_domain: u32, remote_token: Address) -> Bytes {
    getLocalTokenCall { remoteDomain: remote_domain, remoteToken: remote_token.into_word() }.abi_encode().into()
}

pub fn token_controller_calldata() -> Bytes {
    tokenControllerCall {}.abi_encode().into()
}

/// The length of one attester's signature in an attestation (r ‖ s ‖ v).
pub const SIGNATURE_LENGTH: usize = 65;

/// A CCTP message: `version ‖ sourceDomain ‖ destinationDomain ‖ nonce ‖ sender ‖ recipient ‖
/// destinationCaller ‖ body` (4, 4, 4, 8, 32, 32, 32 bytes, then the body).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub version: u32,
    pub source_domain: u32,
    pub destination_domain: u32,
    pub nonce: u64,
    pub sender: B256,
    pub recipient: B256,
    pub destination_caller: B256,
    pub body: Bytes,
}

/// The token messenger's burn message: `version ‖ burnToken ‖ mintRecipient ‖ amount ‖
/// messageSender` (4, 32, 32, 32, 32 bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct BurnMessage {
    pub version: u32,
    pub burn_token: B256,
    pub mint_recipient: B256,
    pub amount: U256,
    pub message_sender: B256,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Message {
    pub fn parse(b: &[u8]) -> Option<Message> {
        if b.len() < 116 {
            return None;
        }
        let mut nonce = [0u8; 8];
        nonce.copy_from_slice(&b[12..20]);
        Some(Message {
            version: u32_at(b, 0),
            source_domain: u32_at(b, 4),
            destination_domain: u32_at(b, 8),
            nonce: u64::from_be_bytes(nonce),
            sender: B256::from_slice(&b[20..52]),
            recipient: B256::from_slice(&b[52..84]),
            destination_caller: B256::from_slice(&b[84..116]),
            body: Bytes::copy_from_slice(&b[116..]),
        })
    }

    /// The body as a burn message, if it is one.
    pub fn burn(&self) -> Option<BurnMessage> {
        let b = &self.body;
        if b.len() != 132 {
            return None;
        }
        Some(BurnMessage {
            version: u32_at(b, 0),
            burn_token: B256::from_slice(&b[4..36]),
            mint_recipient: B256::from_slice(&b[36..68]),
            amount: U256::from_be_slice(&b[68..100]),
            message_sender: B256::from_slice(&b[100..132]),
        })
    }

    /// The transmitter's `usedNonces` key: keccak256(abi.encodePacked(sourceDomain, nonce)).
    pub fn used_key(&self) -> B256 {
        let mut packed = Vec::with_capacity(12);
        packed.extend_from_slice(&self.source_domain.to_be_bytes());
        packed.extend_from_slice(&self.nonce.to_be_bytes());
        keccak256(packed)
    }
}

/// CCTP V2's `TokenMessengerV2.depositForBurn` (selector `0x8e0250ee`): no nonce is returned
/// (the attester assigns one); `maxFee` (in the burned token's units, below `amount`) and
/// `minFinalityThreshold` ([`FINALITY_FAST`] or [`FINALITY_STANDARD`]) choose the transfer.
mod v2 {
    alloy::sol! {
        function depositForBurn(
            uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken,
            bytes32 destinationCaller, uint256 maxFee, uint32 minFinalityThreshold
        );
        function depositForBurnWithHook(
            uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken,
            bytes32 destinationCaller, uint256 maxFee, uint32 minFinalityThreshold, bytes hookData
        );
        event DepositForBurn(
            address indexed burnToken, uint256 amount, address indexed depositor, bytes32 mintRecipient,
            uint32 destinationDomain, bytes32 destinationTokenMessenger, bytes32 destinationCaller, uint256 maxFee,
            uint32 indexed minFinalityThreshold, bytes hookData
        );
    }
}

pub use v2::depositForBurnCall as DepositForBurnV2;

/// `minFinalityThreshold` of a Fast Transfer (attested at "confirmed", a fee paid).
pub const FINALITY_FAST: u32 = 1000;
/// `minFinalityThreshold` of a Standard Transfer (attested once finalized).
pub const FINALITY_STANDARD: u32 = 2000;

/// V2 `depositForBurn(amount, destinationDomain, mintRecipient, burnToken, destinationCaller,
/// maxFee, minFinalityThreshold)` calldata; `destination_caller` `None` is anyone (zero).
pub fn burn_v2_calldata(
    amount: U256,
    destination_domain: u32,
    mint_recipient: Address,
    burn_token: Address,
    destination_caller: Option<Address>,
    max_fee: U256,
    min_finality_threshold: u32,
) -> Bytes {
    DepositForBurnV2 {
        amount,
        destinationDomain: destination_domain,
        mintRecipient: word(mint_recipient),
        burnToken: burn_token,
        destinationCaller: destination_caller.map(word).unwrap_or_default(),
        maxFee: max_fee,
        minFinalityThreshold: min_finality_threshold,
    }
    .abi_encode()
    .into()
}

/// V2 `depositForBurnWithHook` (selector `0x779b432d`): `depositForBurn` with hook data
/// (non-empty) carried in the burn message.
#[allow(clippy::too_many_arguments)]
pub fn burn_v2_with_hook_calldata(
    amount: U256,
    destination_domain: u32,
    mint_recipient: Address,
    burn_token: Address,
    destination_caller: Option<Address>,
    max_fee: U256,
    min_finality_threshold: u32,
    hook_data: Bytes,
) -> Bytes {
    v2::depositForBurnWithHookCall {
        amount,
        destinationDomain: destination_domain,
        mintRecipient: word(mint_recipient),
        burnToken: burn_token,
        destinationCaller: destination_caller.map(word).unwrap_or_default(),
        maxFee: max_fee,
        minFinalityThreshold: min_finality_threshold,
        hookData: hook_data,
    }
    .abi_encode()
    .into()
}

/// The V2 burn `input` carries, if it is one, and its hook data (empty for `depositForBurn`).
pub fn decode_burn_v2(input: &[u8]) -> Option<(DepositForBurnV2, Bytes)> {
    if let Ok(c) = DepositForBurnV2::abi_decode(input) {
        return Some((c, Bytes::new()));
    }
    let c = v2::depositForBurnWithHookCall::abi_decode(input).ok()?;
    let burn = DepositForBurnV2 {
        amount: c.amount,
        destinationDomain: c.destinationDomain,
        mintRecipient: c.mintRecipient,
        burnToken: c.burnToken,
        destinationCaller: c.destinationCaller,
        maxFee: c.maxFee,
        minFinalityThreshold: c.minFinalityThreshold,
    };
    Some((burn, c.hookData))
}

/// The topic of V2's `DepositForBurn` (it differs from V1's: no nonce, more fields).
pub fn deposit_for_burn_v2_topic() -> B256 {
    <v2::DepositForBurn as alloy::sol_types::SolEvent>::SIGNATURE_HASH
}

/// What a V2 node's intent amount is (node `config.amount_is`): the amount burned (the
/// recipient receives it less the fee executed), or the amount delivered (the burn is grossed
/// up by its `maxFee`: the recipient receives the amount plus whatever of `maxFee` the attester
/// did not charge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmountIs {
    Burned,
    Delivered,
}

impl AmountIs {
    /// `"burned"` (also when absent) or `"delivered"`.
    pub fn parse(text: Option<&str>) -> Result<AmountIs, String> {
        match text.map(str::trim) {
            None | Some("burned") => Ok(AmountIs::Burned),
            Some("delivered") => Ok(AmountIs::Delivered),
            Some(other) => Err(format!("amount_is {other:?} is neither \"burned\" nor \"delivered\"")),
        }
    }

    /// The burn's amount for the intent's `amount` and the burn's `max_fee`.
    pub fn burned(self, amount: U256, max_fee: U256) -> U256 {
        match self {
            AmountIs::Burned => amount,
            AmountIs::Delivered => amount.saturating_add(max_fee),
        }
    }

    /// Whether an attested V2 burn body is the intent's transfer of `amount`: burned as
    /// [`AmountIs::burned`] says, with a fee executed within its `maxFee` and below the amount.
    pub fn check(self, amount: U256, body: &BurnMessageV2) -> Result<(), String> {
        let want = self.burned(amount, body.max_fee);
        if body.amount != want {
            return Err(format!(
                "the message burns {} with maxFee {}; the movement's {amount} ({}) needs {want}",
                body.amount,
                body.max_fee,
                if self == AmountIs::Burned { "burned" } else { "delivered" }
            ));
        }
        if body.fee_executed > body.max_fee || (!body.fee_executed.is_zero() && body.fee_executed >= body.amount) {
            return Err(format!(
                "the message's fee executed {} is above its maxFee {} or not below its amount {}",
                body.fee_executed, body.max_fee, body.amount
            ));
        }
        Ok(())
    }
}

/// A V2 node's `config.finality`: `"fast"` ([`FINALITY_FAST`]) or `"standard"`
/// ([`FINALITY_STANDARD`]), required: the choice decides the fee.
pub fn finality_of(text: Option<&str>) -> Result<u32, String> {
    match text.map(str::trim) {
        Some("fast") => Ok(FINALITY_FAST),
        Some("standard") => Ok(FINALITY_STANDARD),
        Some(other) => Err(format!("finality {other:?} is neither \"fast\" nor \"standard\"")),
        None => Err("a V2 burn needs config.finality (\"fast\" or \"standard\")".into()),
    }
}

/// A CCTP V2 message (`MessageV2`, Circle's `src/messages/v2/MessageV2.sol`): `version ‖
/// sourceDomain ‖ destinationDomain ‖ nonce ‖ sender ‖ recipient ‖ destinationCaller ‖
/// minFinalityThreshold ‖ finalityThresholdExecuted ‖ body` (4, 4, 4, 32, 32, 32, 32, 4, 4
/// bytes, then the body). The attester fills the `bytes32` nonce and
/// `finalityThresholdExecuted` (and in the burn body `feeExecuted` and `expirationBlock`)
/// before it signs: the message `MessageSent` emits is not the one attested and received.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageV2 {
    pub version: u32,
    pub source_domain: u32,
    pub destination_domain: u32,
    pub nonce: B256,
    pub sender: B256,
    pub recipient: B256,
    pub destination_caller: B256,
    pub min_finality_threshold: u32,
    pub finality_threshold_executed: u32,
    pub body: Bytes,
}

/// A V2 burn body (`BurnMessageV2`): `version ‖ burnToken ‖ mintRecipient ‖ amount ‖
/// messageSender ‖ maxFee ‖ feeExecuted ‖ expirationBlock ‖ hookData` (4, 32, 32, 32, 32, 32,
/// 32, 32 bytes, then the hook data).
#[derive(Debug, Clone, PartialEq)]
pub struct BurnMessageV2 {
    pub version: u32,
    pub burn_token: B256,
    pub mint_recipient: B256,
    pub amount: U256,
    pub message_sender: B256,
    pub max_fee: U256,
    pub fee_executed: U256,
    pub expiration_block: U256,
    pub hook_data: Bytes,
}

impl MessageV2 {
    /// The fixed part's length; Circle's transmitter refuses anything shorter.
    pub const HEADER: usize = 148;

    pub fn parse(b: &[u8]) -> Option<MessageV2> {
        if b.len() < Self::HEADER {
            return None;
        }
        Some(MessageV2 {
            version: u32_at(b, 0),
            source_domain: u32_at(b, 4),
            destination_domain: u32_at(b, 8),
            nonce: B256::from_slice(&b[12..44]),
            sender: B256::from_slice(&b[44..76]),
            recipient: B256::from_slice(&b[76..108]),
            destination_caller: B256::from_slice(&b[108..140]),
            min_finality_threshold: u32_at(b, 140),
            finality_threshold_executed: u32_at(b, 144),
            body: Bytes::copy_from_slice(&b[Self::HEADER..]),
        })
    }

    /// The message's bytes (what [`MessageV2::parse`] reads).
    pub fn encode(&self) -> Bytes {
        let mut m = Vec::with_capacity(Self::HEADER + self.body.len());
        m.extend_from_slice(&self.version.to_be_bytes());
        m.extend_from_slice(&self.source_domain.to_be_bytes());
        m.extend_from_slice(&self.destination_domain.to_be_bytes());
        m.extend_from_slice(self.nonce.as_slice());
        m.extend_from_slice(self.sender.as_slice());
        m.extend_from_slice(self.recipient.as_slice());
        m.extend_from_slice(self.destination_caller.as_slice());
        m.extend_from_slice(&self.min_finality_threshold.to_be_bytes());
        m.extend_from_slice(&self.finality_threshold_executed.to_be_bytes());
        m.extend_from_slice(&self.body);
        m.into()
    }

    /// The body as a V2 burn message, if it is one (at least its 228 fixed bytes).
    pub fn burn(&self) -> Option<BurnMessageV2> {
        let b = &self.body;
        if b.len() < 228 {
            return None;
        }
        Some(BurnMessageV2 {
            version: u32_at(b, 0),
            burn_token: B256::from_slice(&b[4..36]),
            mint_recipient: B256::from_slice(&b[36..68]),
            amount: U256::from_be_slice(&b[68..100]),
            message_sender: B256::from_slice(&b[100..132]),
            max_fee: U256::from_be_slice(&b[132..164]),
            fee_executed: U256::from_be_slice(&b[164..196]),
            expiration_block: U256::from_be_slice(&b[196..228]),
            hook_data: Bytes::copy_from_slice(&b[228..]),
        })
    }

    /// `MessageTransmitterV2.usedNonces` is keyed by the attested nonce itself (no domain, no
    /// hash; nonce 0 — the emitted message's — is never receivable).
    pub fn used_key(&self) -> B256 {
        self.nonce
    }

    /// Whether `attested` is this (emitted) burn as the attester filled it in: every field the
    /// source chain wrote is the same — domains, sender, recipient, destination caller, minimum
    /// finality, and in the body the token, mint recipient, amount, depositor, maximum fee and
    /// hook data — whatever the attester set as nonce, executed finality, fee and expiry. This
    /// is what binds a V2 mint to its burn (their hashes differ by construction).
    pub fn same_transfer(&self, attested: &MessageV2) -> bool {
        let header = self.version == attested.version
            && self.source_domain == attested.source_domain
            && self.destination_domain == attested.destination_domain
            && self.sender == attested.sender
            && self.recipient == attested.recipient
            && self.destination_caller == attested.destination_caller
            && self.min_finality_threshold == attested.min_finality_threshold;
        let body = match (self.burn(), attested.burn()) {
            (Some(a), Some(b)) => {
                a.version == b.version
                    && a.burn_token == b.burn_token
                    && a.mint_recipient == b.mint_recipient
                    && a.amount == b.amount
                    && a.message_sender == b.message_sender
                    && a.max_fee == b.max_fee
                    && a.hook_data == b.hook_data
            }
            _ => false,
        };
        header && body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The V2 burn's selector and event topic are Circle's (`docs/cctp-reference.md` §2.6).
    #[test]
    fn the_v2_burn_is_circles_call() {
        let call = burn_v2_calldata(
            U256::from(10u64),
            6,
            Address::repeat_byte(2),
            Address::repeat_byte(1),
            None,
            U256::from(1u64),
            FINALITY_FAST,
        );
        assert_eq!(&call[..4], &[0x8e, 0x02, 0x50, 0xee]);
        let (c, hook) = decode_burn_v2(&call).expect("a V2 burn");
        assert!(hook.is_empty());
        assert_eq!((c.maxFee, c.minFinalityThreshold, c.destinationCaller), (U256::from(1u64), 1000, B256::ZERO));
        assert!(decode_burn_v2(&burn_calldata(U256::from(10u64), 6, Address::ZERO, Address::ZERO)).is_none());
        assert_eq!(
            deposit_for_burn_v2_topic().to_string(),
            "0x0c8c1cbdc5190613ebd485511d4e2812cfa45eecb79d845893331fedad5130a5"
        );
    }

    /// Circle's V2 layout (offsets from `MessageV2.sol` / `BurnMessageV2.sol`): the emitted and
    /// the attested message are the same transfer although four fields differ; any field the
    /// source wrote that differs makes it another transfer.
    #[test]
    fn a_v2_message_parses_and_binds_to_its_burn_by_the_fields_the_attester_does_not_fill() {
        let v2 = |nonce: u8, executed: u32, amount: u64, fee: u64, expiry: u64, recipient: Address| {
            let mut m = 1u32.to_be_bytes().to_vec();
            m.extend_from_slice(&0u32.to_be_bytes());
            m.extend_from_slice(&6u32.to_be_bytes());
            m.extend_from_slice(&[nonce; 32]);
            m.extend_from_slice(word(Address::repeat_byte(0x11)).as_slice());
            m.extend_from_slice(word(Address::repeat_byte(0x22)).as_slice());
            m.extend_from_slice(&[0u8; 32]);
            m.extend_from_slice(&1000u32.to_be_bytes());
            m.extend_from_slice(&executed.to_be_bytes());
            assert_eq!(m.len(), MessageV2::HEADER);
            m.extend_from_slice(&1u32.to_be_bytes());
            m.extend_from_slice(word(Address::repeat_byte(0x33)).as_slice());
            m.extend_from_slice(word(recipient).as_slice());
            m.extend_from_slice(&U256::from(amount).to_be_bytes::<32>());
            m.extend_from_slice(word(Address::repeat_byte(0x44)).as_slice());
            m.extend_from_slice(&U256::from(500u64).to_be_bytes::<32>());
            m.extend_from_slice(&U256::from(fee).to_be_bytes::<32>());
            m.extend_from_slice(&U256::from(expiry).to_be_bytes::<32>());
            MessageV2::parse(&m).expect("a V2 message")
        };
        let to = Address::repeat_byte(0x55);
        let emitted = v2(0, 0, 1_000_000, 0, 0, to);
        let attested = v2(0xab, 1000, 1_000_000, 130, 9_999, to);
        assert_eq!(
            (attested.source_domain, attested.destination_domain, attested.min_finality_threshold),
            (0, 6, 1000)
        );
        assert_eq!((attested.nonce, attested.used_key()), (B256::repeat_byte(0xab), B256::repeat_byte(0xab)));
        let burn = attested.burn().expect("a V2 burn");
        assert_eq!(
            (burn.amount, burn.max_fee, burn.fee_executed),
            (U256::from(1_000_000), U256::from(500), U256::from(130))
        );
        assert_eq!((burn.expiration_block, address_of(&burn.mint_recipient)), (U256::from(9_999), Some(to)));
        assert!(burn.hook_data.is_empty());
        assert!(emitted.same_transfer(&attested));
        assert_eq!(MessageV2::parse(&attested.encode()), Some(attested.clone()), "encode is parse's inverse");
        assert!(!emitted.same_transfer(&v2(0xab, 1000, 1_000_001, 130, 9_999, to)), "another amount");
        assert!(!emitted.same_transfer(&v2(0xab, 1000, 1_000_000, 130, 9_999, Address::repeat_byte(9))), "recipient");
        assert!(MessageV2::parse(&[0u8; 147]).is_none());
        assert!(MessageV2::parse(&[0u8; 148]).expect("header only").burn().is_none());
    }

    #[test]
    fn a_burn_message_parses_and_round_trips_its_calls() {
        let (token, recipient, sender) = (Address::repeat_byte(1), Address::repeat_byte(2), Address::repeat_byte(3));
        let mut body = 0u32.to_be_bytes().to_vec();
        body.extend_from_slice(word(token).as_slice());
        body.extend_from_slice(word(recipient).as_slice());
        body.extend_from_slice(&U256::from(250u64).to_be_bytes::<32>());
        body.extend_from_slice(word(sender).as_slice());
        let mut m = 0u32.to_be_bytes().to_vec();
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(&1u32.to_be_bytes());
        m.extend_from_slice(&7u64.to_be_bytes());
        m.extend_from_slice(&[0u8; 96]);
        m.extend_from_slice(&body);
        let msg = Message::parse(&m).unwrap();
        assert_eq!((msg.source_domain, msg.destination_domain, msg.nonce), (0, 1, 7));
        let burn = msg.burn().unwrap();
        assert_eq!(address_of(&burn.mint_recipient), Some(recipient));
        assert_eq!(burn.amount, U256::from(250u64));
        let mut packed = 0u32.to_be_bytes().to_vec();
        packed.extend_from_slice(&7u64.to_be_bytes());
        assert_eq!(msg.used_key(), keccak256(packed));
        let call = burn_calldata(U256::from(5u64), 1, recipient, token);
        let c = decode_burn(&call).unwrap();
        assert_eq!((c.amount, c.destinationDomain, c.burnToken), (U256::from(5u64), 1, token));
        let m = Bytes::from(m);
        assert_eq!(decode_receive(&receive_calldata(&m, &Bytes::from(vec![9u8; 65]))).map(|r| r.0), Some(m));
        assert!(Message::parse(&[0u8; 100]).is_none());
    }
}
