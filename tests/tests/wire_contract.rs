//! The executor wire contract cannot change silently (issue 27). Its digest — the protocol
//! version, the signature version, the canonical bytes a fixed Submit is signed over, the
//! signed message, and what a result may be (which state each method may answer, the limits of
//! an answer) — is recorded in `proto/wire-contract.json`; `make lint-proto` fails when
//! it differs from `proto-released/wire-contract.json` (the last release) without a step of
//! `protocol_version` or of the signature version. And the released contract is still served:
//! an executor built on the released protos (signature v3) gets exactly the bytes and message
//! it verifies when its registry entry says `signature = "v3"`, until the deprecation date.

use qtg_core::protocol::{self, Method, PROTOCOL_VERSION};
use qtg_core::{ExecutionResult, NodeState};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const TS: &str = "1764400000";
const NONCE: &str = "2f1c8a7e-1b7a-4c51-9a77-0c1d5b9c3e10";
const TARGET: &str = "qtg.executor.v1.ExecutorService/Submit";

/// A Submit with every field the contract has: its canonical signed bytes.
fn fixed_submit_bytes() -> anyhow::Result<Vec<u8>> {
    let ctx: qtg_core::ExecutionContext = serde_json::from_value(json!({
        "protocol_version": PROTOCOL_VERSION, "request_id": "7d2f0a4e-2b1c-4c8e-9f3a-5b6c7d8e9f01",
        "request_node_id": "0b6f3e1a-9d24-4c7b-8e55-3a1d2c4f6b90", "compiled_plan_hash": "ab".repeat(32),
        "template_key": "t.wire", "template_version": 3, "node_key": "send", "node_kind": "action",
        "action_type": "transfer", "attempt_no": 2,
        "intent": {"asset": "USDC", "amount": "25.00", "fee_bps": 0.5, "legs": 2},
        "input_params": {"k": "v"}, "resolved_bindings": {"executor_key": "exec.example.transfer"},
        "risk_controls": {"max_fee": "1"}, "prior_artifacts": [], "node_config": {"example": {}},
        "provider_context": {}, "timeout_policy": {}, "provider_refs": {"r": 1},
        "provider_ref_id": "ex-1", "executor_key": "exec.example.transfer"
    }))?;
    let prepared = qtg_core::PreparedAction::new("transfer", "json", "{\"amount\":\"25.00\"}".into(), false);
    let req = qtg_proto::executor::v1::SubmitRequest {
        executor_key: "exec.example.transfer".into(),
        context: Some(qtg_proto::convert::context_to_wire(&ctx)?),
        prepared_action: Some(qtg_proto::convert::prepared_to_wire(&prepared)),
        sign_result: None,
        idempotency_key: "0b6f3e1a-9d24-4c7b-8e55-3a1d2c4f6b90:2".into(),
        submit_by: Some(qtg_proto::convert::timestamp_to_wire(1_764_400_060, 250_000_000)),
    };
    Ok(qtg_wire_auth::grpc_signed_bytes(&req))
}

/// What a result may be, as qtg checks it: for every method, each state it may answer, and
/// the documented limits of one answer. A change here changes what executors must produce.
fn result_semantics() -> String {
    let methods = [Method::Preflight, Method::Prepare, Method::Submit, Method::Observe, Method::Recover];
    let states = [
        NodeState::Submitted,
        NodeState::Observing,
        NodeState::Completed,
        NodeState::Failed,
        NodeState::Unknown,
        NodeState::Ready,
        NodeState::Cancelled,
    ];
    let mut lines: Vec<String> = methods
        .iter()
        .map(|m| {
            let allowed: Vec<String> = states
                .iter()
                .filter(|s| ExecutionResult::new(**s).validate(*m).is_ok())
                .map(|s| s.to_string())
                .collect();
            format!("{}={}", m.as_str(), allowed.join(","))
        })
        .collect();
    lines.push(format!(
        "limits={},{},{},{},{},{},{},{}",
        protocol::MAX_RESULT_BYTES,
        protocol::MAX_REFS_KEYS,
        protocol::MAX_REFS_BYTES,
        protocol::MAX_NODE_REFS_KEYS,
        protocol::MAX_NODE_REFS_BYTES,
        protocol::MAX_ARTIFACTS,
        protocol::MAX_ERROR_DETAIL_CHARS,
        protocol::MAX_SHORT_TEXT_CHARS
    ));
    lines.join("\n")
}

