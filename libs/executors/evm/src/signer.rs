//! `signer.evm.local`: signs EVM transfers with a key held in this process (from a variable
//! or a file, never logged). It signs only the payload whose hash the request allows, and
//! only a transaction that does what was approved: it decodes the transaction and compares
//! its chain id, recipient, value — or the ERC-20 `transfer` recipient and amount — with the
//! approved intent the sign request carries (`signing_intent`).

use alloy::consensus::{SignableTransaction, TxEnvelope};
use alloy::eips::eip2718::Encodable2718;
use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use alloy::signers::SignerSync;
use async_trait::async_trait;
use qtg_core::hash::sha256_hex;
use qtg_core::{SignRequest, SignResult};
use qtg_executor::{ExecutorError, SignError, Signer};
use serde_json::{json, Value};

use crate::calls::{
    address_of, decode_burn, decode_burn_v2, decode_receive, finality_of, AmountIs, Message, MessageV2,
};
use crate::tx::{base_units, decode_transfer, TxPayload, PAYLOAD_FORMAT};

pub struct LocalSigner {
    key: String,
    wallet: PrivateKeySigner,
}

impl std::fmt::Debug for LocalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSigner").field("key", &self.key).field("address", &self.wallet.address()).finish()
    }
}

impl LocalSigner {
    /// From a hex private key (`0x…`); the key never appears in an error.
    pub fn new(key: &str, private_key: &str) -> Result<LocalSigner, String> {
        let wallet: PrivateKeySigner = private_key
            .trim()
            .parse()
            .map_err(|_| format!("signer {key:?}: the private key is not a 32-byte hex secp256k1 key"))?;
        Ok(LocalSigner { key: key.to_string(), wallet })
    }

    pub fn address(&self) -> Address {
        self.wallet.address()
    }

    /// Recovery's zero-value send to itself with `nonce`: it moves nothing but gas, so it needs
    /// no approved intent; once final it consumes the nonce, and no other transaction with
    /// that nonce can be mined. Answers the raw transaction and its hash.
    pub fn sign_cancel(&self, chain_id: u64, nonce: u64, max_fee: u128, tip: u128) -> Result<(String, String), String> {
        let tx = alloy::consensus::TxEip1559 {
            chain_id,
            nonce,
            gas_limit: 21_000,
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip.min(max_fee),
            to: alloy::primitives::TxKind::Call(self.address()),
            value: U256::ZERO,
            access_list: Default::default(),
            input: Default::default(),
        };
        let signature = self.wallet.sign_hash_sync(&tx.signature_hash()).map_err(|e| format!("signing failed: {e}"))?;
        let envelope = TxEnvelope::from(tx.into_signed(signature));
        tracing::info!(
            signer_key = %self.key, chain_id, nonce, tx_hash = %envelope.tx_hash(),
            "signed a zero-value send to force the nonce"
        );
        Ok((format!("0x{}", alloy::primitives::hex::encode(envelope.encoded_2718())), envelope.tx_hash().to_string()))
    }

