//! The prepared transfer: an unsigned EIP-1559 transaction as JSON (its fields, its unsigned
//! encoding and its signing hash), what the signer checks it against, and the amounts.

use alloy::consensus::{SignableTransaction, TxEip1559};
use alloy::primitives::{Address, Bytes, TxKind, U256};
use alloy::sol;
use alloy::sol_types::SolCall;
use serde::{Deserialize, Serialize};

sol! {
    function transfer(address to, uint256 amount) returns (bool);
    function balanceOf(address owner) returns (uint256);
    function decimals() returns (uint8);
}

/// `payload_format` of a prepared EVM transfer.
pub const PAYLOAD_FORMAT: &str = "evm.eip1559.json";

/// The prepared action's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TxPayload {
    pub chain_id: u64,
    pub from: Address,
    pub nonce: u64,
    /// The nonce reservation this transaction uses.
    pub reservation_id: i64,
    pub to: Address,
    /// wei, decimal.
    pub value: String,
    pub input: Bytes,
    pub gas_limit: u64,
    pub max_fee_per_gas: String,
    pub max_priority_fee_per_gas: String,
    /// `0x02 ‖ rlp(fields)`: what is signed (an HSM may sign exactly these bytes).
    pub unsigned_tx: Bytes,
    /// keccak256 of `unsigned_tx`.
    pub signing_hash: String,
    /// The ERC-20 contract, or absent for the chain's native coin.
    pub token: Option<Address>,
    /// Who receives the funds (the `to` of a native transfer, the ERC-20 recipient).
    pub recipient: Address,
    /// Base units moved (wei, or the token's smallest unit), decimal.
    pub amount_base_units: String,
}

impl TxPayload {
    /// The transaction these fields describe.
    pub fn transaction(&self) -> Result<TxEip1559, String> {
        let num = |what: &str, v: &str| v.parse::<u128>().map_err(|_| format!("{what} {v:?} is not a decimal"));
        Ok(TxEip1559 {
            chain_id: self.chain_id,
            nonce: self.nonce,
            gas_limit: self.gas_limit,
            max_fee_per_gas: num("max_fee_per_gas", &self.max_fee_per_gas)?,
            max_priority_fee_per_gas: num("max_priority_fee_per_gas", &self.max_priority_fee_per_gas)?,
            to: TxKind::Call(self.to),
            value: U256::from_str_radix(&self.value, 10)
                .map_err(|_| format!("value {:?} is not a decimal", self.value))?,
            access_list: Default::default(),
            input: self.input.clone(),
        })
    }

    /// Builds the payload of `tx`, with its unsigned encoding and signing hash.
    pub fn of(
        tx: &TxEip1559,
        from: Address,
        reservation_id: i64,
        token: Option<Address>,
        recipient: Address,
        amount: U256,
    ) -> TxPayload {
        let to = match tx.to {
            TxKind::Call(a) => a,
            TxKind::Create => Address::ZERO,
        };
        TxPayload {
            chain_id: tx.chain_id,
            from,
            nonce: tx.nonce,
            reservation_id,
            to,
            value: tx.value.to_string(),
            input: tx.input.clone(),
            gas_limit: tx.gas_limit,
            max_fee_per_gas: tx.max_fee_per_gas.to_string(),
            max_priority_fee_per_gas: tx.max_priority_fee_per_gas.to_string(),
            unsigned_tx: tx.encoded_for_signing().into(),
            signing_hash: tx.signature_hash().to_string(),
            token,
            recipient,
            amount_base_units: amount.to_string(),
        }
    }

    /// The fields, the unsigned encoding and the signing hash agree.
    pub fn check_consistent(&self) -> Result<TxEip1559, String> {
        let tx = self.transaction()?;
        if tx.encoded_for_signing() != self.unsigned_tx.as_ref() {
            return Err("unsigned_tx is not the encoding of the payload's fields".into());
        }
        if tx.signature_hash().to_string() != self.signing_hash {
            return Err("signing_hash is not the hash of the payload's transaction".into());
        }
        Ok(tx)
    }
}

/// The ERC-20 `transfer(to, amount)` calldata.
pub fn transfer_calldata(to: Address, amount: U256) -> Bytes {
    transferCall { to, amount }.abi_encode().into()
}

/// `(to, amount)` of a `transfer` call, if `input` is one.
pub fn decode_transfer(input: &[u8]) -> Option<(Address, U256)> {
    transferCall::abi_decode(input).ok().map(|c| (c.to, c.amount))
}

pub fn balance_of_calldata(owner: Address) -> Bytes {
    balanceOfCall { owner }.abi_encode().into()
}

pub fn decimals_calldata() -> Bytes {
    decimalsCall {}.abi_encode().into()
}

/// A decimal amount (`"1.5"`) in base units of `decimals` (`1500000000000000000` for 18).
pub fn base_units(amount: &str, decimals: u32) -> Option<U256> {
    let (int, frac) = amount.split_once('.').unwrap_or((amount, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > decimals as usize {
        return None;
    }
    let digits = format!("{int}{frac:0<width$}", width = decimals as usize);
    U256::from_str_radix(&digits, 10).ok()
}

/// Base units as a decimal amount of `decimals` (`1500000` with 6 → `"1.5"`).
pub fn format_units(units: U256, decimals: u32) -> String {
    let digits = units.to_string();
    let d = decimals as usize;
    if d == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = d + 1);
    let (int, frac) = padded.split_at(padded.len() - d);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_units_format_back() {
        assert_eq!(format_units(U256::from(1_500_000u64), 6), "1.5");
        assert_eq!(format_units(U256::from(5u64), 6), "0.000005");
        assert_eq!(format_units(U256::ZERO, 18), "0");
        assert_eq!(format_units(U256::from(42u64), 0), "42");
        assert_eq!(base_units(&format_units(U256::from(123_456_789u64), 6), 6), Some(U256::from(123_456_789u64)));
    }

    #[test]
    fn amounts_in_base_units() {
        assert_eq!(base_units("1.5", 18), Some(U256::from(1_500_000_000_000_000_000u128)));
        assert_eq!(base_units("100", 6), Some(U256::from(100_000_000u64)));
        assert_eq!(base_units("0.0000001", 6), None, "finer than the token");
        assert_eq!(base_units("1.50", 1), Some(U256::from(15u64)));
        assert_eq!(base_units("-1", 6), None);
    }

    #[test]
    fn transfer_calldata_round_trips() {
        let to = Address::repeat_byte(0x11);
        let data = transfer_calldata(to, U256::from(7u64));
        assert_eq!(&data[..4], &[0xa9, 0x05, 0x9c, 0xbb], "transfer(address,uint256)");
        assert_eq!(decode_transfer(&data), Some((to, U256::from(7u64))));
    }
}
