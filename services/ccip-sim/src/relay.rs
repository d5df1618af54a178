//! `qtg-ccip-sim relay`: the stand-in for CCIP's off-chain network over a deployed lane. Each
//! round it reads A's OnRamp for messages to B that B's OffRamp has not committed yet (its
//! `minSeqNr` onwards, in order: commits cover sequence numbers without gaps), commits each one's
//! merkle root — a single leaf, `Internal._hash` of the message as B sees it — signed by F+1 of
//! the OCR signers, then executes every committed message still UNTOUCHED, one report each. A
//! message whose execution fails stays FAILURE: as on the real network, only manual execution
//! can deliver it then.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{keccak256, Address, Bytes, B256, U256};
use alloy::signers::SignerSync;
use alloy::sol_types::{SolCall, SolEvent, SolValue};
use clap::Args;
use qtg_ccip::abi::{self as lane_abi, CCIPMessageSent, EVM2AnyRampMessage};
use serde_json::{json, Value};

use crate::abi::*;
use crate::deploy::{commit_digest, exec_digest, ocr_signers};
use crate::Chain;

/// `Internal.GAS_ESTIMATION_SENDER`: the OffRamp skips the transmitter check for it and
/// re-reverts out-of-gas failures, so an estimate from it is one that lets the message run.
const GAS_ESTIMATION_SENDER: &str = "0x00c11c11c11c11c11c11c11c11c11c11c11c11c1";

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// The lane `deploy` wrote.
    #[arg(long)]
    lane: PathBuf,
    /// Milliseconds between rounds.
    #[arg(long, default_value_t = 500)]
    poll_ms: u64,
}

/// The lane's addresses the relay uses.
struct Lane {
    a: Chain,
    b: Chain,
    on_ramp: Address,
    off_ramp: Address,
    source_selector: u64,
    destination_selector: u64,
    transmitter: Address,
}

fn address(v: &Value, what: &str) -> anyhow::Result<Address> {
    v.as_str().and_then(|a| a.parse().ok()).ok_or_else(|| anyhow::anyhow!("the lane file has no {what}"))
}

fn selector(v: &Value, what: &str) -> anyhow::Result<u64> {
    qtg_ccip::chains::uint64(v).ok_or_else(|| anyhow::anyhow!("the lane file has no {what}"))
}

/// A 64-bit value as an indexed topic.
fn topic(n: u64) -> String {
    B256::left_padding_from(&n.to_be_bytes()).to_string()
}

/// The message as the OffRamp executes it (`Internal.Any2EVMRampMessage`), from what the
/// OnRamp emitted: the sender and source pools as 32-byte ABI words, the receiver and the
/// destination tokens decoded to addresses, the gas limit from the extra arguments.
pub fn to_any2evm(m: &EVM2AnyRampMessage) -> anyhow::Result<Any2EVMRampMessage> {
    let receiver = qtg_evm::ccip_calls::receiver_of(&m.receiver)
        .ok_or_else(|| anyhow::anyhow!("message {}: the receiver is not an EVM address", m.header.messageId))?;
    let gas_limit = qtg_evm::ccip_calls::decode_extra_args(&m.extraArgs)
        .ok_or_else(|| anyhow::anyhow!("message {}: extra args are not GenericExtraArgsV2", m.header.messageId))?
        .gasLimit;
    let mut tokens = Vec::new();
    for t in &m.tokenAmounts {
        tokens.push(Any2EVMTokenTransfer {
            sourcePoolAddress: lane_abi::encoded(t.sourcePoolAddress),
            destTokenAddress: Address::abi_decode(&t.destTokenAddress)?,
            destGasAmount: u32::abi_decode(&t.destExecData)?,
            extraData: t.extraData.clone(),
            amount: t.amount,
        });
    }
    Ok(Any2EVMRampMessage {
        header: RampMessageHeader {
            messageId: m.header.messageId,
            sourceChainSelector: m.header.sourceChainSelector,
            destChainSelector: m.header.destChainSelector,
            sequenceNumber: m.header.sequenceNumber,
            nonce: m.header.nonce,
        },
        sender: lane_abi::encoded(m.sender),
        data: m.data.clone(),
        receiver,
        gasLimit: gas_limit,
        tokenAmounts: tokens,
    })
}

/// The message's merkle leaf (`Internal._hash(Any2EVMRampMessage, metadataHash)`), under the
/// OnRamp `on_ramp` of the source.
pub fn leaf(m: &Any2EVMRampMessage, on_ramp: Address) -> B256 {
    let metadata = keccak256(
        (
            keccak256("Any2EVMMessageHashV1"),
            m.header.sourceChainSelector,
            m.header.destChainSelector,
            keccak256(lane_abi::encoded(on_ramp)),
        )
            .abi_encode_params(),
    );
    let fixed =
        (m.header.messageId, m.receiver, m.header.sequenceNumber, m.gasLimit, m.header.nonce).abi_encode_params();
    keccak256(
        (
            B256::ZERO,
            metadata,
            keccak256(fixed),
            keccak256(&m.sender),
            keccak256(&m.data),
            keccak256(m.tokenAmounts.abi_encode()),
        )
            .abi_encode_params(),
    )
}

