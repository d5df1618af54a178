//! The CCTP-shaped contracts of `contracts/QtgCctp.sol` on two real chains (two anvils): a
//! burn on chain A emits the message, the attester's signature over it lets chain B mint once,
//! a used nonce and a forged attestation are refused; and the committed bytecode is what the
//! pinned solc makes of the source; and the `cctp` lane moving USDC from A to B through
//! separately started workers (burn, attestation, mint), under faults.

use std::collections::BTreeSet;
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
    function depositForBurn(
        uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken
    ) returns (uint64);
    function receiveMessage(bytes message, bytes attestation) returns (bool);
    function usedNonces(bytes32 key) returns (uint256);
    function enableAttester(address newAttester);
    function setSignatureThreshold(uint256 newSignatureThreshold);
    function initialize(uint256 supply);
    function linkTokenPair(address localToken, uint32 remoteDomain, bytes32 remoteToken);
    function setMaxBurnAmountPerMessage(address token, uint256 burnLimitPerMessage);
    function upgradeTo(address newImplementation);
    function setMinFee(uint256 minFee_);
    function denylist(address account);
}

/// USDC's proxy admin: anvil's second (unlocked) account, which may only upgrade the proxy.
const USDC_PROXY_ADMIN: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

/// The attester's key (a test key; never a real one).
const ATTESTER_KEY: &str = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bytecode(contract: &str) -> anyhow::Result<String> {
    let file = if contract.ends_with("V2") || contract == "QtgEip1967Proxy" { "QtgCctpV2" } else { "QtgCctp" };
    Ok(std::fs::read_to_string(root().join(format!("contracts/{file}_sol_{contract}.bin")))?.trim().to_string())
}

/// Sends a transaction from anvil's first (unlocked) account and waits for its receipt.
async fn send(anvil: &Anvil, to: Option<&str>, data: &[u8]) -> anyhow::Result<Value> {
    send_from(anvil, ANVIL_ADDR_0, to, data).await
}

/// [`send`] from another unlocked account (USDC's proxy admin is anvil's second).
async fn send_from(anvil: &Anvil, from: &str, to: Option<&str>, data: &[u8]) -> anyhow::Result<Value> {
    let mut tx =
        json!({"from": from, "data": format!("0x{}", alloy::primitives::hex::encode(data)), "gas": "0x800000"});
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
    /// USDC behind its proxy, as Circle deploys it: the proxy's address (admin: anvil's second
    /// account), and the implementation's.
    usdc: String,
    usdc_implementation: String,
    transmitter: String,
    messenger: String,
    /// V2: the transmitter's and messenger's implementations behind their EIP-1967 proxies
    /// (admin: anvil's second account), as Circle deploys V2; V1: the contracts themselves.
    transmitter_implementation: String,
    messenger_implementation: String,
}

/// Domain `d` on chain 31337 + `d`.
async fn side(domain: u32, attester: Address) -> anyhow::Result<Side> {
    let anvil = Anvil::start_chain(31337 + u64::from(domain)).await?;
    let usdc_implementation = deploy(&anvil, "QtgUsdc", U256::ZERO.abi_encode()).await?;
    let admin: Address = USDC_PROXY_ADMIN.parse()?;
    let usdc =
        deploy(&anvil, "QtgUsdcProxy", (usdc_implementation.parse::<Address>()?, admin).abi_encode_params()).await?;
    send(&anvil, Some(&usdc), &initializeCall { supply: U256::from(1_000_000_000_000u64) }.abi_encode()).await?;
    let transmitter = deploy(&anvil, "MessageTransmitter", (domain, attester).abi_encode_params()).await?;
    let messenger = deploy(
        &anvil,
        "TokenMessenger",
        (transmitter.parse::<Address>()?, usdc.parse::<Address>()?).abi_encode_params(),
    )
    .await?;
    send(&anvil, Some(&usdc), &configureMinterCall { minter: messenger.parse()?, enabled: true }.abi_encode()).await?;
    let (transmitter_implementation, messenger_implementation) = (transmitter.clone(), messenger.clone());
    Ok(Side {
        anvil,
        usdc,
        usdc_implementation,
        transmitter,
        messenger,
        transmitter_implementation,
        messenger_implementation,
    })
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
        // The minter mints the local USDC for the other domain's (Circle's token pairs).
        let call =
            linkTokenPairCall { localToken: from.usdc.parse()?, remoteDomain: domain, remoteToken: word(&to.usdc)? };
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

/// The message of the `MessageSent(bytes)` event in a burn's receipt (V1 and V2 alike).
fn message_sent(receipt: &Value) -> anyhow::Result<Bytes> {
    let topic = keccak256("MessageSent(bytes)").to_string();
    let log = receipt["logs"]
        .as_array()
        .and_then(|logs| logs.iter().find(|l| l["topics"][0].as_str() == Some(topic.as_str())))
        .ok_or_else(|| anyhow::anyhow!("no MessageSent in {receipt}"))?;
    let data = alloy::primitives::hex::decode(log["data"].as_str().unwrap_or("0x").trim_start_matches("0x"))?;
    Ok(Bytes::abi_decode(&data)?)
}

/// `call` on `side`'s transmitter reverts, with `why` in the reason.
async fn refused_by_transmitter(side: &Side, call: Vec<u8>, why: &str) -> anyhow::Result<()> {
    let err = match send(&side.anvil, Some(&side.transmitter), &call).await {
        Ok(receipt) => anyhow::bail!("expected {why:?}, but it was mined: {receipt}"),
        Err(e) => e.to_string(),
    };
    anyhow::ensure!(err.contains(why), "expected {why:?}: {err}");
    Ok(())
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
    let message = message_sent(&receipt)?;
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
    assert!(err.contains("Invalid signature: not attester"), "{err}");
    send(&b.anvil, Some(&b.transmitter), &receive(attestation.clone())).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount, "minted on B");
    let err = send(&b.anvil, Some(&b.transmitter), &receive(attestation)).await.unwrap_err().to_string();
    assert!(err.contains("Nonce already used"), "{err}");
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount, "minted once");
    Ok(())
}

/// Further attester keys (test keys; never real ones).
const ATTESTER_KEY_2: &str = "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356";
const ATTESTER_KEY_3: &str = "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97";

/// Chain B's transmitter has three attesters and a threshold of two; enabled on B only (A
/// only sends).
async fn two_of_three(b: &Side, more: &[&PrivateKeySigner]) -> anyhow::Result<()> {
    for k in more {
        send(&b.anvil, Some(&b.transmitter), &enableAttesterCall { newAttester: k.address() }.abi_encode()).await?;
    }
    let call = setSignatureThresholdCall { newSignatureThreshold: U256::from(2) };
    send(&b.anvil, Some(&b.transmitter), &call.abi_encode()).await?;
    Ok(())
}

/// m-of-n, as Circle's transmitter checks it: with three attesters and a threshold of two, two
/// signatures in increasing order of signer address mint; one signature, the two in the
/// other order, a repeated one or one by a non-attester are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_of_three_attestation_mints_and_nothing_less_does() -> anyhow::Result<()> {
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let (k2, k3): (PrivateKeySigner, PrivateKeySigner) = (ATTESTER_KEY_2.parse()?, ATTESTER_KEY_3.parse()?);
    let (a, b) = linked(&attester).await?;
    two_of_three(&b, &[&k2, &k3]).await?;
    let amount = U256::from(40_000_000u64);
    let receipt = burn(&a, amount).await?;
    let message = message_sent(&receipt)?;
    let digest = keccak256(&message);
    let sig = |k: &PrivateKeySigner| -> anyhow::Result<Vec<u8>> { Ok(k.sign_hash_sync(&digest)?.as_bytes().to_vec()) };
    let mut signers = [&attester, &k2, &k3];
    signers.sort_by_key(|k| k.address());
    let (low, high) = (signers[0], signers[1]);
    let receive = |attestation: Vec<u8>| {
        receiveMessageCall { message: message.clone(), attestation: Bytes::from(attestation) }.abi_encode()
    };
    let refused = |attestation: Vec<u8>, why: &'static str| refused_by_transmitter(&b, receive(attestation), why);
    refused(sig(low)?, "Invalid attestation length").await?;
    refused([sig(high)?, sig(low)?].concat(), "Invalid signature order or dupe").await?;
    refused([sig(low)?, sig(low)?].concat(), "Invalid signature order or dupe").await?;
    let outsider: PrivateKeySigner = ANVIL_KEY_1.parse()?;
    let mut pair = [&outsider, low];
    pair.sort_by_key(|k| k.address());
    refused([sig(pair[0])?, sig(pair[1])?].concat(), "Invalid signature: not attester").await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, U256::ZERO, "nothing minted yet");
    send(&b.anvil, Some(&b.transmitter), &receive([sig(low)?, sig(high)?].concat())).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount, "two of three minted");
    Ok(())
}

