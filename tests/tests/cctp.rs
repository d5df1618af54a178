//! The CCTP-shaped contracts of `contracts/QtgCctp.sol` on two real chains (two anvils): a
//! burn on chain A emits the message, the attester's signature over it lets chain B mint once,
//! a used nonce and a forged attestation are refused; and the committed bytecode is what the
//! pinned solc makes of the source. (The `cctp` lane that drives them is to come.)

use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{keccak256, Address, Bytes, FixedBytes, U256};
use alloy::signers::local::PrivateKeySigner;
use alloy::signers::SignerSync;
use alloy::sol;
use alloy::sol_types::{SolCall, SolValue};
use qtg_tests::*;
use serde_json::{json, Value};

sol! {
    function configureMinter(address minter, bool enabled);
    function approve(address spender, uint256 value) returns (bool);
    function balanceOf(address owner) returns (uint256);
    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger);
    function depositForBurn(uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken) returns (uint64);
    function receiveMessage(bytes message, bytes attestation) returns (bool);
    function usedNonces(bytes32 key) returns (uint256);
}

/// The attester's key (a test key; never a real one).
const ATTESTER_KEY: &str = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bytecode(contract: &str) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(root().join(format!("contracts/QtgCctp_sol_{contract}.bin")))?.trim().to_string())
}