/// The digest of the contract signed with `version` (`v4`, or the deprecated `v3`).
fn digest(version: &str) -> anyhow::Result<String> {
    let bytes = fixed_submit_bytes()?;
    let message = match version {
        "v4" => qtg_wire_auth::message_v4(TS, NONCE, TARGET, &bytes),
        "v3" => qtg_wire_auth::message(TS, NONCE, &bytes),
        other => anyhow::bail!("no signature version {other}"),
    };
    let text = format!(
        "protocol_version={PROTOCOL_VERSION}\nsignature_version={version}\n\
         signed_bytes_sha256={}\nmessage={message}\n{}",
        hex::encode(Sha256::digest(&bytes)),
        result_semantics()
    );
    Ok(hex::encode(Sha256::digest(text.as_bytes())))
}

fn contract(dir: &str) -> anyhow::Result<Value> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(dir).join("wire-contract.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

#[test]
fn the_wire_contract_is_the_recorded_one_and_the_released_one_is_still_served() -> anyhow::Result<()> {
    let current = contract("proto")?;
    let now = digest(qtg_wire_auth::EXECUTOR_VERSION)?;
    assert_eq!(
        (current["protocol_version"].as_str(), current["signature_version"].as_str(), current["digest"].as_str()),
        (Some(PROTOCOL_VERSION), Some(qtg_wire_auth::EXECUTOR_VERSION), Some(now.as_str())),
        "the executor wire contract changed: step protocol_version (libs/core/src/protocol.rs) or the signature \
         version, record the new digest {now} in proto/wire-contract.json, and say so in docs/executors.md \
         (\"Versions\"); make lint-proto compares it with proto-released/wire-contract.json"
    );
    // The last release's contract: served as is, or through the deprecated signature.
    let released = contract("proto-released")?;
    let version = released["signature_version"].as_str().unwrap_or_default();
    assert_eq!(released["protocol_version"].as_str(), Some(PROTOCOL_VERSION), "{released}");
    assert_eq!(
        released["digest"].as_str(),
        Some(digest(version)?.as_str()),
        "today's qtg signs what a released executor verifies"
    );
    if version != qtg_wire_auth::EXECUTOR_VERSION {
        assert_eq!(version, "v3", "{released}");
        let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
        assert!(
            today.as_str() <= qtg_wire_auth::V3_ACCEPTED_UNTIL,
            "the v3 deprecation window ended on {}: make a release (proto-released/) or extend it",
            qtg_wire_auth::V3_ACCEPTED_UNTIL
        );
        // What an entry with `signature = "v3"` sends is what the released executor checks.
        let secret = b"s3cret-for-docs";
        let headers = qtg_wire_auth::Credentials::HmacV3(secret.to_vec()).headers(TARGET, &fixed_submit_bytes()?);
        let get = |name: &str| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).unwrap_or_default();
        assert_eq!(get(qtg_wire_auth::HEADER_VERSION), "v3");
        let signed = qtg_wire_auth::Signed {
            version: "v3",
            timestamp: &get(qtg_wire_auth::HEADER_TIMESTAMP),
            nonce: &get(qtg_wire_auth::HEADER_NONCE),
            signature: &get(qtg_wire_auth::HEADER_SIGNATURE),
        };
        let now = chrono::Utc::now().timestamp();
        let bytes = fixed_submit_bytes()?;
        assert_eq!(qtg_wire_auth::verify(&signed, &bytes, &[secret.as_slice()], now, 300), Ok(()));
    }
    Ok(())
}