/// The committed bytecode is what the pinned solc makes of the committed source.
#[test]
fn the_cctp_bytecode_is_its_source_compiled() -> anyhow::Result<()> {
    let solcjs = root().join(".qtg/evm/node_modules/.bin/solcjs");
    anyhow::ensure!(solcjs.exists(), "solcjs is not installed: run scripts/ensure-evm-tools.sh (make test does)");
    let out = std::env::temp_dir().join(format!("qtg-solc-cctp-{}", uuid::Uuid::new_v4().simple()));
    for source in ["QtgCctp.sol", "QtgCctpV2.sol"] {
        let status = std::process::Command::new(&solcjs)
            .args(["--bin", "--optimize", "-o"])
            .arg(&out)
            .arg(source)
            .current_dir(root().join("contracts"))
            .status()?;
        anyhow::ensure!(status.success(), "solcjs failed on {source}");
    }
    for contract in [
        "QtgUsdc",
        "QtgUsdcProxy",
        "MessageTransmitter",
        "TokenMessenger",
        "MessageTransmitterV2",
        "TokenMessengerV2",
        "QtgEip1967Proxy",
    ] {
        let file = if contract.ends_with("V2") || contract == "QtgEip1967Proxy" { "QtgCctpV2" } else { "QtgCctp" };
        let fresh = std::fs::read_to_string(out.join(format!("{file}_sol_{contract}.bin")))?;
        assert_eq!(fresh.trim(), bytecode(contract)?, "contracts/{file}_sol_{contract}.bin is stale: recompile it");
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
        expiry_margin_blocks: None,
    })
    .map_err(anyhow::Error::msg)?;
    // Not seen yet.
    let unseen = observer.observe(&attestation_ctx(&format!("0x{}", "cd".repeat(32)))).await?;
    assert_eq!(
        (unseen.next_state, unseen.provider_state.as_deref()),
        (qtg_core::AfterObserve::Observing, Some("not_seen"))
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
    assert_eq!((limited.next_state, limited.retry_after_seconds), (qtg_core::AfterObserve::Observing, Some(7.0)));
    // Final: complete, with what the mint needs.
    a.anvil.rpc("evm_mine", json!([])).await?;
    let done = observer.observe(&ctx).await?;
    assert_eq!(done.next_state, qtg_core::AfterObserve::Completed, "{done:?}");
    let message: Bytes = done.provider_refs["message"].as_str().unwrap_or("0x").parse()?;
    let attestation: Bytes = done.provider_refs["attestation"].as_str().unwrap_or("0x").parse()?;
    assert_eq!(done.provider_refs["message_hash"], json!(keccak256(&message).to_string()));
    send(&b.anvil, Some(&b.transmitter), &receiveMessageCall { message, attestation }.abi_encode()).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount);
    drop(sim);
    Ok(())
}

/// Two chains, their CCTP contracts, the attestation service, the API and the settings every
/// worker gets: the `cctp` lane's entries and `signer.evm.local` (anvil's first account, which
/// holds the USDC on A and has allowed A's messenger to pull it).
struct Bridge {
    db: TestDb,
    a: Side,
    b: Side,
    /// Chain B through a recording proxy: every `receiveMessage` broadcast is counted there.
    proxy_b: RpcProxy,
    _sim: Proc,
    sim_url: String,
    api: Api,
    keys: Keys,
    env: Vec<(String, String)>,
    /// Both chains run CCTP V2 (`contracts/QtgCctpV2.sol`), the domains configured as V2.
    v2: bool,
}

/// How a [`Bridge`] is set up.
#[derive(Default)]
struct Setup<'a> {
    env: &'a [(&'a str, &'a str)],
    /// Chain B's transmitter has three attesters and a threshold of two, and the attestation
    /// service signs with two of their keys.
    m_of_n: bool,
    v2: bool,
    /// More `qtg-attestation-sim` arguments.
    sim: &'a [&'a str],
}

const SUPPLY: u64 = 1_000_000_000_000;

/// A V2 template's terms.
struct V2Terms<'a> {
    finality: &'a str,
    max_fee: &'a str,
    amount_is: &'a str,
    /// Burned by `depositForBurnWithHook` when set.
    hook_data: Option<&'a str>,
}

impl Default for V2Terms<'_> {
    fn default() -> Self {
        V2Terms { finality: "fast", max_fee: "0.05", amount_is: "burned", hook_data: None }
    }
}

impl Bridge {
    async fn start(extra: &[(&str, &str)]) -> anyhow::Result<Bridge> {
        Bridge::start_with(Setup { env: extra, ..Setup::default() }).await
    }