    /// Why the transaction must not be signed, if it must not.
    fn policy(&self, req: &SignRequest, p: &TxPayload) -> Result<(), String> {
        let intent = &req.signing_intent;
        if p.from != self.address() {
            return Err(format!("the transaction is from {}, this signer is {}", p.from, self.address()));
        }
        let chain = intent.chain_id.ok_or("the approved intent names no chain id")?;
        if p.chain_id != chain {
            return Err(format!("chain id {} is not the approved {chain}", p.chain_id));
        }
        let destination: Address = intent
            .destination
            .parse()
            .map_err(|_| format!("the approved destination {:?} is not an address", intent.destination))?;
        let decimals = intent.decimals.unwrap_or(18);
        let amount = base_units(&intent.amount, decimals)
            .ok_or_else(|| format!("the approved amount {:?} does not fit {decimals} decimals", intent.amount))?;
        let tx = p.check_consistent()?;
        let nonempty = |v: &Option<String>| v.as_deref().filter(|t| !t.is_empty()).map(str::to_string);
        let parse = |what: &str, v: &str| {
            v.parse::<Address>().map_err(|_| format!("the approved {what} {v:?} is not an address"))
        };
        match (nonempty(&intent.contract), nonempty(&intent.token_contract)) {
            (None, None) => {
                if p.to != destination || tx.value != amount || !tx.input.is_empty() {
                    return Err(format!(
                        "a native transfer of {} wei to {} with {} bytes of data is not the approved {amount} wei \
                         to {destination}",
                        tx.value,
                        p.to,
                        tx.input.len()
                    ));
                }
            }
            (None, Some(token)) => {
                let token = parse("token", &token)?;
                let (to, sent) =
                    decode_transfer(&tx.input).ok_or("the call is not an ERC-20 transfer(address,uint256)")?;
                if p.to != token || tx.value != U256::ZERO || to != destination || sent != amount {
                    return Err(format!(
                        "transfer({to}, {sent}) on {} with value {} is not the approved {amount} to \
                         {destination} on {token}",
                        p.to, tx.value
                    ));
                }
            }
            (Some(contract), token) => {
                // A contract call the plan names: only to that contract, carrying no coin, and
                // only a call whose effect this signer can read back to the approved intent.
                let contract = parse("contract", &contract)?;
                if let Some(ccip) = &intent.ccip {
                    if p.to != contract {
                        return Err(format!("a call to {} is not a call to the approved router {contract}", p.to));
                    }
                    let token =
                        parse("token", token.as_deref().ok_or("a CCIP send needs the approved token_contract")?)?;
                    return Self::ccip_send(tx.value, &tx.input, ccip, token, destination, amount);
                }
                if p.to != contract || tx.value != U256::ZERO {
                    return Err(format!(
                        "a call to {} with value {} is not a call to the approved contract {contract}",
                        p.to, tx.value
                    ));
                }
                let domain = intent.destination_domain.ok_or("the approved intent names no destination_domain")?;
                Self::bridge_call(&tx.input, intent, token.as_deref(), destination, amount, domain)?;
            }
        }
        Ok(())
    }

    /// A CCIP `ccipSend` checked against the approved send: the destination chain, the receiver,
    /// exactly one token amount (the approved token and amount), the data, the receiver's gas
    /// and ordering, and the fee token; a native fee (the transaction's value) at most the
    /// approved cap. A fee in LINK is pulled by the router within the sender's allowance: the
    /// executor's preflight holds it to the cap before anything is signed.
    fn ccip_send(
        value: U256,
        input: &[u8],
        ccip: &qtg_core::CcipIntent,
        token: Address,
        receiver: Address,
        amount: U256,
    ) -> Result<(), String> {
        use crate::ccip_calls::{decode_ccip_send, extra_args, EVMTokenAmount};
        let (selector, m) =
            decode_ccip_send(input).ok_or("the call is not Router.ccipSend: this signer signs no other")?;
        let approved_selector: u64 = ccip.destination_chain_selector.trim().parse().map_err(|_| {
            format!("the approved destination_chain_selector {:?} is not a uint64", ccip.destination_chain_selector)
        })?;
        let data: alloy::primitives::Bytes =
            ccip.data.trim().parse().map_err(|_| format!("the approved data {:?} is not hex", ccip.data))?;
        let cap = base_units(ccip.max_fee.trim(), 18)
            .ok_or_else(|| format!("the approved max_fee {:?} is not an amount with 18 decimals", ccip.max_fee))?;
        let tokens = [EVMTokenAmount { token, amount }];
        if selector != approved_selector
            || m.receiver.as_ref() != receiver.into_word().as_slice()
            || m.tokenAmounts != tokens
            || m.data != data
            || m.extraArgs != extra_args(ccip.gas_limit, ccip.allow_out_of_order_execution)
        {
            return Err(format!(
                "ccipSend to chain {selector}, receiver {}, tokens {:?}, {} bytes of data, extra args {} is not the \
                 approved {amount} of {token} to {receiver} on chain {approved_selector} (gas limit {}, out of \
                 order {})",
                m.receiver,
                m.tokenAmounts.iter().map(|t| (t.token, t.amount)).collect::<Vec<_>>(),
                m.data.len(),
                m.extraArgs,
                ccip.gas_limit,
                ccip.allow_out_of_order_execution
            ));
        }
        if ccip.fee_token.trim().eq_ignore_ascii_case("native") {
            if m.feeToken != Address::ZERO || value > cap {
                return Err(format!(
                    "a fee of {value} wei in {} is not the approved native fee of at most {cap} wei",
                    m.feeToken
                ));
            }
        } else {
            let fee_token: Address =
                ccip.fee_token.trim().parse().map_err(|_| {
                    format!("the approved fee_token {:?} is neither native nor an address", ccip.fee_token)
                })?;
            if m.feeToken != fee_token || value != U256::ZERO {
                return Err(format!(
                    "a fee in {} with value {value} is not the approved fee in {fee_token} (no value)",
                    m.feeToken
                ));
            }
        }
        Ok(())
    }