/// The commit of one root, signed by F + 1 = 2 of the OCR signers over
/// `keccak256(keccak256(report) ‖ reportContext)` (no prefix; `rawVs` byte i is signature i's
/// v − 27).
pub fn commit_call(report: &CommitReport, sequence: u64) -> anyhow::Result<Bytes> {
    let report = Bytes::from(report.abi_encode());
    let context = [commit_digest(), B256::left_padding_from(&sequence.to_be_bytes())];
    let mut signed = keccak256(&report).to_vec();
    signed.extend_from_slice(context[0].as_slice());
    signed.extend_from_slice(context[1].as_slice());
    let digest = keccak256(&signed);
    let (mut rs, mut ss, mut vs) = (Vec::new(), Vec::new(), [0u8; 32]);
    for (i, signer) in ocr_signers().iter().take(2).enumerate() {
        let sig = signer.sign_hash_sync(&digest)?;
        rs.push(B256::from(sig.r()));
        ss.push(B256::from(sig.s()));
        vs[i] = u8::from(sig.v());
    }
    Ok(commitCall { reportContext: context, report, rs, ss, rawVs: vs.into() }.abi_encode().into())
}

impl Lane {
    fn read(path: &std::path::Path) -> anyhow::Result<(Value, String, String)> {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        let a = v["source"]["url"].as_str().unwrap_or_default().to_string();
        let b = v["destination"]["url"].as_str().unwrap_or_default().to_string();
        Ok((v, a, b))
    }

    async fn load(path: &std::path::Path) -> anyhow::Result<Lane> {
        let (v, a, b) = Lane::read(path)?;
        Ok(Lane {
            a: Chain::connect(&a).await?,
            b: Chain::connect(&b).await?,
            on_ramp: address(&v["source"]["on_ramp"], "source.on_ramp")?,
            off_ramp: address(&v["destination"]["off_ramp"], "destination.off_ramp")?,
            source_selector: selector(&v["source"]["selector"], "source.selector")?,
            destination_selector: selector(&v["destination"]["selector"], "destination.selector")?,
            transmitter: address(&v["transmitter"], "transmitter")?,
        })
    }