    async fn start_with(setup: Setup<'_>) -> anyhow::Result<Bridge> {
        let Setup { env: extra, m_of_n, v2, sim: sim_extra } = setup;
        let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
        let (a, b) = if v2 { linked_v2(&attester).await? } else { linked(&attester).await? };
        let sim_keys = if m_of_n {
            let (k2, k3): (PrivateKeySigner, PrivateKeySigner) = (ATTESTER_KEY_2.parse()?, ATTESTER_KEY_3.parse()?);
            two_of_three(&b, &[&k2, &k3]).await?;
            format!("{ATTESTER_KEY},{ATTESTER_KEY_3}")
        } else {
            ATTESTER_KEY.to_string()
        };
        send(&a.anvil, Some(&a.usdc), &approveCall { spender: a.messenger.parse()?, value: U256::MAX }.abi_encode())
            .await?;
        let proxy_b = RpcProxy::start(&b.anvil.url).await?;
        let (source, destination) = (format!("0={}", a.anvil.url), format!("1={}", b.anvil.url));
        let mut sim_args =
            vec!["--addr", "127.0.0.1:0", "--source", &source, "--destination", &destination, "--confirmations", "1"];
        sim_args.extend_from_slice(sim_extra);
        let sim = Proc::spawn_args(
            "qtg-attestation-sim",
            &sim_args,
            "",
            &[("QTG_ATTESTATION_SIM_ATTESTER_KEY", sim_keys.as_str())],
        )
        .await?;
        let sim_url = format!("http://{}", sim.wait_field("attestation_addr", Duration::from_secs(20)).await?);
        let db = TestDb::new().await?;
        let registry = std::env::temp_dir().join(format!("{}-registry-cctp.toml", db.name));
        let sim_registry = std::fs::read_to_string(registry_file())?;
        std::fs::write(
            &registry,
            format!(
                "{sim_registry}\n[executors.\"exec.cctp.burn\"]\ntransport = \"local\"\nimpl = \"cctp\"\n\
                 config = {{ from = \"{ANVIL_ADDR_0}\", fee_url = \"{sim_url}\" }}\n\n\
                 [executors.\"exec.cctp.attestation\"]\ntransport = \"local\"\nimpl = \"cctp\"\n\
                 config = {{ attestation_url = \"{sim_url}\", source_domain = 0, poll_seconds = 0.5 }}\n\n\
                 [executors.\"exec.cctp.mint\"]\ntransport = \"local\"\nimpl = \"cctp\"\n\
                 config = {{ from = \"{ANVIL_ADDR_0}\" }}\n\n\
                 [signers.\"signer.evm.local\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
                 config = {{ account = \"anvil0\" }}\n"
            ),
        )?;
        let chain = |id: u64, url: &str| {
            json!({"chain_id": id, "rpc_urls": [url], "confirmations": 1,
                   "max_fee_per_gas_wei": "100000000000", "max_priority_fee_per_gas_wei": "2000000000"})
        };
        // V1 in the flat form of earlier releases; V2 in its own object.
        let domain = |d: u32, chain: u64, s: &Side| {
            let contracts = json!({"token_messenger": s.messenger, "message_transmitter": s.transmitter});
            if v2 {
                json!({"domain": d, "chain_id": chain, "usdc": s.usdc, "v2": contracts})
            } else {
                json!({"domain": d, "chain_id": chain, "usdc": s.usdc, "token_messenger": s.messenger,
                       "message_transmitter": s.transmitter})
            }
        };
        let domains = json!([domain(0, 31337, &a), domain(1, 31338, &b)]);
        let mut env: Vec<(String, String)> = [
            ("MG_EXECUTOR_REGISTRY", registry.to_string_lossy().to_string()),
            ("MG_EVM_CHAINS", json!([chain(31337, &a.anvil.url), chain(31338, &proxy_b.url)]).to_string()),
            ("MG_CCTP_DOMAINS", domains.to_string()),
            ("MG_ANVIL0_PRIVATE_KEY", ANVIL_KEY_0.to_string()),
            ("MG_EXECUTOR_TIMEOUT_MS", "5000".to_string()),
            ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2".to_string()),
            ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2".to_string()),
            ("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", "0.5".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        let api = Api::start(&db.url, &env_pairs(&env)).await?;
        let keys = Keys::create(&api).await?;
        // The signer's identity, enrolled once the health worker listed it: the burn caller is
        // aligned against it.
        let health = Proc::spawn("qtg-health", &db.url, &env_pairs(&env)).await?;
        wait_until("the signer is on the roster", Duration::from_secs(20), || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM signers WHERE signer_key = 'signer.evm.local'")
                .fetch_one(&db.pool)
                .await?;
            Ok(n == 1)
        })
        .await?;
        drop(health);
        api.ok(
            "PUT",
            "/v3/signers/signer.evm.local/expected-identity",
            &api.admin_key,
            Some(json!({"address": ANVIL_ADDR_0})),
            200,
        )
        .await?;
        Ok(Bridge { db, a, b, proxy_b, _sim: sim, sim_url, api, keys, env, v2 })
    }

    /// The newest verify_drift check of `scope` (`Null` before the first).
    async fn drift_check(&self, scope: &str) -> anyhow::Result<Value> {
        let v = self.api.ok("GET", "/v3/drift", &self.keys.requester, None, 200).await?;
        let item = v["items"].as_array().and_then(|a| a.iter().find(|c| c["scope"] == scope).cloned());
        Ok(item.unwrap_or(Value::Null))
    }

    /// An admin records what the checks of `scope` saw as its baseline (`qtgctl drift baseline`).
    async fn baseline(&self, scope: &str, reason: &str) -> anyhow::Result<()> {
        let out = tokio::process::Command::new(bin_dir().join("qtgctl"))
            .args(["drift", "baseline", "--scope", scope, "--reason", reason])
            .env_clear()
            .env("QTG_API_URL", &self.api.base)
            .env("QTG_API_KEY", &self.api.admin_key)
            .output()
            .await?;
        anyhow::ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    }

    /// What the recipient receives of `amount` burned by [`Bridge::template`]: all of it on V1;
    /// on V2 (Fast, the simulator's default fee of 1 bp) less the fee, rounded up.
    fn delivered(&self, amount: u64) -> U256 {
        if self.v2 {
            U256::from(amount - amount.div_ceil(10_000))
        } else {
            U256::from(amount)
        }
    }

    async fn worker(&self, binary: &str) -> anyhow::Result<Proc> {
        Proc::spawn(binary, &self.db.url, &env_pairs(&self.env)).await
    }

    /// `usdc.cctp.chain_a_to_b`: burn on A → attestation → mint on B, the burn called by
    /// `burn_caller`.
    async fn template(&self, key: &str, burn_caller: &str) -> anyhow::Result<()> {
        if self.v2 {
            return self.template_v2(key, burn_caller, V2Terms::default()).await;
        }
        let t = json!({"template_key": key, "nodes": [
            {"node_key": "burn", "node_kind": "action", "action_type": "cctp_burn",
             "executor_key": "exec.cctp.burn", "signer_key": "signer.evm.local", "signing_required": true,
             "config": {"chain_id": 31337, "contract": self.a.messenger, "token_contract": self.a.usdc,
                        "decimals": 6, "destination_domain": 1, "burn_caller": burn_caller}},
            {"node_key": "attestation", "node_kind": "observe", "action_type": "cctp_attestation",
             "executor_key": "exec.cctp.attestation", "config": {"source_domain": 0}},
            {"node_key": "mint", "node_kind": "action", "action_type": "cctp_mint",
             "executor_key": "exec.cctp.mint", "signer_key": "signer.evm.local", "signing_required": true,
             "config": {"chain_id": 31338, "contract": self.b.transmitter, "token_contract": self.b.usdc,
                        "decimals": 6, "destination_domain": 1,
                        "message": "$ref:attestation.message", "attestation": "$ref:attestation.attestation",
                        "burn_message_hash": "$ref:burn.message_hash"}}],
            "edges": [{"from": "burn", "to": "attestation"}, {"from": "attestation", "to": "mint"}],
            "risk_controls": {"allowed_destination_domains": [1], "allowed_destinations": [ANVIL_ADDR_2]}});
        install_template(&self.api, &self.keys, t).await
    }

    /// The V2 route A → B: the burn names the version, finality, fee cap and what the amount
    /// is; the mint binds to the burn's emitted message.
    async fn template_v2(&self, key: &str, burn_caller: &str, t: V2Terms<'_>) -> anyhow::Result<()> {
        let t = json!({"template_key": key, "nodes": [
            {"node_key": "burn", "node_kind": "action", "action_type": "cctp_burn",
             "executor_key": "exec.cctp.burn", "signer_key": "signer.evm.local", "signing_required": true,
             "config": {"chain_id": 31337, "contract": self.a.messenger, "token_contract": self.a.usdc,
                        "decimals": 6, "destination_domain": 1, "burn_caller": burn_caller, "cctp_version": 2,
                        "finality": t.finality, "max_fee": t.max_fee, "amount_is": t.amount_is,
                        "hook_data": t.hook_data}},
            {"node_key": "attestation", "node_kind": "observe", "action_type": "cctp_attestation",
             "executor_key": "exec.cctp.attestation", "config": {"source_domain": 0}},
            {"node_key": "mint", "node_kind": "action", "action_type": "cctp_mint",
             "executor_key": "exec.cctp.mint", "signer_key": "signer.evm.local", "signing_required": true,
             "config": {"chain_id": 31338, "contract": self.b.transmitter, "token_contract": self.b.usdc,
                        "decimals": 6, "destination_domain": 1, "cctp_version": 2, "amount_is": t.amount_is,
                        "max_fee": t.max_fee,
                        "message": "$ref:attestation.message", "attestation": "$ref:attestation.attestation",
                        "burn_message": "$ref:burn.message"}}],
            "edges": [{"from": "burn", "to": "attestation"}, {"from": "attestation", "to": "mint"}],
            "risk_controls": {"allowed_destination_domains": [1], "allowed_destinations": [ANVIL_ADDR_2]}});
        install_template(&self.api, &self.keys, t).await
    }

    async fn movement(&self, template: &str, amount: &str, idem: &str) -> anyhow::Result<String> {
        let body = json!({"template_key": template, "idempotency_key": idem,
            "intent": {"asset": "USDC", "amount": amount, "source": ANVIL_ADDR_0, "destination": ANVIL_ADDR_2}});
        let m = self.api.ok("POST", "/v3/movements", &self.keys.requester, Some(body), 201).await?;
        let id = m["id"].as_str().unwrap_or_default().to_string();
        self.api.ok("POST", &format!("/v3/movements/{id}/approve"), &self.keys.approver, None, 200).await?;
        Ok(id)
    }

    async fn done(&self, id: &str, logs: &[&Proc]) -> anyhow::Result<Value> {
        wait_settled(&self.api, &self.keys.requester, id, logs).await
    }

    /// `MintAndWithdraw` events of B's messenger: one per mint that happened.
    async fn mints(&self) -> anyhow::Result<usize> {
        let event = if self.v2 {
            "MintAndWithdraw(address,uint256,address,uint256)"
        } else {
            "MintAndWithdraw(address,uint256,address)"
        };
        let topic = keccak256(event).to_string();
        let logs = self
            .b
            .anvil
            .rpc(
                "eth_getLogs",
                json!([{"address": self.b.messenger, "fromBlock": "0x0", "toBlock": "latest", "topics": [topic]}]),
            )
            .await?;
        Ok(logs.as_array().map(Vec::len).unwrap_or(0))
    }

    async fn events(&self, movement: &str, node_key: &str) -> anyhow::Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT e.kind, COALESCE(e.method, '') FROM node_events e JOIN movement_request_nodes n ON n.id = \
             e.request_node_id
              WHERE n.request_id = $1::uuid AND n.node_key = $2 ORDER BY e.id",
        )
        .bind(movement)
        .bind(node_key)
        .fetch_all(&self.db.pool)
        .await?)
    }

    /// Injects faults into the attestation service (`POST /admin/faults`).
    async fn faults(&self, faults: Value) -> anyhow::Result<()> {
        http_client().post(format!("{}/admin/faults", self.sim_url)).json(&faults).send().await?.error_for_status()?;
        Ok(())
    }

    async fn sim_log(&self) -> anyhow::Result<Vec<(f64, u64)>> {
        let stats: Value = http_client().get(format!("{}/admin/stats", self.sim_url)).send().await?.json().await?;
        Ok(stats["log"]
            .as_array()
            .map(|l| {
                l.iter().map(|e| (e["at_seconds"].as_f64().unwrap_or(0.0), e["status"].as_u64().unwrap_or(0))).collect()
            })
            .unwrap_or_default())
    }
}