    /// A CCTP burn or mint call (V1 or V2) checked against the approved token, recipient,
    /// amount and destination domain — and on V2 the approved terms: finality, fee cap, what
    /// the amount is, destination caller.
    fn bridge_call(
        input: &[u8],
        intent: &qtg_core::SigningIntent,
        token: Option<&str>,
        destination: Address,
        amount: U256,
        domain: u32,
    ) -> Result<(), String> {
        let approved_token = || -> Result<Address, String> {
            token
                .ok_or("a burn needs the approved token_contract")?
                .parse()
                .map_err(|_| "the approved token_contract is not an address".to_string())
        };
        let amount_is = || AmountIs::parse(intent.amount_is.as_deref());
        let cap = || -> Result<Option<U256>, String> {
            let decimals = intent.decimals.unwrap_or(18);
            intent
                .bridge_max_fee
                .as_deref()
                .map(|f| {
                    base_units(f.trim(), decimals)
                        .ok_or_else(|| format!("the approved max_fee {f:?} is not an amount with {decimals} decimals"))
                })
                .transpose()
        };
        if let Some(burn) = decode_burn(input) {
            let token = approved_token()?;
            if burn.burnToken != token
                || burn.amount != amount
                || address_of(&burn.mintRecipient) != Some(destination)
                || burn.destinationDomain != domain
            {
                return Err(format!(
                    "depositForBurn({}, domain {}, {}, {}) is not the approved {amount} of {token} to \
                     {destination} on domain {domain}",
                    burn.amount, burn.destinationDomain, burn.mintRecipient, burn.burnToken
                ));
            }
            return Ok(());
        }
        if let Some((burn, hook)) = decode_burn_v2(input) {
            let approved_hook = match intent.hook_data.as_deref().map(str::trim).filter(|h| !h.is_empty()) {
                Some(h) => h
                    .parse::<alloy::primitives::Bytes>()
                    .map_err(|_| format!("the approved hook_data {h:?} is not hex"))?,
                None => Default::default(),
            };
            if hook != approved_hook {
                return Err(format!("the burn's hook data {hook} is not the approved {approved_hook}"));
            }
            let token = approved_token()?;
            let finality = finality_of(intent.finality.as_deref())?;
            let cap = cap()?.ok_or("a V2 burn needs the approved max_fee")?;
            let want = amount_is()?.burned(amount, burn.maxFee);
            let caller = match intent.destination_caller.as_deref().filter(|c| !c.trim().is_empty()) {
                Some(c) => c
                    .trim()
                    .parse::<Address>()
                    .map(crate::calls::word)
                    .map_err(|_| format!("the approved destination_caller {c:?} is not an address"))?,
                None => Default::default(),
            };
            if burn.burnToken != token
                || burn.amount != want
                || address_of(&burn.mintRecipient) != Some(destination)
                || burn.destinationDomain != domain
                || burn.minFinalityThreshold != finality
                || burn.maxFee > cap
                || burn.destinationCaller != caller
            {
                return Err(format!(
                    "depositForBurn({}, domain {}, {}, {}, caller {}, maxFee {}, finality {}) is not the approved \
                     {want} of {token} to {destination} on domain {domain}, caller {caller}, maxFee at most {cap}, \
                     finality {finality}",
                    burn.amount,
                    burn.destinationDomain,
                    burn.mintRecipient,
                    burn.burnToken,
                    burn.destinationCaller,
                    burn.maxFee,
                    burn.minFinalityThreshold
                ));
            }
            return Ok(());
        }
        if let Some((message, _)) = decode_receive(input) {
            if let Some(m) = MessageV2::parse(&message).filter(|m| m.version == 1) {
                let b = m.burn().ok_or("the message body is not a CCTP V2 burn message")?;
                if m.destination_domain != domain || address_of(&b.mint_recipient) != Some(destination) {
                    return Err(format!(
                        "receiveMessage to {} on domain {} is not the approved {destination} on domain {domain}",
                        b.mint_recipient, m.destination_domain
                    ));
                }
                amount_is()?.check(amount, &b)?;
                if let Some(cap) = cap()? {
                    if b.max_fee > cap {
                        return Err(format!("the message's maxFee {} is above the approved {cap}", b.max_fee));
                    }
                }
                return Ok(());
            }
            let m = Message::parse(&message).ok_or("the message is not a CCTP message")?;
            let b = m.burn().ok_or("the message body is not a CCTP burn message")?;
            if m.destination_domain != domain
                || b.amount != amount
                || address_of(&b.mint_recipient) != Some(destination)
            {
                return Err(format!(
                    "receiveMessage of {} to {} on domain {} is not the approved {amount} to {destination} on \
                     domain {domain}",
                    b.amount, b.mint_recipient, m.destination_domain
                ));
            }
            return Ok(());
        }
        Err("the call is neither depositForBurn nor receiveMessage: this signer signs no other contract call".into())
    }
}