/// Sends a transaction from anvil's first (unlocked) account and waits for its receipt.
async fn send(anvil: &Anvil, to: Option<&str>, data: &[u8]) -> anyhow::Result<Value> {
    let mut tx =
        json!({"from": ANVIL_ADDR_0, "data": format!("0x{}", alloy::primitives::hex::encode(data)), "gas": "0x800000"});
    if let Some(to) = to {
        tx["to"] = json!(to);
        // Simulated first: a revert comes back with its reason.
        anvil.rpc("eth_call", json!([tx, "latest"])).await?;
    }
    let hash = anvil.rpc("eth_sendTransaction", json!([tx])).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let receipt = anvil.rpc("eth_getTransactionReceipt", json!([hash])).await?;
        if !receipt.is_null() {
            anyhow::ensure!(receipt["status"] == "0x1", "reverted: {receipt}");
            return Ok(receipt);
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "not mined: {hash}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn deploy(anvil: &Anvil, contract: &str, args: Vec<u8>) -> anyhow::Result<String> {
    let mut code = alloy::primitives::hex::decode(bytecode(contract)?)?;
    code.extend(args);
    let receipt = send(anvil, None, &code).await?;
    Ok(receipt["contractAddress"].as_str().unwrap_or_default().to_string())
}

struct Side {
    anvil: Anvil,
    usdc: String,
    transmitter: String,
    messenger: String,
}

async fn side(domain: u32, attester: Address) -> anyhow::Result<Side> {
    let anvil = Anvil::start().await?;
    let usdc = deploy(&anvil, "QtgUsdc", U256::from(1_000_000_000_000u64).abi_encode()).await?;
    let transmitter = deploy(&anvil, "MessageTransmitter", (domain, attester).abi_encode_params()).await?;
    let messenger = deploy(
        &anvil,
        "TokenMessenger",
        (transmitter.parse::<Address>()?, usdc.parse::<Address>()?).abi_encode_params(),
    )
    .await?;
    send(&anvil, Some(&usdc), &configureMinterCall { minter: messenger.parse()?, enabled: true }.abi_encode()).await?;
    Ok(Side { anvil, usdc, transmitter, messenger })
}

fn word(a: &str) -> anyhow::Result<FixedBytes<32>> {
    Ok(a.parse::<Address>()?.into_word())
}

async fn usdc_of(side: &Side, who: &str) -> anyhow::Result<U256> {
    let data = balanceOfCall { owner: who.parse()? }.abi_encode();
    let v = side
        .anvil
        .rpc(
            "eth_call",
            json!([{"to": side.usdc, "data": format!("0x{}", alloy::primitives::hex::encode(data))}, "latest"]),
        )
        .await?;
    Ok(U256::from_str_radix(v.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)?)
}

/// Chain A (domain 0) and chain B (domain 1), each messenger registered with the other.
async fn linked(attester: &PrivateKeySigner) -> anyhow::Result<(Side, Side)> {
    let (a, b) = (side(0, attester.address()).await?, side(1, attester.address()).await?);
    for (from, to, domain) in [(&a, &b, 1), (&b, &a, 0)] {
        let call = addRemoteTokenMessengerCall { domain, tokenMessenger: word(&to.messenger)? };
        send(&from.anvil, Some(&from.messenger), &call.abi_encode()).await?;
    }
    Ok((a, b))
}

/// `qtg-attestation-sim` over chain A (domain 0), attesting after 2 blocks: the process and its
/// base URL.
async fn attestation_sim(a: &Side) -> anyhow::Result<(Proc, String)> {
    let source = format!("0={}", a.anvil.url);
    let sim = Proc::spawn_args(
        "qtg-attestation-sim",
        &["--addr", "127.0.0.1:0", "--source", &source, "--confirmations", "2"],
        "",
        &[("QTG_ATTESTATION_SIM_ATTESTER_KEY", ATTESTER_KEY)],
    )
    .await?;
    let base = format!("http://{}", sim.wait_field("attestation_addr", Duration::from_secs(20)).await?);
    Ok((sim, base))
}

/// Approves and burns `amount` USDC on A for ANVIL_ADDR_2 on B; the burn's receipt.
async fn burn(a: &Side, amount: U256) -> anyhow::Result<Value> {
    send(&a.anvil, Some(&a.usdc), &approveCall { spender: a.messenger.parse()?, value: amount }.abi_encode()).await?;
    let call = depositForBurnCall {
        amount,
        destinationDomain: 1,
        mintRecipient: word(ANVIL_ADDR_2)?,
        burnToken: a.usdc.parse()?,
    };
    send(&a.anvil, Some(&a.messenger), &call.abi_encode()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burn_on_one_chain_mints_once_on_the_other_with_the_attesters_signature() -> anyhow::Result<()> {
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let (a, b) = linked(&attester).await?;
    // Burn 250 USDC on A for ANVIL_ADDR_2 on B.
    let amount = U256::from(250_000_000u64);
    let receipt = burn(&a, amount).await?;
    let sent_topic = format!("{}", keccak256("MessageSent(bytes)"));
    let log = receipt["logs"]
        .as_array()
        .and_then(|logs| logs.iter().find(|l| l["topics"][0].as_str() == Some(sent_topic.as_str())))
        .cloned()
        .expect("MessageSent");
    let data = alloy::primitives::hex::decode(log["data"].as_str().unwrap_or("0x").trim_start_matches("0x"))?;
    let message = Bytes::abi_decode(&data)?;
    assert_eq!(&message[8..12], &1u32.to_be_bytes(), "destination domain");
    assert_eq!(usdc_of(&a, ANVIL_ADDR_0).await?, U256::from(1_000_000_000_000u64) - amount, "burned on A");
    // The attestation: the attester's signature over keccak256(message).
    let signature = attester.sign_hash_sync(&keccak256(&message))?;
    let attestation = Bytes::from(signature.as_bytes().to_vec());
    // A forged one is refused; the real one mints once; the same message again is refused.
    let forger: PrivateKeySigner = ANVIL_KEY_1.parse()?;
    let forged = Bytes::from(forger.sign_hash_sync(&keccak256(&message))?.as_bytes().to_vec());
    let receive = |attestation: Bytes| receiveMessageCall { message: message.clone(), attestation }.abi_encode();
    let err = send(&b.anvil, Some(&b.transmitter), &receive(forged)).await.unwrap_err().to_string();
    assert!(err.contains("invalid attestation"), "{err}");
    send(&b.anvil, Some(&b.transmitter), &receive(attestation.clone())).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount, "minted on B");
    let err = send(&b.anvil, Some(&b.transmitter), &receive(attestation)).await.unwrap_err().to_string();
    assert!(err.contains("Nonce already used"), "{err}");
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount, "minted once");
    Ok(())
}

/// The committed bytecode is what the pinned solc makes of the committed source.
#[test]
fn the_cctp_bytecode_is_its_source_compiled() -> anyhow::Result<()> {
    let solcjs = root().join(".qtg/evm/node_modules/.bin/solcjs");
    anyhow::ensure!(solcjs.exists(), "solcjs is not installed: run scripts/ensure-evm-tools.sh (make test does)");
    let out = std::env::temp_dir().join(format!("qtg-solc-cctp-{}", uuid::Uuid::new_v4().simple()));
    let status = std::process::Command::new(&solcjs)
        .args(["--bin", "--optimize", "-o"])
        .arg(&out)
        .arg("QtgCctp.sol")
        .current_dir(root().join("contracts"))
        .status()?;
    anyhow::ensure!(status.success(), "solcjs failed");
    for contract in ["QtgUsdc", "MessageTransmitter", "TokenMessenger"] {
        let fresh = std::fs::read_to_string(out.join(format!("QtgCctp_sol_{contract}.bin")))?;
        assert_eq!(fresh.trim(), bytecode(contract)?, "contracts/QtgCctp_sol_{contract}.bin is stale: recompile it");
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

/// `qtg-attestation-sim`: 404 for a burn it has not seen, `pending_confirmations` until the
/// burn has its confirmations, a 429 with `Retry-After` when rate-limited, then `complete` with
/// the message and an attestation chain B accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attestation_service_attests_a_burn_once_it_is_final() -> anyhow::Result<()> {
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let (a, b) = linked(&attester).await?;
    let (sim, base) = attestation_sim(&a).await?;
    let http = http_client();
    let get = |hash: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http.get(format!("{base}/v2/messages/0?transactionHash={hash}")).send().await?;
            let status = r.status().as_u16();
            let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
            let body: Value = r.json().await?;
            anyhow::Ok((status, retry, body))
        }
    };
    let (status, _, _) = get(format!("0x{}", "ab".repeat(32))).await?;
    assert_eq!(status, 404, "a burn it has not seen");
    let amount = U256::from(75_000_000u64);
    let receipt = burn(&a, amount).await?;
    let tx = receipt["transactionHash"].as_str().unwrap_or_default().to_string();
    let (status, _, body) = get(tx.clone()).await?;
    assert_eq!((status, body["messages"][0]["status"].as_str()), (200, Some("pending_confirmations")), "{body}");
    assert_eq!(body["messages"][0]["attestation"], "PENDING");
    http.post(format!("{base}/admin/faults"))
        .json(&json!({"kind": "rate_limit", "retry_after_seconds": 3}))
        .send()
        .await?;
    let (status, retry, _) = get(tx.clone()).await?;
    assert_eq!((status, retry.as_deref()), (429, Some("3")));
    a.anvil.rpc("evm_mine", json!([])).await?;
    let (status, _, body) = get(tx).await?;
    let m = &body["messages"][0];
    assert_eq!((status, m["status"].as_str()), (200, Some("complete")), "{body}");
    assert_eq!(m["decodedMessage"]["destinationDomain"], "1");
    let message: Bytes = m["message"].as_str().unwrap_or("0x").parse()?;
    let attestation: Bytes = m["attestation"].as_str().unwrap_or("0x").parse()?;
    send(&b.anvil, Some(&b.transmitter), &receiveMessageCall { message, attestation }.abi_encode()).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount, "chain B accepted the attestation");
    drop(sim);
    Ok(())
}