/// USDC from chain A to chain B through separately started workers: the burn on A, the
/// attestation observed, the mint on B; balances on both chains, one mint for the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usdc_moves_from_chain_a_to_chain_b_through_separate_workers() -> anyhow::Result<()> {
    let bridge = Bridge::start(&[]).await?;
    bridge.template("usdc.cctp.chain_a_to_b", ANVIL_ADDR_0).await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let id = bridge.movement("usdc.cctp.chain_a_to_b", "125.5", "cctp-e2e").await?;
    let m = bridge.done(&id, &[&dispatcher, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", dispatcher.log());
    let amount = U256::from(125_500_000u64);
    assert_eq!(usdc_of(&bridge.a, ANVIL_ADDR_0).await?, U256::from(SUPPLY) - amount, "burned on A");
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, amount, "minted on B");
    assert_eq!(bridge.mints().await?, 1, "one mint for the message");
    assert_eq!(bridge.proxy_b.count("eth_sendRawTransaction"), 1, "one receiveMessage broadcast");
    let burn = &node(&m, "burn")["provider_refs"];
    let mint = &node(&m, "mint")["provider_refs"];
    assert_eq!(burn["message_nonce"], "0", "{burn:#}");
    assert_eq!(burn["message_hash"], node(&m, "attestation")["provider_refs"]["message_hash"]);
    assert_eq!(mint["message_hash"], burn["message_hash"], "{mint:#}");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// Chain B checks a 2-of-3 attestation (Circle's transmitter is m-of-n): the attestation
/// service's two signatures (130 bytes) pass the mint's preflight and mint once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_two_of_three_attestation_mints_through_the_lane() -> anyhow::Result<()> {
    let bridge = Bridge::start_with(Setup { m_of_n: true, ..Setup::default() }).await?;
    bridge.template("usdc.cctp.m_of_n", ANVIL_ADDR_0).await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let id = bridge.movement("usdc.cctp.m_of_n", "12", "cctp-m-of-n").await?;
    let m = bridge.done(&id, &[&dispatcher, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", dispatcher.log());
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, U256::from(12_000_000u64), "minted on B");
    let attestation = node(&m, "attestation")["provider_refs"]["attestation"].as_str().unwrap_or("").to_string();
    assert_eq!(attestation.len(), 2 + 2 * 130, "two signatures: {attestation}");
    assert_eq!(bridge.mints().await?, 1, "one mint");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// The attestation service answers 404, then pending, then 429 with `Retry-After: 3`: the
/// observe step keeps waiting, asks again only after the hint, then hands the attestation to
/// the mint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_observe_step_waits_through_404_pending_and_429_and_honours_the_hint() -> anyhow::Result<()> {
    let bridge = Bridge::start(&[]).await?;
    bridge.template("usdc.cctp.chain_a_to_b", ANVIL_ADDR_0).await?;
    // What the service heard before (the health worker's lookups) is not the step's.
    let before = bridge.sim_log().await?.len();
    bridge
        .faults(json!([{"kind": "not_found", "count": 2}, {"kind": "pending", "count": 2},
                      {"kind": "rate_limit", "count": 1, "retry_after_seconds": 3}]))
        .await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let id = bridge.movement("usdc.cctp.chain_a_to_b", "10", "cctp-faults").await?;
    let m = bridge.done(&id, &[&dispatcher, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let log = bridge.sim_log().await?.split_off(before);
    let statuses: Vec<u64> = log.iter().map(|(_, s)| *s).collect();
    assert_eq!(&statuses[..6], &[404, 404, 200, 200, 429, 200], "{log:?}");
    for w in log.windows(2).take(4) {
        assert!(w[1].0 - w[0].0 >= 0.45, "polled again before poll_seconds: {log:?}");
    }
    assert!(log[5].0 - log[4].0 >= 2.95, "asked again before the 429's Retry-After: {log:?}");
    let observes = bridge.events(&id, "attestation").await?.iter().filter(|(_, m)| m == "observe").count();
    assert!(observes >= 6, "every answer was an observe call: {observes}");
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, U256::from(10_000_000u64));
    assert_eq!(bridge.mints().await?, 1);
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// The dispatcher is SIGKILLed right after the mint's `receiveMessage` reached chain B, before
/// it heard the answer: recovery finds the mint (its hash, and the message's nonce used on B)
/// and completes the movement; chain B saw one `receiveMessage` broadcast, one mint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_killed_after_the_mint_broadcast_is_recovered_by_the_message_nonce() -> anyhow::Result<()> {
    killed_after_the_mint_broadcast(false).await
}

/// The same on V2: the mint is recovered by the attested `bytes32` nonce (`usedNonces`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v2_dispatcher_killed_after_the_mint_broadcast_leads_to_one_receive_message() -> anyhow::Result<()> {
    killed_after_the_mint_broadcast(true).await
}

async fn killed_after_the_mint_broadcast(v2: bool) -> anyhow::Result<()> {
    let env = [
        ("MG_EXECUTOR_TIMEOUT_MS", "3000"),
        ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "5"),
        ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.3"),
    ];
    let bridge = Bridge::start_with(Setup { env: &env, v2, ..Setup::default() }).await?;
    bridge.template("usdc.cctp.chain_a_to_b", ANVIL_ADDR_0).await?;
    bridge.proxy_b.swallow_answers(1);
    let mut killed = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let recovery = bridge.worker("qtg-recovery").await?;
    let id = bridge.movement("usdc.cctp.chain_a_to_b", "42", "cctp-killed").await?;
    wait_until("the mint reaches chain B", Duration::from_secs(60), || async {
        Ok(bridge.proxy_b.forwarded("eth_sendRawTransaction") >= 1)
    })
    .await?;
    killed.signal("KILL");
    killed.wait_exit(Duration::from_secs(10)).await?;
    let state: String = sqlx::query_scalar(
        "SELECT node_state FROM movement_request_nodes WHERE request_id = $1::uuid AND node_key = 'mint'",
    )
    .bind(&id)
    .fetch_one(&bridge.db.pool)
    .await?;
    assert_eq!(state, "SUBMITTING", "qtg never heard the mint's answer");
    let m = bridge.done(&id, &[&recovery, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", recovery.log());
    let recovered = bridge.events(&id, "mint").await?;
    assert!(recovered.iter().any(|(_, m)| m == "recover"), "recovery decided the mint: {recovered:?}");
    assert_eq!(bridge.proxy_b.count("eth_sendRawTransaction"), 1, "no second receiveMessage");
    assert_eq!(bridge.mints().await?, 1, "one mint for the message nonce");
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, bridge.delivered(42_000_000));
    drop((observer, recovery));
    bridge.db.drop_db().await;
    Ok(())
}

/// A burn whose plan expects another caller than the address its signer is enrolled as is
/// refused by the dispatcher before anything is prepared or signed (the executor's own
/// preflight would pass: the plan's caller is its from-address): no preflight, prepare or
/// sign call, no nonce, nothing on chain A.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burn_caller_mismatch_is_refused_before_anything_is_signed() -> anyhow::Result<()> {
    let bridge = Bridge::start(&[]).await?;
    bridge.template("usdc.cctp.misaligned", ANVIL_ADDR_0).await?;
    bridge
        .api
        .ok(
            "PUT",
            "/v3/signers/signer.evm.local/expected-identity",
            &bridge.api.admin_key,
            Some(json!({"address": ANVIL_ADDR_2})),
            200,
        )
        .await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let start = bridge.a.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    let id = bridge.movement("usdc.cctp.misaligned", "5", "cctp-misaligned").await?;
    let m = bridge.done(&id, &[&dispatcher]).await?;
    assert_eq!(m["request_state"], "FAILED", "{m:#}");
    assert_eq!(node(&m, "burn")["error_code"], "CCTP_BURN_CALLER_MISMATCH", "{m:#}");
    let events = bridge.events(&id, "burn").await?;
    assert!(!events.iter().any(|(_, m)| m == "sign" || m == "prepare" || m == "submit"), "{events:?}");
    let detail: String = sqlx::query_scalar(
        "SELECT error_detail FROM movement_request_nodes WHERE request_id = $1::uuid AND node_key = 'burn'",
    )
    .bind(&id)
    .fetch_one(&bridge.db.pool)
    .await?;
    assert!(detail.contains("signs as"), "the dispatcher's alignment refused it: {detail}");
    let reserved: i64 =
        sqlx::query_scalar("SELECT count(*) FROM evm_nonce_reservation").fetch_one(&bridge.db.pool).await?;
    assert_eq!(reserved, 0, "no nonce was reserved");
    assert_eq!(bridge.a.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?, start);
    assert_eq!(usdc_of(&bridge.a, ANVIL_ADDR_0).await?, U256::from(SUPPLY), "nothing burned");
    drop(dispatcher);
    bridge.db.drop_db().await;
    Ok(())
}

/// Another caller receives the burn's message on chain B first (CCTP's receiveMessage is open
/// to anyone when the message names no destination caller): qtg's mint finds the message's
/// nonce used and completes by that evidence without sending anything — no receiveMessage
/// broadcast from qtg, its nonce given back, one mint on chain B.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_received_by_another_caller_completes_the_mint_without_a_send() -> anyhow::Result<()> {
    received_by_another_caller(false).await
}

/// The same on V2: the attested message's `bytes32` nonce is used on chain B.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v2_message_received_by_another_relayer_completes_the_mint_without_a_send() -> anyhow::Result<()> {
    received_by_another_caller(true).await
}