#[async_trait]
impl Signer for LocalSigner {
    async fn sign(&self, req: &SignRequest) -> Result<SignResult, SignError> {
        let actual = sha256_hex(req.payload.as_bytes());
        if actual != req.payload_hash || actual != req.signing_intent.allowed_payload_hash {
            return Err(SignError::Refused(format!(
                "payload hash {actual} is not the allowed_payload_hash {}",
                req.signing_intent.allowed_payload_hash
            )));
        }
        if req.payload_format != PAYLOAD_FORMAT {
            return Err(SignError::Refused(format!("payload format {:?} is not {PAYLOAD_FORMAT}", req.payload_format)));
        }
        let payload: TxPayload = serde_json::from_str(&req.payload)
            .map_err(|e| SignError::Refused(format!("the payload is not an EVM transfer: {e}")))?;
        self.policy(req, &payload).map_err(|why| {
            tracing::warn!(signer_key = %self.key, request_node_id = %req.request_node_id, %why, "refused to sign");
            SignError::Refused(why)
        })?;
        let tx = payload.transaction().map_err(SignError::Refused)?;
        let signature = self
            .wallet
            .sign_hash_sync(&tx.signature_hash())
            .map_err(|e| SignError::Call(ExecutorError::Unavailable(format!("signing failed: {e}"))))?;
        let envelope = TxEnvelope::from(tx.into_signed(signature));
        Ok(SignResult {
            signature: format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
            signed_payload: Some(format!("0x{}", alloy::primitives::hex::encode(envelope.encoded_2718()))),
            signer_address: Some(self.address().to_checksum(None)),
            signed_tx_hash: Some(envelope.tx_hash().to_string()),
        })
    }

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        Ok(Some(json!({"status": "ok", "signer_address": self.address().to_checksum(None)})))
    }
}