    /// The message with sequence number `seq` the OnRamp sent to B.
    async fn message(&self, seq: u64) -> anyhow::Result<EVM2AnyRampMessage> {
        let logs = self
            .a
            .rpc
            .call(
                "eth_getLogs",
                json!([{"address": self.on_ramp.to_string(), "fromBlock": "0x0", "toBlock": "latest",
                        "topics": [lane_abi::message_sent_topic().to_string(), topic(self.destination_selector),
                                   topic(seq)]}]),
            )
            .await?;
        let log = logs
            .as_array()
            .and_then(|l| l.first())
            .ok_or_else(|| anyhow::anyhow!("no CCIPMessageSent with sequence number {seq}"))?;
        let topics: Vec<B256> = log["topics"]
            .as_array()
            .map(|t| t.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
            .unwrap_or_default();
        let data: Bytes = log["data"].as_str().unwrap_or("0x").parse()?;
        Ok(CCIPMessageSent::decode_raw_log(topics, &data)?.message)
    }

    async fn view<C: SolCall>(&self, chain: &Chain, to: Address, call: C) -> anyhow::Result<C::Return> {
        Ok(lane_abi::view(&chain.rpc, to, call).await?)
    }

    /// One round: commit what is new, execute what is committed and untouched.
    async fn round(&self, seen: &mut BTreeMap<u64, Any2EVMRampMessage>) -> anyhow::Result<()> {
        let next = self
            .view(
                &self.a,
                self.on_ramp,
                getExpectedNextSequenceNumberCall { destChainSelector: self.destination_selector },
            )
            .await?;
        let last = next.saturating_sub(1);
        let config = self
            .view(
                &self.b,
                self.off_ramp,
                lane_abi::getSourceChainConfigCall { sourceChainSelector: self.source_selector },
            )
            .await?;
        for seq in 1..=last {
            if seen.contains_key(&seq) {
                continue;
            }
            let sent = self.message(seq).await?;
            let m = to_any2evm(&sent)?;
            if seq >= config.minSeqNr {
                let root = leaf(&m, self.on_ramp);
                let report = CommitReport {
                    priceUpdates: PriceUpdates { tokenPriceUpdates: vec![], gasPriceUpdates: vec![] },
                    blessedMerkleRoots: vec![],
                    unblessedMerkleRoots: vec![MerkleRoot {
                        sourceChainSelector: self.source_selector,
                        onRampAddress: lane_abi::encoded(self.on_ramp),
                        minSeqNr: seq,
                        maxSeqNr: seq,
                        merkleRoot: root,
                    }],
                    rmnSignatures: vec![],
                };
                self.b.call(self.transmitter, self.off_ramp, commit_call(&report, seq)?).await?;
                tracing::info!(sequence_number = seq, message_id = %m.header.messageId, root = %root, "committed");
            }
            seen.insert(seq, m);
        }
        for (seq, m) in seen.iter() {
            let state = self
                .view(
                    &self.b,
                    self.off_ramp,
                    lane_abi::getExecutionStateCall { sourceChainSelector: self.source_selector, sequenceNumber: *seq },
                )
                .await?;
            if state != 0 {
                continue;
            }
            let report = ExecutionReport {
                sourceChainSelector: self.source_selector,
                messages: vec![m.clone()],
                offchainTokenData: vec![vec![Bytes::new(); m.tokenAmounts.len()]],
                proofs: vec![],
                proofFlagBits: U256::ZERO,
            };
            let data: Bytes =
                executeCall { reportContext: [exec_digest(), B256::ZERO], report: vec![report].abi_encode().into() }
                    .abi_encode()
                    .into();
            let estimate = self
                .b
                .rpc
                .quantity(
                    "eth_estimateGas",
                    json!([{"from": GAS_ESTIMATION_SENDER, "to": self.off_ramp.to_string(), "data": data.to_string()}]),
                )
                .await?;
            let gas = u64::try_from(estimate).unwrap_or(u64::MAX / 2).saturating_mul(13) / 10 + 50_000;
            let receipt = self.b.send(self.transmitter, Some(self.off_ramp), data, U256::ZERO, Some(gas)).await?;
            let after = self
                .view(
                    &self.b,
                    self.off_ramp,
                    lane_abi::getExecutionStateCall { sourceChainSelector: self.source_selector, sequenceNumber: *seq },
                )
                .await?;
            tracing::info!(
                sequence_number = seq, message_id = %m.header.messageId, tx_hash = %receipt["transactionHash"],
                state = lane_abi::ExecutionState::of(after).map(|s| s.as_str()).unwrap_or("?"), "executed"
            );
        }
        Ok(())
    }
}

pub async fn run(a: RelayArgs) -> anyhow::Result<()> {
    let lane = Lane::load(&a.lane).await?;
    tracing::info!(on_ramp = %lane.on_ramp, off_ramp = %lane.off_ramp, "relaying A -> B");
    let mut seen = BTreeMap::new();
    loop {
        if let Err(e) = lane.round(&mut seen).await {
            tracing::warn!(error = %e, "relay round failed; trying again");
        }
        tokio::time::sleep(Duration::from_millis(a.poll_ms)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a run on Chainlink's released contracts (libs/executors/ccip/testdata): the
    /// message as B sees it, its leaf and the commit report are the ones that OffRamp accepted.
    #[test]
    fn the_leaf_and_the_commit_report_are_the_offramps() {
        let v: Value =
            serde_json::from_str(include_str!("../../../libs/executors/ccip/testdata/ccip_v1_6_lane.json")).unwrap();
        let log = &v["send"]["rawLog"];
        let data: Bytes = log["data"].as_str().unwrap().parse().unwrap();
        let sent = EVM2AnyRampMessage::abi_decode(&data).unwrap();
        let on_ramp: Address = log["address"].as_str().unwrap().parse().unwrap();
        let m = to_any2evm(&sent).unwrap();
        assert_eq!(m.gasLimit, U256::from(200_000u64));
        let root = leaf(&m, on_ramp);
        assert_eq!(root.to_string(), v["exec"]["leaf"].as_str().unwrap());
        let report = CommitReport {
            priceUpdates: PriceUpdates { tokenPriceUpdates: vec![], gasPriceUpdates: vec![] },
            blessedMerkleRoots: vec![],
            unblessedMerkleRoots: vec![MerkleRoot {
                sourceChainSelector: m.header.sourceChainSelector,
                onRampAddress: lane_abi::encoded(on_ramp),
                minSeqNr: 1,
                maxSeqNr: 1,
                merkleRoot: root,
            }],
            rmnSignatures: vec![],
        };
        assert_eq!(Bytes::from(report.abi_encode()).to_string(), v["commit"]["report"].as_str().unwrap());
        let exec = ExecutionReport {
            sourceChainSelector: m.header.sourceChainSelector,
            messages: vec![m.clone()],
            offchainTokenData: vec![vec![Bytes::new()]],
            proofs: vec![],
            proofFlagBits: U256::ZERO,
        };
        assert_eq!(Bytes::from(vec![exec].abi_encode()).to_string(), v["exec"]["execReport"].as_str().unwrap());
    }
}