async fn received_by_another_caller(v2: bool) -> anyhow::Result<()> {
    let bridge = Bridge::start_with(Setup { v2, ..Setup::default() }).await?;
    bridge.template("usdc.cctp.chain_a_to_b", ANVIL_ADDR_0).await?;
    // The mint is held back by the kill switch while the third party acts.
    let pause = json!({"scope": "executor", "target": "exec.cctp.mint", "reason": "test: hold the mint"});
    bridge.api.ok("POST", "/v3/controls/pause", &bridge.api.admin_key, Some(pause.clone()), 200).await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let id = bridge.movement("usdc.cctp.chain_a_to_b", "30", "cctp-relayed").await?;
    let refs = |key: &'static str| {
        let (pool, id) = (bridge.db.pool.clone(), id.clone());
        async move {
            let v: Option<Value> = sqlx::query_scalar(
                "SELECT provider_refs FROM movement_request_nodes WHERE request_id = $1::uuid AND node_key = $2 \
                 AND node_state = 'COMPLETED'",
            )
            .bind(&id)
            .bind(key)
            .fetch_optional(&pool)
            .await?;
            anyhow::Ok(v)
        }
    };
    wait_until("the attestation is in", Duration::from_secs(60), || async { Ok(refs("attestation").await?.is_some()) })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", dispatcher.log()))?;
    let att = refs("attestation").await?.unwrap_or_default();
    let message: Bytes = att["message"].as_str().unwrap_or("0x").parse()?;
    let attestation: Bytes = att["attestation"].as_str().unwrap_or("0x").parse()?;
    // A relayer (anvil's fifth account, straight to chain B; not the second, the proxies' admin,
    // which may only upgrade) receives it.
    let call = receiveMessageCall { message, attestation }.abi_encode();
    let tx = json!({"from": "0x15d34aaf54267db7d7c367839aaf71a00a2c6a65", "to": bridge.b.transmitter,
                    "data": format!("0x{}", alloy::primitives::hex::encode(call)), "gas": "0x100000"});
    let hash = bridge.b.anvil.rpc("eth_sendTransaction", json!([tx])).await?;
    wait_until("the relayer's mint", Duration::from_secs(20), || async {
        Ok(!bridge.b.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await?.is_null())
    })
    .await?;
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, bridge.delivered(30_000_000), "the relayer minted");
    bridge.api.ok("POST", "/v3/controls/resume", &bridge.api.admin_key, Some(pause), 200).await?;
    let m = bridge.done(&id, &[&dispatcher, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let mint = &node(&m, "mint")["provider_refs"];
    assert_eq!(mint["message_nonce_used"], true, "{mint:#}");
    assert_eq!(mint["sent"], false, "{mint:#}");
    assert_eq!(bridge.proxy_b.count("eth_sendRawTransaction"), 0, "qtg sent no receiveMessage");
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, bridge.delivered(30_000_000), "one mint");
    let statuses: Vec<String> = sqlx::query_scalar(
        "SELECT r.status FROM evm_nonce_reservation r JOIN movement_request_nodes n ON n.id = r.request_node_id
          WHERE n.request_id = $1::uuid AND n.node_key = 'mint'",
    )
    .bind(&id)
    .fetch_all(&bridge.db.pool)
    .await?;
    assert_eq!(statuses, vec!["released".to_string()], "the mint's nonce, never used, was given back");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// `qtg-drift` against the two chains: the first check records what it sees (unbaselined), an
/// admin enrols it as the baseline with `qtgctl drift baseline`, and once `anvil_setCode`
/// replaces chain B's message transmitter the check reports the changed code hash — one audit
/// row, one `drift_detected` callback, the gauge, and (MG_VERIFY_DRIFT_PAUSE) the CCTP
/// executors paused through the kill switch; chain A stays ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changed_code_on_a_configured_contract_is_drift_and_pauses_the_lane() -> anyhow::Result<()> {
    let hooks = Hooks::default();
    let hook_url = hooks.serve().await?;
    let bridge = Bridge::start(&[
        ("MG_VERIFY_DRIFT_ENABLED", "true"),
        ("MG_VERIFY_DRIFT_INTERVAL_SECONDS", "0.5"),
        ("MG_VERIFY_DRIFT_PAUSE", "true"),
        ("MG_DRIFT_ALERT_URL", &hook_url),
        ("MG_CALLBACK_SECRET", "drift-test-secret"),
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ])
    .await?;
    let drift = bridge.worker("qtg-drift").await?;
    let callbacks = bridge.worker("qtg-callback").await?;
    let check = |scope: &'static str| bridge.drift_check(scope);
    wait_until("both chains checked", Duration::from_secs(30), || async {
        Ok(check("evm:31337").await?["status"] == "unbaselined" && check("evm:31338").await?["status"] == "unbaselined")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", drift.log()))?;
    let seen = check("evm:31338").await?;
    let code_hash = seen["observed"]["cctp.message_transmitter.code_hash"].as_str().unwrap_or_default().to_string();
    assert!(code_hash.starts_with("0x") && code_hash.len() == 66, "{seen:#}");
    assert_eq!(seen["observed"]["cctp.usdc.decimals"], "6");
    assert_eq!(seen["observed"]["cctp.message_transmitter.local_domain"], "1");
    // Enrolment: an admin records what the checks saw.
    for scope in ["evm:31337", "evm:31338"] {
        bridge.baseline(scope, "enrolment").await?;
    }
    wait_until("both chains ok", Duration::from_secs(30), || async {
        Ok(check("evm:31337").await?["status"] == "ok" && check("evm:31338").await?["status"] == "ok")
    })
    .await?;
    // Chain B's transmitter is replaced under the lane.
    bridge.b.anvil.rpc("anvil_setCode", json!([bridge.b.transmitter, "0x6080604052600080fd"])).await?;
    wait_until("drift on chain B", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "drift")
    })
    .await?;
    drift.wait_ticks("verify_drift", 3, Duration::from_secs(30)).await?;
    let b = check("evm:31338").await?;
    let diffs = b["differences"].as_array().cloned().unwrap_or_default();
    // The code hash, and the transmitter's reads that the replaced code now refuses.
    let facts: BTreeSet<&str> = diffs.iter().filter_map(|d| d["fact"].as_str()).collect();
    assert!(facts.contains("cctp.message_transmitter.code_hash"), "{b:#}");
    assert!(facts.iter().all(|f| f.starts_with("cctp.message_transmitter.")), "only the transmitter changed: {b:#}");
    let hash = diffs.iter().find(|d| d["fact"] == "cctp.message_transmitter.code_hash").cloned().unwrap_or_default();
    assert_eq!(hash["baseline"], json!(code_hash));
    assert_ne!(hash["observed"], json!(code_hash));
    assert_eq!(check("evm:31337").await?["status"], "ok", "chain A did not change");
    // One audit row and one callback for the new differences, however many checks saw them.
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'drift.detected' AND entity_type = 'chain' AND \
         entity_id = 'evm:31338'",
    )
    .fetch_one(&bridge.db.pool)
    .await?;
    assert_eq!(audits, 1);
    wait_until("the drift callback", Duration::from_secs(30), || async { Ok(!hooks.of("drift_detected").is_empty()) })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", callbacks.log()))?;
    callbacks.wait_ticks("callback_dispatcher", 3, Duration::from_secs(30)).await?;
    let received = hooks.of("drift_detected");
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_eq!(received[0]["event_type"], "drift_detected");
    assert_eq!(received[0]["data"]["scope"], "evm:31338");
    // The lane is paused: both CCTP executors read chain B.
    let controls = bridge.api.ok("GET", "/v3/controls", &bridge.keys.requester, None, 200).await?;
    let paused: BTreeSet<String> = controls["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["scope"] == "executor")
        .filter_map(|p| p["target"].as_str().map(str::to_string))
        .collect();
    assert_eq!(paused, BTreeSet::from(["exec.cctp.burn".to_string(), "exec.cctp.mint".to_string()]), "{controls:#}");
    // The gauge.
    let admin = drift.wait_field("admin_addr", Duration::from_secs(10)).await?;
    let metrics = http_client().get(format!("http://{admin}/metrics")).send().await?.text().await?;
    let gauge = format!("qtg_drift_differences{{scope=\"evm:31338\"}} {}", diffs.len());
    assert!(metrics.lines().any(|l| l == gauge), "{gauge} in {metrics}");
    drop((drift, callbacks));
    bridge.db.drop_db().await;
    Ok(())
}

/// An attester rotation and a signature-threshold change on chain B's transmitter — read
/// through Circle's own functions (`getNumEnabledAttesters`, `getEnabledAttester`,
/// `signatureThreshold`) — are drift of chain B's scope, and nothing else is; so is an upgrade
/// of USDC behind its proxy, which leaves every code hash as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attester_rotation_and_a_threshold_change_are_drift() -> anyhow::Result<()> {
    let bridge =
        Bridge::start(&[("MG_VERIFY_DRIFT_ENABLED", "true"), ("MG_VERIFY_DRIFT_INTERVAL_SECONDS", "0.5")]).await?;
    let drift = bridge.worker("qtg-drift").await?;
    let check = |scope: &'static str| bridge.drift_check(scope);
    wait_until("chain B checked", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "unbaselined")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", drift.log()))?;
    let seen = check("evm:31338").await?;
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let observed = &seen["observed"];
    assert_eq!(observed["cctp.message_transmitter.attesters"], attester.address().to_string().to_lowercase());
    assert_eq!(observed["cctp.message_transmitter.signature_threshold"], "1", "{seen:#}");
    assert_eq!(observed["cctp.message_transmitter.paused"], "false");
    assert_eq!(observed["cctp.message_transmitter.owner"], ANVIL_ADDR_0.to_lowercase());
    assert_eq!(observed["cctp.token_messenger.local_minter"], bridge.b.messenger.to_lowercase());
    assert_eq!(observed["cctp.token_minter.burn_limit_per_message"], "1000000000000");
    assert_eq!(observed["cctp.token_minter.local_token.0"], bridge.b.usdc.to_lowercase(), "B mints its USDC for A's");
    assert_eq!(observed["cctp.usdc.implementation"], bridge.b.usdc_implementation.to_lowercase(), "{seen:#}");
    assert!(
        observed.as_object().into_iter().flatten().all(|(_, v)| v != "reverted"),
        "every fact reads through a function the contracts have: {seen:#}"
    );
    bridge.baseline("evm:31338", "enrolment").await?;
    wait_until("chain B ok", Duration::from_secs(30), || async { Ok(check("evm:31338").await?["status"] == "ok") })
        .await?;
    let newcomer: PrivateKeySigner = ATTESTER_KEY_2.parse()?;
    let b = &bridge.b;
    send(&b.anvil, Some(&b.transmitter), &enableAttesterCall { newAttester: newcomer.address() }.abi_encode()).await?;
    let call = setSignatureThresholdCall { newSignatureThreshold: U256::from(2) };
    send(&b.anvil, Some(&b.transmitter), &call.abi_encode()).await?;
    wait_until("drift on chain B", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "drift")
    })
    .await?;
    drift.wait_ticks("verify_drift", 2, Duration::from_secs(30)).await?;
    let now = check("evm:31338").await?;
    let facts: BTreeSet<&str> =
        now["differences"].as_array().into_iter().flatten().filter_map(|d| d["fact"].as_str()).collect();
    assert_eq!(
        facts,
        BTreeSet::from(["cctp.message_transmitter.attesters", "cctp.message_transmitter.signature_threshold"]),
        "{now:#}"
    );
    // The rotation accepted (a new baseline); then USDC is upgraded behind its proxy: the
    // proxy's code is the same, its implementation slot is not.
    bridge.baseline("evm:31338", "rotation reviewed").await?;
    wait_until("chain B ok again", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "ok")
    })
    .await?;
    let upgraded = deploy(&b.anvil, "QtgUsdc", U256::ZERO.abi_encode()).await?;
    let call = upgradeToCall { newImplementation: upgraded.parse()? };
    send_from(&b.anvil, USDC_PROXY_ADMIN, Some(&b.usdc), &call.abi_encode()).await?;
    wait_until("drift on chain B after the upgrade", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "drift")
    })
    .await?;
    let now = check("evm:31338").await?;
    let diffs = now["differences"].as_array().cloned().unwrap_or_default();
    assert_eq!(diffs.len(), 1, "{now:#}");
    assert_eq!(diffs[0]["fact"], "cctp.usdc.implementation");
    assert_eq!(diffs[0]["observed"], json!(upgraded.to_lowercase()));
    // Balances live in the proxy: the upgrade kept them.
    assert_eq!(usdc_of(b, ANVIL_ADDR_0).await?, U256::from(SUPPLY), "B's supply is where it was");
    drop(drift);
    bridge.db.drop_db().await;
    Ok(())
}