#[cfg(test)]
mod tests {
    use alloy::consensus::TxEip1559;
    use alloy::primitives::{Bytes, TxKind};
    use qtg_core::SigningIntent;

    use super::*;
    use crate::tx::transfer_calldata;

    const KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    fn request(payload: &TxPayload, destination: Address, amount: &str, token: Option<Address>) -> SignRequest {
        let text = serde_json::to_string(payload).unwrap();
        let hash = sha256_hex(text.as_bytes());
        SignRequest {
            protocol_version: "1.0".into(),
            request_id: "r".into(),
            request_node_id: "n".into(),
            signer_key: "signer.evm.local".into(),
            signing_intent: SigningIntent {
                action: "evm_transfer".into(),
                asset: "ETH".into(),
                amount: amount.into(),
                destination: destination.to_string(),
                max_fee_usd: None,
                chain_family: "evm".into(),
                allowed_payload_hash: hash.clone(),
                chain_id: Some(31337),
                token_contract: token.map(|t| t.to_string()),
                decimals: Some(18),
                contract: None,
                destination_domain: None,
                bridge_max_fee: None,
                amount_is: None,
                finality: None,
                destination_caller: None,
                hook_data: None,
                ccip: None,
            },
            payload_format: PAYLOAD_FORMAT.into(),
            payload: text,
            payload_hash: hash,
            metadata: json!({}),
        }
    }

    fn native(signer: &LocalSigner, to: Address, wei: u128, chain_id: u64) -> TxPayload {
        let tx = TxEip1559 {
            chain_id,
            nonce: 3,
            gas_limit: 21_000,
            max_fee_per_gas: 10,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(to),
            value: U256::from(wei),
            access_list: Default::default(),
            input: Bytes::new(),
        };
        TxPayload::of(&tx, signer.address(), 1, None, to, U256::from(wei))
    }

    #[tokio::test]
    async fn signs_what_was_approved_and_refuses_anything_else() {
        let s = LocalSigner::new("signer.evm.local", KEY).unwrap();
        let dest = Address::repeat_byte(0x22);
        let ok =
            s.sign(&request(&native(&s, dest, 1_500_000_000_000_000_000, 31337), dest, "1.5", None)).await.unwrap();
        assert_eq!(
            ok.signer_address.as_deref().map(str::to_ascii_lowercase).as_deref(),
            Some("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266")
        );
        assert!(ok.signed_payload.unwrap().starts_with("0x02"));
        let refused = |r: Result<SignResult, SignError>| match r {
            Err(SignError::Refused(why)) => why,
            other => panic!("signed: {other:?}"),
        };
        // Another recipient, another amount, another chain than approved.
        let other = Address::repeat_byte(0x33);
        assert!(refused(
            s.sign(&request(&native(&s, other, 1_500_000_000_000_000_000, 31337), dest, "1.5", None)).await
        )
        .contains("not the approved"));
        assert!(refused(
            s.sign(&request(&native(&s, dest, 2_000_000_000_000_000_000, 31337), dest, "1.5", None)).await
        )
        .contains("not the approved"));
        assert!(refused(s.sign(&request(&native(&s, dest, 1_500_000_000_000_000_000, 1), dest, "1.5", None)).await)
            .contains("chain id"));
        // A tampered payload: the fields changed after the hash of the encoding was taken.
        let mut tampered = native(&s, dest, 1_500_000_000_000_000_000, 31337);
        tampered.to = other;
        tampered.recipient = other;
        assert!(refused(s.sign(&request(&tampered, other, "1.5", None)).await).contains("unsigned_tx"));
        // A payload whose hash is not the allowed one.
        let mut r = request(&native(&s, dest, 1_500_000_000_000_000_000, 31337), dest, "1.5", None);
        r.signing_intent.allowed_payload_hash = "00".repeat(32);
        assert!(refused(s.sign(&r).await).contains("allowed_payload_hash"));
        // An ERC-20 transfer must call the approved token with the approved recipient and amount.
        let token = Address::repeat_byte(0x44);
        let call = TxEip1559 {
            chain_id: 31337,
            nonce: 4,
            gas_limit: 60_000,
            max_fee_per_gas: 10,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(token),
            value: U256::ZERO,
            access_list: Default::default(),
            input: transfer_calldata(other, U256::from(250u64) * U256::from(10u64).pow(U256::from(18u64))),
        };
        let p = TxPayload::of(&call, s.address(), 2, Some(token), other, U256::ZERO);
        assert!(refused(s.sign(&request(&p, dest, "250", Some(token))).await).contains("not the approved"));
        assert!(s.sign(&request(&p, other, "250", Some(token))).await.is_ok());
        assert!(!format!("{s:?}").contains("ac0974"), "the key never reaches Debug");
    }