fn attestation_ctx(burn_tx: &str) -> qtg_core::ExecutionContext {
    qtg_core::ExecutionContext {
        protocol_version: "1.0".into(),
        request_id: uuid::Uuid::new_v4().to_string(),
        request_node_id: uuid::Uuid::new_v4().to_string(),
        compiled_plan_hash: String::new(),
        template_key: "usdc.cctp".into(),
        template_version: 1,
        node_key: "attestation".into(),
        node_kind: "observe".into(),
        action_type: "cctp_attestation".into(),
        attempt_no: 1,
        intent: json!({}),
        input_params: json!({}),
        resolved_bindings: json!({}),
        risk_controls: json!({}),
        prior_artifacts: Vec::new(),
        node_config: json!({}),
        provider_context: json!({"tx_hash": burn_tx}),
        timeout_policy: json!({}),
        provider_refs: json!({}),
        provider_ref_id: None,
        executor_key: "exec.cctp.attestation".into(),
    }
}

/// `exec.cctp.attestation` against the attestation service: waits while the burn is unseen or
/// pending, waits as long as a 429 says, and completes with the message and attestation the
/// mint needs (chain B accepts them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attestation_step_waits_honours_the_hint_and_hands_over_the_attestation() -> anyhow::Result<()> {
    use qtg_executor::Executor;
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let (a, b) = linked(&attester).await?;
    let (sim, base) = attestation_sim(&a).await?;
    let observer = qtg_cctp::AttestationObserver::new(qtg_cctp::AttestationConfig {
        attestation_url: base.clone(),
        source_domain: Some(0),
        poll_seconds: Some(0.5),
        timeout_ms: None,
        insecure: None,
    })
    .map_err(anyhow::Error::msg)?;
    // Not seen yet.
    let unseen = observer.observe(&attestation_ctx(&format!("0x{}", "cd".repeat(32)))).await?;
    assert_eq!(
        (unseen.next_state, unseen.provider_state.as_deref()),
        (qtg_core::NodeState::Observing, Some("not_seen"))
    );
    assert_eq!(unseen.retry_after_seconds, Some(0.5));
    // Burned, not final: pending.
    let amount = U256::from(40_000_000u64);
    let receipt = burn(&a, amount).await?;
    let ctx = attestation_ctx(receipt["transactionHash"].as_str().unwrap_or_default());
    let pending = observer.observe(&ctx).await?;
    assert_eq!(pending.provider_state.as_deref(), Some("pending_confirmations"));
    // Rate-limited: it waits what the service says.
    http_client()
        .post(format!("{base}/admin/faults"))
        .json(&json!({"kind": "rate_limit", "retry_after_seconds": 7}))
        .send()
        .await?;
    let limited = observer.observe(&ctx).await?;
    assert_eq!((limited.next_state, limited.retry_after_seconds), (qtg_core::NodeState::Observing, Some(7.0)));
    // Final: complete, with what the mint needs.
    a.anvil.rpc("evm_mine", json!([])).await?;
    let done = observer.observe(&ctx).await?;
    assert_eq!(done.next_state, qtg_core::NodeState::Completed, "{done:?}");
    let message: Bytes = done.provider_refs["message"].as_str().unwrap_or("0x").parse()?;
    let attestation: Bytes = done.provider_refs["attestation"].as_str().unwrap_or("0x").parse()?;
    assert_eq!(done.provider_refs["message_hash"], json!(keccak256(&message).to_string()));
    send(&b.anvil, Some(&b.transmitter), &receiveMessageCall { message, attestation }.abi_encode()).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount);
    drop(sim);
    Ok(())
}