/// The fee recipient of the V2 messengers (anvil's fourth account).
const FEE_RECIPIENT: &str = "0x90f79bf6eb2c4f870365e785982e1f101e93b906";

/// V2's `initialize(address)` (the transmitter's first attester; the messenger's fee recipient),
/// through a proxy.
mod v2_init {
    alloy::sol! {
        function initialize(address a);
    }
}

/// A V2 side: USDC, `MessageTransmitterV2` (one attester) and `TokenMessengerV2` (its own
/// minter, fees to [`FEE_RECIPIENT`]), each behind an EIP-1967 proxy as Circle deploys them
/// (admin: [`USDC_PROXY_ADMIN`], which may only upgrade; the roles are anvil's first account's).
async fn side_v2(domain: u32, attester: Address) -> anyhow::Result<Side> {
    let anvil = Anvil::start_chain(31337 + u64::from(domain)).await?;
    let usdc = deploy(&anvil, "QtgUsdc", U256::from(SUPPLY).abi_encode()).await?;
    let admin: Address = USDC_PROXY_ADMIN.parse()?;
    let proxy = |implementation: &str, init: Address| {
        let init = Bytes::from(v2_init::initializeCall { a: init }.abi_encode());
        Ok::<_, anyhow::Error>((implementation.parse::<Address>()?, admin, init).abi_encode_params())
    };
    let transmitter_implementation =
        deploy(&anvil, "MessageTransmitterV2", (domain, attester).abi_encode_params()).await?;
    let transmitter = deploy(&anvil, "QtgEip1967Proxy", proxy(&transmitter_implementation, attester)?).await?;
    let fee_recipient: Address = FEE_RECIPIENT.parse()?;
    let messenger_implementation =
        deploy(&anvil, "TokenMessengerV2", (transmitter.parse::<Address>()?, fee_recipient).abi_encode_params())
            .await?;
    let messenger = deploy(&anvil, "QtgEip1967Proxy", proxy(&messenger_implementation, fee_recipient)?).await?;
    send(&anvil, Some(&usdc), &configureMinterCall { minter: messenger.parse()?, enabled: true }.abi_encode()).await?;
    let limit = setMaxBurnAmountPerMessageCall { token: usdc.parse()?, burnLimitPerMessage: U256::from(SUPPLY) };
    send(&anvil, Some(&messenger), &limit.abi_encode()).await?;
    Ok(Side {
        anvil,
        usdc_implementation: usdc.clone(),
        usdc,
        transmitter,
        messenger,
        transmitter_implementation,
        messenger_implementation,
    })
}

/// Chain A (domain 0) and chain B (domain 1) on V2, each messenger registered with the other
/// and each side's USDC linked to the other's.
async fn linked_v2(attester: &PrivateKeySigner) -> anyhow::Result<(Side, Side)> {
    let (a, b) = (side_v2(0, attester.address()).await?, side_v2(1, attester.address()).await?);
    for (from, to, domain) in [(&a, &b, 1), (&b, &a, 0)] {
        let call = addRemoteTokenMessengerCall { domain, tokenMessenger: word(&to.messenger)? };
        send(&from.anvil, Some(&from.messenger), &call.abi_encode()).await?;
        let call =
            linkTokenPairCall { localToken: from.usdc.parse()?, remoteDomain: domain, remoteToken: word(&to.usdc)? };
        send(&from.anvil, Some(&from.messenger), &call.abi_encode()).await?;
    }
    Ok((a, b))
}

/// V2 as Circle's contracts do it (docs/cctp-reference.md §2): the burn emits its message with
/// the attester's fields zero; the attested message (nonce, executed finality, fee, expiry
/// filled in) is the same transfer by every field the source wrote; it mints `amount − fee`
/// to the recipient and the fee to the fee recipient, once; the emitted bytes themselves, an
/// expired attestation and a fee above `maxFee` are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_fast_burn_mints_the_amount_less_the_fee_executed_once() -> anyhow::Result<()> {
    use qtg_evm::calls::{burn_v2_calldata, MessageV2, FINALITY_FAST};
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let (a, b) = linked_v2(&attester).await?;
    let amount = U256::from(100_000_000u64);
    send(&a.anvil, Some(&a.usdc), &approveCall { spender: a.messenger.parse()?, value: amount }.abi_encode()).await?;
    let (recipient, usdc_a): (Address, Address) = (ANVIL_ADDR_2.parse()?, a.usdc.parse()?);
    let burn = burn_v2_calldata(amount, 1, recipient, usdc_a, None, U256::from(500_000u64), FINALITY_FAST);
    let receipt = send(&a.anvil, Some(&a.messenger), &burn).await?;
    let emitted_bytes = message_sent(&receipt)?;
    let emitted = MessageV2::parse(&emitted_bytes).expect("a V2 message");
    let body = emitted.burn().expect("a V2 burn");
    assert_eq!(
        (emitted.nonce, emitted.finality_threshold_executed, emitted.min_finality_threshold),
        (Default::default(), 0, 1000)
    );
    assert_eq!(
        (body.amount, body.max_fee, body.fee_executed, body.expiration_block),
        (amount, U256::from(500_000u64), U256::ZERO, U256::ZERO)
    );
    assert_eq!(usdc_of(&a, ANVIL_ADDR_0).await?, U256::from(SUPPLY) - amount, "the whole amount burned on A");
    // The attester fills its fields and signs keccak256 of the result.
    let head = b.anvil.rpc("eth_blockNumber", json!([])).await?;
    let head = u64::from_str_radix(head.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)?;
    let attest = |fee: u64, expiry: u64| -> anyhow::Result<(Bytes, Bytes)> {
        let mut m = emitted_bytes.to_vec();
        m[12..44].copy_from_slice(&[0xab; 32]);
        m[144..148].copy_from_slice(&1000u32.to_be_bytes());
        m[148 + 164..148 + 196].copy_from_slice(&U256::from(fee).to_be_bytes::<32>());
        m[148 + 196..148 + 228].copy_from_slice(&U256::from(expiry).to_be_bytes::<32>());
        let signature = attester.sign_hash_sync(&keccak256(&m))?;
        Ok((Bytes::from(m), Bytes::from(signature.as_bytes().to_vec())))
    };
    let receive = |(message, attestation): (Bytes, Bytes)| receiveMessageCall { message, attestation }.abi_encode();
    let refused = |call: Vec<u8>, why: &'static str| refused_by_transmitter(&b, call, why);
    let raw_signature = attester.sign_hash_sync(&keccak256(&emitted_bytes))?;
    refused(receive((emitted_bytes.clone(), Bytes::from(raw_signature.as_bytes().to_vec()))), "Nonce already used")
        .await?;
    refused(receive(attest(130_000, head)?), "Message expired and must be re-signed").await?;
    refused(receive(attest(600_000, head + 100)?), "Fee exceeds max fee").await?;
    let good = attest(130_000, head + 100)?;
    let attested = MessageV2::parse(&good.0).expect("attested");
    assert!(emitted.same_transfer(&attested), "the attested message is the burn's transfer");
    send(&b.anvil, Some(&b.transmitter), &receive(good.clone())).await?;
    assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, amount - U256::from(130_000u64), "the amount less the fee executed");
    assert_eq!(usdc_of(&b, FEE_RECIPIENT).await?, U256::from(130_000u64), "the fee to the fee recipient");
    refused(receive(good), "Nonce already used").await?;
    Ok(())
}