    /// A CCIP send is signed only to the approved router, destination chain, receiver, token
    /// and amount, data, gas and ordering, and fee token; a native fee above the approved cap is
    /// refused.
    #[tokio::test]
    async fn signs_a_ccip_send_only_as_approved() {
        use crate::ccip_calls::{ccip_send_calldata, extra_args, message};
        let s = LocalSigner::new("signer.evm.local", KEY).unwrap();
        let (router, token, dest) =
            (Address::repeat_byte(0x55), Address::repeat_byte(0x66), Address::repeat_byte(0x22));
        let amount = U256::from(7u64) * U256::from(10u64).pow(U256::from(18u64));
        let send = |to: Address, selector: u64, receiver: Address, value: u64, fee_token: Address, gas: u64| {
            let m = message(receiver, token, amount, Default::default(), fee_token, extra_args(gas, true));
            let call = TxEip1559 {
                chain_id: 31337,
                nonce: 5,
                gas_limit: 300_000,
                max_fee_per_gas: 10,
                max_priority_fee_per_gas: 1,
                to: TxKind::Call(to),
                value: U256::from(value),
                access_list: Default::default(),
                input: ccip_send_calldata(selector, m),
            };
            TxPayload::of(&call, s.address(), 3, Some(token), receiver, amount)
        };
        let approved = |p: &TxPayload, fee_token: &str| {
            let mut r = request(p, dest, "7", Some(token));
            r.signing_intent.contract = Some(router.to_string());
            r.signing_intent.ccip = Some(qtg_core::CcipIntent {
                destination_chain_selector: "3379446385462418246".into(),
                fee_token: fee_token.into(),
                max_fee: "0.01".into(),
                gas_limit: 0,
                allow_out_of_order_execution: true,
                data: "0x".into(),
            });
            r
        };
        let sel = 3379446385462418246;
        let link = Address::repeat_byte(0x99);
        let fee = 9_000_000_000_000_000; // 0.009: within the cap
        assert!(s.sign(&approved(&send(router, sel, dest, fee, Address::ZERO, 0), "native")).await.is_ok());
        assert!(s.sign(&approved(&send(router, sel, dest, 0, link, 0), &link.to_string())).await.is_ok());
        let refused = |r: Result<SignResult, SignError>| matches!(r, Err(SignError::Refused(_)));
        for (what, p, fee_token) in [
            ("another router", send(Address::repeat_byte(0x77), sel, dest, fee, Address::ZERO, 0), "native"),
            ("another destination chain", send(router, 1, dest, fee, Address::ZERO, 0), "native"),
            ("another receiver", send(router, sel, Address::repeat_byte(0x33), fee, Address::ZERO, 0), "native"),
            ("a native fee above the cap", send(router, sel, dest, 11_000_000_000_000_000, Address::ZERO, 0), "native"),
            ("another gas limit", send(router, sel, dest, fee, Address::ZERO, 1), "native"),
            ("a fee in a token when native was approved", send(router, sel, dest, 0, link, 0), "native"),
            ("value beside a LINK fee", send(router, sel, dest, 1, link, 0), &link.to_string()),
        ] {
            assert!(refused(s.sign(&approved(&p, fee_token)).await), "{what}");
        }
    }