/// `qtg-attestation-sim` on V2: its fee API answers in Circle's shape (parsed by the lane's
/// `fees`); a Fast burn whose `maxFee` covers the Fast fee is attested at 1000 with that fee
/// and mints the amount less it; one whose `maxFee` does not is attested Standard
/// (`delayReason: insufficient_fee`, no fee) and mints it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attestation_service_attests_v2_fast_and_falls_back_to_standard() -> anyhow::Result<()> {
    use qtg_evm::calls::{burn_v2_calldata, FINALITY_FAST};
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let (a, b) = linked_v2(&attester).await?;
    let source = format!("0={}", a.anvil.url);
    let sim = Proc::spawn_args(
        "qtg-attestation-sim",
        &["--addr", "127.0.0.1:0", "--source", &source, "--confirmations", "1", "--fast-fee-bps", "1.3"],
        "",
        &[("QTG_ATTESTATION_SIM_ATTESTER_KEY", ATTESTER_KEY)],
    )
    .await?;
    let base = format!("http://{}", sim.wait_field("attestation_addr", Duration::from_secs(20)).await?);
    let http = http_client();
    let quotes: Value = http.get(format!("{base}/v2/burn/USDC/fees/0/1")).send().await?.json().await?;
    let quotes = qtg_cctp::fees::parse_quotes(&quotes).map_err(anyhow::Error::msg)?;
    let amount = U256::from(100_000_000u64);
    assert_eq!(quotes[0].finality_threshold, 1000);
    assert_eq!(quotes[0].minimum_fee.of(amount), U256::from(13_000u64), "1.3 bps of 100 USDC");
    send(&a.anvil, Some(&a.usdc), &approveCall { spender: a.messenger.parse()?, value: U256::MAX }.abi_encode())
        .await?;
    let (recipient, usdc_a): (Address, Address) = (ANVIL_ADDR_2.parse()?, a.usdc.parse()?);
    let mut minted = U256::ZERO;
    for (max_fee, fee, finality, delay) in
        [(500_000u64, 13_000u64, "1000", Value::Null), (1u64, 0u64, "2000", json!("insufficient_fee"))]
    {
        let burn = burn_v2_calldata(amount, 1, recipient, usdc_a, None, U256::from(max_fee), FINALITY_FAST);
        let receipt = send(&a.anvil, Some(&a.messenger), &burn).await?;
        let tx = receipt["transactionHash"].as_str().unwrap_or("").to_string();
        let body: Value = http.get(format!("{base}/v2/messages/0?transactionHash={tx}")).send().await?.json().await?;
        let m = &body["messages"][0];
        assert_eq!((m["status"].as_str(), m["cctpVersion"].as_u64()), (Some("complete"), Some(2)), "{body}");
        assert_eq!(m["decodedMessage"]["finalityThresholdExecuted"], finality, "{body}");
        assert_eq!(m["decodedMessage"]["decodedMessageBody"]["feeExecuted"], fee.to_string());
        assert_eq!(m["delayReason"], delay);
        let message: Bytes = m["message"].as_str().unwrap_or("0x").parse()?;
        let attestation: Bytes = m["attestation"].as_str().unwrap_or("0x").parse()?;
        send(&b.anvil, Some(&b.transmitter), &receiveMessageCall { message, attestation }.abi_encode()).await?;
        minted += amount - U256::from(fee);
        assert_eq!(usdc_of(&b, ANVIL_ADDR_2).await?, minted, "the amount less the fee executed");
    }
    assert_eq!(usdc_of(&b, FEE_RECIPIENT).await?, U256::from(13_000u64), "only the Fast transfer paid a fee");
    drop(sim);
    Ok(())
}

/// The V2 lane through separate workers: Fast (1 bp in the simulator) mints the amount less
/// the fee and pays the fee recipient; Standard mints it all; Fast with `amount_is =
/// "delivered"` burns the amount plus its cap and delivers at least the amount; a Fast burn
/// whose cap is below the route's fee is refused at preflight with nothing signed or sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v2_standard_and_fast_complete_with_balances_that_account_for_the_fee() -> anyhow::Result<()> {
    let bridge = Bridge::start_with(Setup { v2: true, ..Setup::default() }).await?;
    let terms = |finality, max_fee, amount_is| V2Terms { finality, max_fee, amount_is, hook_data: None };
    bridge.template_v2("usdc.v2.fast", ANVIL_ADDR_0, terms("fast", "0.05", "burned")).await?;
    bridge.template_v2("usdc.v2.standard", ANVIL_ADDR_0, terms("standard", "0", "burned")).await?;
    // Delivered, and with hook data (depositForBurnWithHook): the data rides in the message.
    let hooked = V2Terms { hook_data: Some("0xdeadbeef"), ..terms("fast", "0.01", "delivered") };
    bridge.template_v2("usdc.v2.delivered", ANVIL_ADDR_0, hooked).await?;
    bridge.template_v2("usdc.v2.capped", ANVIL_ADDR_0, terms("fast", "0.001", "burned")).await?;
    // The refused one first, alone: nothing of it may reach chain A.
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let sent = bridge.a.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    let capped = bridge.movement("usdc.v2.capped", "100", "v2-capped").await?;
    let m = bridge.done(&capped, &[&dispatcher]).await?;
    assert_eq!(m["request_state"], "FAILED", "{m:#}");
    assert_eq!(node(&m, "burn")["error_code"], "CCTP_FEE_ABOVE_CAP", "{m:#}");
    let events = bridge.events(&capped, "burn").await?;
    assert!(!events.iter().any(|(_, m)| m == "sign" || m == "prepare" || m == "submit"), "{events:?}");
    assert_eq!(bridge.a.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?, sent);
    assert_eq!(usdc_of(&bridge.a, ANVIL_ADDR_0).await?, U256::from(SUPPLY), "nothing burned");
    let fast = bridge.movement("usdc.v2.fast", "100", "v2-fast").await?;
    let standard = bridge.movement("usdc.v2.standard", "40", "v2-standard").await?;
    let delivered = bridge.movement("usdc.v2.delivered", "20", "v2-delivered").await?;
    let mut finality = Vec::new();
    for id in [&fast, &standard, &delivered] {
        let m = bridge.done(id, &[&dispatcher, &observer]).await?;
        assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", dispatcher.log());
        let att = &node(&m, "attestation")["provider_refs"];
        assert_eq!(att["cctp_version"], 2, "{att:#}");
        finality.push(att["finality_threshold_executed"].as_u64().unwrap_or(0));
        assert_eq!(node(&m, "mint")["provider_refs"]["fee_executed"], att["fee_executed"], "{m:#}");
    }
    assert_eq!(finality, vec![1000, 2000, 1000], "Fast, Standard, Fast");
    let m = bridge.done(&delivered, &[]).await?;
    let attested: Bytes = node(&m, "attestation")["provider_refs"]["message"].as_str().unwrap_or("0x").parse()?;
    let hook = qtg_evm::calls::MessageV2::parse(&attested).and_then(|m| m.burn()).map(|b| b.hook_data);
    assert_eq!(hook, Some(Bytes::from(vec![0xde, 0xad, 0xbe, 0xef])), "the hook data in the minted message");
    // Fast 100: fee 0.01. Standard 40: no fee. Delivered 20 with cap 0.01: burns 20.01, fee
    // 1 bp of it rounded up (0.002001), delivers 20.007999.
    assert_eq!(usdc_of(&bridge.a, ANVIL_ADDR_0).await?, U256::from(SUPPLY - 160_010_000), "burned on A");
    assert_eq!(
        usdc_of(&bridge.b, ANVIL_ADDR_2).await?,
        U256::from(99_990_000u64 + 40_000_000 + 20_007_999),
        "minted on B, less the fees"
    );
    assert_eq!(usdc_of(&bridge.b, FEE_RECIPIENT).await?, U256::from(10_000u64 + 2_001), "the fees");
    assert_eq!(bridge.mints().await?, 3, "one mint per movement");
    assert_eq!(bridge.proxy_b.count("eth_sendRawTransaction"), 3, "one receiveMessage per movement");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// A V2 Fast attestation signed already expired (the simulator's `expired` fault) is