    /// A CCTP burn is signed only to the approved messenger, for the approved token, amount,
    /// recipient and destination domain; a plan without `contract` never lets a burn through.
    #[tokio::test]
    async fn signs_a_burn_only_as_approved() {
        let s = LocalSigner::new("signer.evm.local", KEY).unwrap();
        let (messenger, usdc, dest) =
            (Address::repeat_byte(0x55), Address::repeat_byte(0x66), Address::repeat_byte(0x22));
        let burn = |domain: u32, to: Address| {
            let call = TxEip1559 {
                chain_id: 31337,
                nonce: 5,
                gas_limit: 200_000,
                max_fee_per_gas: 10,
                max_priority_fee_per_gas: 1,
                to: TxKind::Call(to),
                value: U256::ZERO,
                access_list: Default::default(),
                input: crate::calls::burn_calldata(U256::from(7_000_000u64), domain, dest, usdc),
            };
            TxPayload::of(&call, s.address(), 3, Some(usdc), dest, U256::from(7_000_000u64))
        };
        let approved = |p: &TxPayload, contract: Option<Address>| {
            let mut r = request(p, dest, "7", Some(usdc));
            r.signing_intent.decimals = Some(6);
            r.signing_intent.contract = contract.map(|c| c.to_string());
            r.signing_intent.destination_domain = Some(1);
            r
        };
        assert!(s.sign(&approved(&burn(1, messenger), Some(messenger))).await.is_ok());
        let refused = |r: Result<SignResult, SignError>| matches!(r, Err(SignError::Refused(_)));
        assert!(refused(s.sign(&approved(&burn(2, messenger), Some(messenger))).await), "another domain");
        assert!(
            refused(s.sign(&approved(&burn(1, Address::repeat_byte(0x77)), Some(messenger))).await),
            "another contract"
        );
        assert!(refused(s.sign(&approved(&burn(1, messenger), None)).await), "a transfer plan never signs a burn");
    }