/// re-attested by the attestation step (`POST /v2/reattest/{nonce}`) instead of being handed
/// to the mint; the fresh one — 2-of-3, as chain B's V2 transmitter requires — mints once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_v2_fast_attestation_is_re_attested_and_a_two_of_three_mints() -> anyhow::Result<()> {
    let bridge =
        Bridge::start_with(Setup { v2: true, m_of_n: true, sim: &["--fast-expiry-blocks", "50"], ..Setup::default() })
            .await?;
    bridge.template("usdc.v2.expiring", ANVIL_ADDR_0).await?;
    bridge.faults(json!({"kind": "expired", "count": 1})).await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let id = bridge.movement("usdc.v2.expiring", "12", "v2-expiring").await?;
    let m = bridge.done(&id, &[&dispatcher, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", observer.log());
    let stats: Value = http_client().get(format!("{}/admin/stats", bridge.sim_url)).send().await?.json().await?;
    assert_eq!(stats["reattests"], 1, "re-attested once: {stats}");
    let att = &node(&m, "attestation")["provider_refs"];
    assert_eq!(att["attestation"].as_str().unwrap_or("").len(), 2 + 2 * 130, "two signatures: {att:#}");
    assert_ne!(att["expiration_block"], "0", "a Fast attestation with an expiry: {att:#}");
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, bridge.delivered(12_000_000), "minted on B");
    assert_eq!(bridge.mints().await?, 1, "one mint");
    assert_eq!(bridge.proxy_b.count("eth_sendRawTransaction"), 1, "one receiveMessage");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// `qtg-drift` on a V2 route reads Circle's V2 functions (`cctp.v2.*`: none reverts): the
/// transmitter's attesters and threshold, the messenger's minimum fee, fee recipient and the
/// lane's sender on its denylist, and both proxies' implementations; once baselined, an
/// attester rotation, a threshold change, a new minimum fee and the sender's denylisting are
/// each reported, and then an upgrade of the transmitter behind its proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v2_drift_reports_a_rotation_a_threshold_a_minimum_fee_a_denylisting_and_an_upgrade() -> anyhow::Result<()> {
    let env = [("MG_VERIFY_DRIFT_ENABLED", "true"), ("MG_VERIFY_DRIFT_INTERVAL_SECONDS", "0.5")];
    let bridge = Bridge::start_with(Setup { env: &env, v2: true, ..Setup::default() }).await?;
    let drift = bridge.worker("qtg-drift").await?;
    let check = |scope: &'static str| bridge.drift_check(scope);
    wait_until("chain B checked", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "unbaselined")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", drift.log()))?;
    let seen = check("evm:31338").await?;
    let attester: PrivateKeySigner = ATTESTER_KEY.parse()?;
    let observed = &seen["observed"];
    let sender = format!("cctp.v2.token_messenger.denylisted.{}", ANVIL_ADDR_0.to_lowercase());
    assert_eq!(observed["cctp.v2.message_transmitter.attesters"], attester.address().to_string().to_lowercase());
    assert_eq!(observed["cctp.v2.message_transmitter.signature_threshold"], "1", "{seen:#}");
    assert_eq!(observed["cctp.v2.token_messenger.min_fee"], "0", "{seen:#}");
    assert_eq!(observed["cctp.v2.token_messenger.fee_recipient"], FEE_RECIPIENT, "{seen:#}");
    assert_eq!(observed[sender.as_str()], "false", "{seen:#}");
    assert_eq!(
        observed["cctp.v2.token_messenger.implementation"],
        bridge.b.messenger_implementation.to_lowercase(),
        "{seen:#}"
    );
    assert_eq!(
        observed["cctp.v2.message_transmitter.implementation"],
        bridge.b.transmitter_implementation.to_lowercase(),
        "{seen:#}"
    );
    assert!(observed.get("cctp.token_messenger.code_hash").is_none(), "no V1 facts on a V2-only domain: {seen:#}");
    assert!(
        observed.as_object().into_iter().flatten().all(|(_, v)| v != "reverted"),
        "every fact reads through a function the V2 contracts have: {seen:#}"
    );
    bridge.baseline("evm:31338", "enrolment").await?;
    wait_until("chain B ok", Duration::from_secs(30), || async { Ok(check("evm:31338").await?["status"] == "ok") })
        .await?;
    let newcomer: PrivateKeySigner = ATTESTER_KEY_2.parse()?;
    let b = &bridge.b;
    send(&b.anvil, Some(&b.transmitter), &enableAttesterCall { newAttester: newcomer.address() }.abi_encode()).await?;
    let call = setSignatureThresholdCall { newSignatureThreshold: U256::from(2) };
    send(&b.anvil, Some(&b.transmitter), &call.abi_encode()).await?;
    send(&b.anvil, Some(&b.messenger), &setMinFeeCall { minFee_: U256::from(1000) }.abi_encode()).await?;
    send(&b.anvil, Some(&b.messenger), &denylistCall { account: ANVIL_ADDR_0.parse()? }.abi_encode()).await?;
    wait_until("drift on chain B", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "drift")
    })
    .await?;
    drift.wait_ticks("verify_drift", 2, Duration::from_secs(30)).await?;
    let now = check("evm:31338").await?;
    let facts: BTreeSet<&str> =
        now["differences"].as_array().into_iter().flatten().filter_map(|d| d["fact"].as_str()).collect();
    assert_eq!(
        facts,
        BTreeSet::from([
            "cctp.v2.message_transmitter.attesters",
            "cctp.v2.message_transmitter.signature_threshold",
            "cctp.v2.token_messenger.min_fee",
            sender.as_str(),
        ]),
        "{now:#}"
    );
    // Reviewed; then the transmitter is upgraded behind its proxy: the proxy's code is the
    // same, its EIP-1967 implementation slot is not.
    bridge.baseline("evm:31338", "changes reviewed").await?;
    wait_until("chain B ok again", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "ok")
    })
    .await?;
    let attester_word = (1u32, attester.address()).abi_encode_params();
    let upgraded = deploy(&b.anvil, "MessageTransmitterV2", attester_word).await?;
    send_from(
        &b.anvil,
        USDC_PROXY_ADMIN,
        Some(&b.transmitter),
        &upgradeToCall { newImplementation: upgraded.parse()? }.abi_encode(),
    )
    .await?;
    wait_until("drift on chain B after the upgrade", Duration::from_secs(30), || async {
        Ok(check("evm:31338").await?["status"] == "drift")
    })
    .await?;
    let now = check("evm:31338").await?;
    let diffs = now["differences"].as_array().cloned().unwrap_or_default();
    assert_eq!(diffs.len(), 1, "{now:#}");
    assert_eq!(diffs[0]["fact"], "cctp.v2.message_transmitter.implementation");
    assert_eq!(diffs[0]["observed"], json!(upgraded.to_lowercase()));
    drop(drift);
    bridge.db.drop_db().await;
    Ok(())
}

/// Two identical V2 burns emit byte-identical messages; an attestation service that answers
/// the second with the first's attested message (its nonce already used on B) must not let the
/// second movement complete without a mint: the attested nonce belongs to the first movement,
/// so the second's attestation step fails `CCTP_ATTESTATION_MISMATCH` (its burn handed to a
/// person), and B mints once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v2_message_replayed_for_an_identical_burn_never_completes_its_mint() -> anyhow::Result<()> {
    let bridge = Bridge::start_with(Setup { v2: true, ..Setup::default() }).await?;
    bridge.template("usdc.v2.twice", ANVIL_ADDR_0).await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let first = bridge.movement("usdc.v2.twice", "10", "v2-first").await?;
    let m = bridge.done(&first, &[&dispatcher, &observer]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    bridge.faults(json!({"kind": "replay", "count": 100})).await?;
    let second = bridge.movement("usdc.v2.twice", "10", "v2-second").await?;
    let m = bridge.done(&second, &[&dispatcher, &observer]).await?;
    assert_ne!(m["request_state"], "COMPLETED", "{m:#}");
    assert_eq!(node(&m, "burn")["node_state"], "COMPLETED", "the second burn happened: {m:#}");
    assert_eq!(node(&m, "attestation")["error_code"], "CCTP_ATTESTATION_MISMATCH", "{m:#}");
    assert_ne!(node(&m, "mint")["node_state"], "COMPLETED", "{m:#}");
    assert_eq!(bridge.mints().await?, 1, "one mint: the first movement's");
    assert_eq!(bridge.proxy_b.count("eth_sendRawTransaction"), 1, "no second receiveMessage");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}

/// The Fast Transfer allowance runs out (the simulator's `--fast-allowance 50`): a Fast burn
/// it covers is attested Fast; the next, beyond it, is attested Standard (`delayReason:
/// insufficient_allowance_available`, no Fast fee) — the movement only waits longer and
/// completes, the recipient getting the whole amount; the allowance answers in Circle's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fast_transfer_beyond_the_fast_allowance_completes_as_standard() -> anyhow::Result<()> {
    let bridge = Bridge::start_with(Setup { v2: true, sim: &["--fast-allowance", "50"], ..Setup::default() }).await?;
    bridge.template("usdc.v2.allowance", ANVIL_ADDR_0).await?;
    let dispatcher = bridge.worker("qtg-dispatcher").await?;
    let observer = bridge.worker("qtg-observer").await?;
    let mut seen = Vec::new();
    for idem in ["v2-within", "v2-beyond"] {
        let id = bridge.movement("usdc.v2.allowance", "30", idem).await?;
        let m = bridge.done(&id, &[&dispatcher, &observer]).await?;
        assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
        let att = node(&m, "attestation")["provider_refs"].clone();
        seen.push((
            att["finality_threshold_executed"].clone(),
            att["delay_reason"].clone(),
            att["fee_executed"].clone(),
        ));
    }
    assert_eq!(
        seen,
        vec![
            (json!(1000), Value::Null, json!("3000")),
            (json!(2000), json!("insufficient_allowance_available"), json!("0")),
        ]
    );
    assert_eq!(usdc_of(&bridge.b, ANVIL_ADDR_2).await?, U256::from(29_997_000u64 + 30_000_000), "minted on B");
    let allowance: Value =
        http_client().get(format!("{}/v2/fastBurn/USDC/allowance", bridge.sim_url)).send().await?.json().await?;
    assert_eq!(allowance["allowance"], json!(20), "{allowance}");
    assert!(allowance["lastUpdated"].as_str().is_some_and(|t| t.ends_with('Z')), "{allowance}");
    drop((dispatcher, observer));
    bridge.db.drop_db().await;
    Ok(())
}