    /// A V2 burn is signed only within the approved terms: finality, a `maxFee` at most the
    /// approved cap, the amount as approved (grossed up by `maxFee` when it is what must be
    /// delivered), no destination caller unless approved; and a V2 mint only of a message that
    /// delivers the approved amount to the approved recipient.
    #[tokio::test]
    async fn signs_a_v2_burn_and_mint_only_within_the_approved_terms() {
        use crate::calls::{burn_v2_calldata, MessageV2, FINALITY_FAST, FINALITY_STANDARD};
        let s = LocalSigner::new("signer.evm.local", KEY).unwrap();
        let (messenger, usdc, dest) =
            (Address::repeat_byte(0x55), Address::repeat_byte(0x66), Address::repeat_byte(0x22));
        let tx = |input: Bytes| {
            let call = TxEip1559 {
                chain_id: 31337,
                nonce: 5,
                gas_limit: 200_000,
                max_fee_per_gas: 10,
                max_priority_fee_per_gas: 1,
                to: TxKind::Call(messenger),
                value: U256::ZERO,
                access_list: Default::default(),
                input,
            };
            TxPayload::of(&call, s.address(), 3, Some(usdc), dest, U256::ZERO)
        };
        let burn = |amount: u64, max_fee: u64, finality: u32, caller: Option<Address>| {
            tx(burn_v2_calldata(U256::from(amount), 1, dest, usdc, caller, U256::from(max_fee), finality))
        };
        let approved = |p: &TxPayload, amount_is: Option<&str>| {
            let mut r = request(p, dest, "7", Some(usdc));
            r.signing_intent.decimals = Some(6);
            r.signing_intent.contract = Some(messenger.to_string());
            r.signing_intent.destination_domain = Some(1);
            r.signing_intent.bridge_max_fee = Some("0.01".into());
            r.signing_intent.finality = Some("fast".into());
            r.signing_intent.amount_is = amount_is.map(str::to_string);
            r
        };
        let refused = |r: Result<SignResult, SignError>| match r {
            Err(SignError::Refused(why)) => why,
            other => panic!("signed: {other:?}"),
        };
        assert!(s.sign(&approved(&burn(7_000_000, 10_000, FINALITY_FAST, None), None)).await.is_ok());
        assert!(s.sign(&approved(&burn(7_000_000, 5_000, FINALITY_FAST, None), None)).await.is_ok(), "below the cap");
        assert!(
            refused(s.sign(&approved(&burn(7_000_000, 10_001, FINALITY_FAST, None), None)).await).contains("maxFee")
        );
        assert!(refused(s.sign(&approved(&burn(7_000_000, 10_000, FINALITY_STANDARD, None), None)).await)
            .contains("finality"));
        let caller = Some(Address::repeat_byte(0x99));
        assert!(
            refused(s.sign(&approved(&burn(7_000_000, 10_000, FINALITY_FAST, caller), None)).await).contains("caller")
        );
        assert!(
            s.sign(&approved(&burn(7_010_000, 10_000, FINALITY_FAST, None), Some("delivered"))).await.is_ok(),
            "delivered: the amount plus maxFee"
        );
        assert!(refused(s.sign(&approved(&burn(7_000_000, 10_000, FINALITY_FAST, None), Some("delivered"))).await)
            .contains("not the approved"));
        // Hook data only as approved: none approved, none signed; approved, exactly that.
        let hooked = tx(crate::calls::burn_v2_with_hook_calldata(
            U256::from(7_000_000u64),
            1,
            dest,
            usdc,
            None,
            U256::from(10_000u64),
            FINALITY_FAST,
            Bytes::from(vec![0xde, 0xad]),
        ));
        assert!(refused(s.sign(&approved(&hooked, None)).await).contains("hook data"));
        let mut with_hook = approved(&hooked, None);
        with_hook.signing_intent.hook_data = Some("0xdead".into());
        assert!(s.sign(&with_hook).await.is_ok());
        with_hook.signing_intent.hook_data = Some("0xbeef".into());
        assert!(refused(s.sign(&with_hook).await).contains("hook data"));
        let mut no_cap = approved(&burn(7_000_000, 0, FINALITY_FAST, None), None);
        no_cap.signing_intent.bridge_max_fee = None;
        assert!(refused(s.sign(&no_cap).await).contains("max_fee"));
        // The mint: the attested message, fee executed within its maxFee.
        let message = |amount: u64, max_fee: u64, fee: u64| {
            let mut body = vec![0, 0, 0, 1];
            body.extend_from_slice(usdc.into_word().as_slice());
            body.extend_from_slice(dest.into_word().as_slice());
            for w in [amount, 0, max_fee, fee, 0] {
                body.extend_from_slice(&U256::from(w).to_be_bytes::<32>());
            }
            body[100..132].copy_from_slice(messenger.into_word().as_slice());
            MessageV2 {
                version: 1,
                source_domain: 0,
                destination_domain: 1,
                nonce: alloy::primitives::B256::repeat_byte(7),
                sender: Default::default(),
                recipient: Default::default(),
                destination_caller: Default::default(),
                min_finality_threshold: FINALITY_FAST,
                finality_threshold_executed: FINALITY_FAST,
                body: body.into(),
            }
            .encode()
        };
        let mint = |m: Bytes| tx(crate::calls::receive_calldata(&m, &Bytes::from(vec![1u8; 65])));
        assert!(s.sign(&approved(&mint(message(7_000_000, 10_000, 700)), None)).await.is_ok());
        assert!(refused(s.sign(&approved(&mint(message(7_000_001, 10_000, 700)), None)).await).contains("burns"));
        assert!(refused(s.sign(&approved(&mint(message(7_000_000, 10_000, 10_001)), None)).await).contains("fee"));
        assert!(refused(s.sign(&approved(&mint(message(7_000_000, 20_000, 700)), None)).await).contains("maxFee"));
    }
}
