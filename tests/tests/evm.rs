//! The EVM lane against a real node (anvil): native and ERC-20 transfers through separately
//! started workers with the balances checked on chain, nonces under three dispatcher
//! replicas, the signer's policy, and the test token's bytecode against its source.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

const WEI: u128 = 1_000_000_000_000_000_000;

struct Evm {
    db: TestDb,
    anvil: Anvil,
    /// The recording proxy every qtg process reaches the chain through, when asked for.
    proxy: Option<RpcProxy>,
    api: Api,
    keys: Keys,
    env: Vec<(String, String)>,
}

/// How a test's chain is reached and configured.
struct ChainSetup {
    proxied: bool,
    confirmations: u64,
    replace_after_seconds: f64,
}

const PLAIN: ChainSetup = ChainSetup { proxied: false, confirmations: 1, replace_after_seconds: 120.0 };

impl Evm {
    async fn start() -> anyhow::Result<Evm> {
        Self::start_with(PLAIN, &[]).await
    }

    /// With the chain set up as `chain` and more settings.
    async fn start_with(chain: ChainSetup, extra: &[(&str, &str)]) -> anyhow::Result<Evm> {
        let db = TestDb::new().await?;
        let anvil = Anvil::start().await?;
        let proxy = if chain.proxied { Some(RpcProxy::start(&anvil.url).await?) } else { None };
        let url = proxy.as_ref().map(|p| p.url.clone()).unwrap_or_else(|| anvil.url.clone());
        let registry = evm_registry(&db.name)?;
        let mut env: Vec<(String, String)> = [
            ("MG_EXECUTOR_REGISTRY", registry.to_string_lossy().to_string()),
            ("MG_EVM_CHAINS", evm_chains(&url, chain.confirmations, chain.replace_after_seconds)),
            ("MG_ANVIL0_PRIVATE_KEY", ANVIL_KEY_0.to_string()),
            ("MG_ANVIL1_PRIVATE_KEY", ANVIL_KEY_1.to_string()),
            ("MG_EXECUTOR_TIMEOUT_MS", "5000".to_string()),
            ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2".to_string()),
            ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        let pairs = env_pairs(&env);
        let api = Api::start(&db.url, &pairs).await?;
        let keys = Keys::create(&api).await?;
        Ok(Evm { db, anvil, proxy, api, keys, env })
    }

    async fn worker(&self, binary: &str) -> anyhow::Result<Proc> {
        let pairs = env_pairs(&self.env);
        Proc::spawn(binary, &self.db.url, &pairs).await
    }

    async fn template(&self, key: &str, config: Value) -> anyhow::Result<()> {
        self.template_signed_by(key, "signer.evm.local", config).await
    }

    async fn template_signed_by(&self, key: &str, signer: &str, config: Value) -> anyhow::Result<()> {
        let t = json!({"template_key": key, "nodes": [{
            "node_key": "send", "node_kind": "action", "action_type": "evm_transfer",
            "executor_key": "exec.evm.transfer", "signer_key": signer, "signing_required": true,
            "config": config}]});
        install_template(&self.api, &self.keys, t).await
    }

    async fn done(&self, id: &str, state: &str) -> anyhow::Result<Value> {
        let m = wait_state(
            &self.api,
            &self.keys.requester,
            id,
            &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
            Duration::from_secs(60),
        )
        .await?;
        anyhow::ensure!(m["request_state"] == state, "expected {state}: {m:#}");
        Ok(m)
    }

    async fn send_node(&self, movement: &str) -> anyhow::Result<uuid::Uuid> {
        Ok(sqlx::query_scalar("SELECT id FROM movement_request_nodes WHERE request_id = $1::uuid")
            .bind(movement)
            .fetch_one(&self.db.pool)
            .await?)
    }

    async fn refs(&self, node: uuid::Uuid) -> anyhow::Result<Value> {
        Ok(sqlx::query_scalar("SELECT provider_refs FROM movement_request_nodes WHERE id = $1")
            .bind(node)
            .fetch_one(&self.db.pool)
            .await?)
    }

    async fn eth(&self, who: &str) -> anyhow::Result<u128> {
        self.anvil.quantity("eth_getBalance", json!([who, "latest"])).await
    }

    async fn reservation(&self, movement: &str) -> anyhow::Result<(i64, String)> {
        Ok(sqlx::query_as(
            "SELECT r.nonce, r.status FROM evm_nonce_reservation r JOIN movement_request_nodes n ON n.id = \
             r.request_node_id
              WHERE n.request_id = $1::uuid ORDER BY r.id DESC LIMIT 1",
        )
        .bind(movement)
        .fetch_one(&self.db.pool)
        .await?)
    }

    /// Puts the movement's given-back `nonce` back as `reserved`: as a crash (or a signer
    /// still deciding) leaves it.
    async fn reserve_again(&self, nonce: i64, movement: &str) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE evm_nonce_reservation SET status = 'reserved' WHERE nonce = $1 AND request_node_id =
                 (SELECT id FROM movement_request_nodes WHERE request_id = $2::uuid)",
        )
        .bind(nonce)
        .bind(movement)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    async fn movement(&self, template: &str, asset: &str, amount: &str, idem: &str) -> anyhow::Result<String> {
        let body = json!({"template_key": template, "idempotency_key": idem,
            "intent": {"asset": asset, "amount": amount, "source": ANVIL_ADDR_0, "destination": ANVIL_ADDR_2}});
        let m = self.api.ok("POST", "/v3/movements", &self.keys.requester, Some(body), 201).await?;
        let id = m["id"].as_str().unwrap_or_default().to_string();
        self.api.ok("POST", &format!("/v3/movements/{id}/approve"), &self.keys.approver, None, 200).await?;
        Ok(id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eth_and_an_erc20_move_through_separate_workers() -> anyhow::Result<()> {
    let evm = Evm::start().await?;
    let token = evm.anvil.deploy_token(1_000_000 * WEI).await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    evm.template("evm.qtt", json!({"chain_id": 31337, "token_contract": token, "decimals": 18})).await?;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let eth_before = evm.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await?;
    let eth = evm.movement("evm.eth", "ETH", "1.5", "evm-eth-1").await?;
    let qtt = evm.movement("evm.qtt", "QTT", "250", "evm-qtt-1").await?;
    for id in [&eth, &qtt] {
        let m = wait_state(
            &evm.api,
            &evm.keys.requester,
            id,
            &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
            Duration::from_secs(60),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}\n{}", dispatcher.log(), observer.log()))?;
        assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", dispatcher.log());
    }
    // On chain: the recipient holds what moved.
    let eth_after = evm.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await?;
    assert_eq!(eth_after - eth_before, 3 * WEI / 2);
    assert_eq!(evm.anvil.token_balance(&token, ANVIL_ADDR_2).await?, 250 * WEI);
    // Each node's nonce was reserved for it and consumed by its own transaction.
    let rows: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT nonce, status, consumed_by FROM evm_nonce_reservation ORDER BY nonce")
            .fetch_all(&evm.db.pool)
            .await?;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter().all(|(_, s, by)| s == "consumed" && by.as_deref().is_some_and(|b| b.starts_with("0x"))),
        "{rows:?}"
    );
    drop((dispatcher, observer));
    evm.db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_dispatchers_sending_from_one_address_use_every_nonce_once() -> anyhow::Result<()> {
    let evm = Evm::start().await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    let start_nonce = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    let dispatchers =
        (evm.worker("qtg-dispatcher").await?, evm.worker("qtg-dispatcher").await?, evm.worker("qtg-dispatcher").await?);
    let observer = evm.worker("qtg-observer").await?;
    let before = evm.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await?;
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(evm.movement("evm.eth", "ETH", "0.01", &format!("evm-many-{i}")).await?);
    }
    for id in &ids {
        let m = wait_state(
            &evm.api,
            &evm.keys.requester,
            id,
            &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
            Duration::from_secs(120),
        )
        .await?;
        assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    }
    let after = evm.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await?;
    assert_eq!(after - before, 30 * WEI / 100, "thirty transfers, each once");
    let end_nonce = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    assert_eq!(end_nonce - start_nonce, 30, "thirty transactions mined from the address");
    let nonces: Vec<i64> =
        sqlx::query_scalar("SELECT nonce FROM evm_nonce_reservation WHERE status = 'consumed' ORDER BY nonce")
            .fetch_all(&evm.db.pool)
            .await?;
    let expected: Vec<i64> = (start_nonce as i64..start_nonce as i64 + 30).collect();
    assert_eq!(nonces, expected, "every nonce used exactly once");
    drop((dispatchers, observer));
    evm.db.drop_db().await;
    Ok(())
}

/// The committed bytecode is what the pinned solc makes of the committed source.
#[test]
fn the_test_token_bytecode_is_its_source_compiled() -> anyhow::Result<()> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let solcjs = root.join(".qtg/evm/node_modules/.bin/solcjs");
    anyhow::ensure!(solcjs.exists(), "solcjs is not installed: run scripts/ensure-evm-tools.sh (make test does)");
    let out = std::env::temp_dir().join(format!("qtg-solc-{}", uuid::Uuid::new_v4().simple()));
    let status = std::process::Command::new(&solcjs)
        .args(["--bin", "--optimize", "-o"])
        .arg(&out)
        .arg("QtgTestToken.sol")
        .current_dir(root.join("contracts"))
        .status()?;
    anyhow::ensure!(status.success(), "solcjs failed");
    let fresh = std::fs::read_to_string(out.join("QtgTestToken_sol_QtgTestToken.bin"))?;
    let committed = std::fs::read_to_string(root.join("contracts/QtgTestToken.bin"))?;
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(
        fresh.trim(),
        committed.trim(),
        "contracts/QtgTestToken.bin is stale: recompile it (see the source's header)"
    );
    Ok(())
}

/// A signer that is not the from-address refuses; its node's nonce stays reserved, unsigned and
/// unsent, until the reaper gives it back (with an audit row); a nonce that was used is left
/// alone, and the next transfer fills the gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_reclaims_an_abandoned_nonce_and_leaves_a_used_one_alone() -> anyhow::Result<()> {
    let evm = Evm::start().await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    evm.template_signed_by("evm.wrong", "signer.evm.other", json!({"chain_id": 31337})).await?;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let used = evm.movement("evm.eth", "ETH", "0.1", "reap-used").await?;
    evm.done(&used, "COMPLETED").await?;
    let abandoned = evm.movement("evm.wrong", "ETH", "0.1", "reap-abandoned").await?;
    let m = evm.done(&abandoned, "FAILED").await?;
    assert_eq!(node(&m, "send")["error_code"], "SIGNER_REFUSED", "{m:#}");
    let (used_nonce, status) = evm.reservation(&used).await?;
    assert_eq!(status, "consumed");
    let (gap, status) = evm.reservation(&abandoned).await?;
    assert_eq!((gap, status.as_str()), (used_nonce + 1, "released"), "the refusal gave it back at once");
    // The reaper is the backstop for a dispatcher that died between the reservation and the
    // failure: put the reservation back as such a crash leaves it.
    evm.reserve_again(gap, &abandoned).await?;
    let mut env = evm.env.clone();
    env.push(("MG_EVM_NONCE_REAPER_AGE_SECONDS".into(), "1".into()));
    env.push(("MG_EVM_NONCE_REAPER_INTERVAL_SECONDS".into(), "0.3".into()));
    let pairs = env_pairs(&env);
    let reaper = Proc::spawn("qtg-reaper", &evm.db.url, &pairs).await?;
    wait_until("the reaper reclaims the abandoned nonce", Duration::from_secs(20), || async {
        Ok(evm.reservation(&abandoned).await?.1 == "released")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", reaper.log()))?;
    assert_eq!(evm.reservation(&used).await?.1, "consumed", "a used nonce is never reclaimed");
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'evm.nonce.reclaim' AND movement_id = $1::uuid AND \
         (data->>'nonce')::bigint = $2",
    )
    .bind(&abandoned)
    .bind(gap)
    .fetch_one(&evm.db.pool)
    .await?;
    assert_eq!(audits, 1);
    // The next transfer takes the freed nonce: no gap strands the address.
    let next = evm.movement("evm.eth", "ETH", "0.1", "reap-next").await?;
    evm.done(&next, "COMPLETED").await?;
    assert_eq!(evm.reservation(&next).await?, (gap, "consumed".to_string()));
    drop((dispatcher, observer, reaper));
    evm.db.drop_db().await;
    Ok(())
}

/// A node that reserved a nonce and failed before anything was broadcast — its prepare
/// refused (the fee cap), its signer refused — gives the nonce back in the same step, audited:
/// the next movement from the address takes it and completes at once, with no gap for the
/// reaper to wait out. A template that binds the EVM executor without a signer is refused at
/// proposal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_before_broadcast_gives_the_nonce_back_at_once() -> anyhow::Result<()> {
    let evm = Evm::start().await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    evm.template_signed_by("evm.wrong", "signer.evm.other", json!({"chain_id": 31337})).await?;
    let capped = json!({"template_key": "evm.capped", "risk_controls": {"max_fee_wei": "1"}, "nodes": [{
        "node_key": "send", "node_kind": "action", "action_type": "evm_transfer",
        "executor_key": "exec.evm.transfer", "signer_key": "signer.evm.local", "signing_required": true,
        "config": {"chain_id": 31337}}]});
    install_template(&evm.api, &evm.keys, capped).await?;
    let unsigned = json!({"template_key": "evm.unsigned", "nodes": [{
        "node_key": "send", "node_kind": "action", "action_type": "evm_transfer",
        "executor_key": "exec.evm.transfer", "config": {"chain_id": 31337}}]});
    let (s, b) = evm.api.call("POST", "/v3/template-proposals", &evm.keys.operator, Some(unsigned)).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap_or_default().contains("signer_key"), "{b}");

    let start = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "pending"])).await? as i64;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let capped = evm.movement("evm.capped", "ETH", "0.1", "gap-capped").await?;
    let m = evm.done(&capped, "FAILED").await?;
    assert_eq!(node(&m, "send")["error_code"], "EVM_FEE_CAP", "{m:#}");
    assert_eq!(evm.reservation(&capped).await?, (start, "released".to_string()), "given back by the refusal");
    let refused = evm.movement("evm.wrong", "ETH", "0.1", "gap-refused").await?;
    let m = evm.done(&refused, "FAILED").await?;
    assert_eq!(node(&m, "send")["error_code"], "SIGNER_REFUSED", "{m:#}");
    assert_eq!(evm.reservation(&refused).await?, (start, "released".to_string()), "the same nonce, given back again");
    let releases: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'evm.nonce.release' AND (data->>'nonce')::bigint = $1
            AND movement_id IN ($2::uuid, $3::uuid)",
    )
    .bind(start)
    .bind(&capped)
    .bind(&refused)
    .fetch_one(&evm.db.pool)
    .await?;
    assert_eq!(releases, 2, "each give-back audited");
    // No reaper runs: the next transfer takes the nonce and completes.
    let next = evm.movement("evm.eth", "ETH", "0.1", "gap-next").await?;
    evm.done(&next, "COMPLETED").await?;
    assert_eq!(evm.reservation(&next).await?, (start, "consumed".to_string()));
    drop((dispatcher, observer));
    evm.db.drop_db().await;
    Ok(())
}

/// A nonce given back *below* one already sent — a movement's nonce released after the next
/// movement reserved the one above it (a refused signature, or the reaper) — would hold the
/// later transaction out of every block once nothing else takes the gap. The observer fills
/// it with a zero-value self-send, recorded and audited before it is sent, and the later
/// movement completes without a third one; nothing of the released movement is paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nonce_given_back_below_a_sent_one_is_filled() -> anyhow::Result<()> {
    let evm = Evm::start().await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    evm.template_signed_by("evm.wrong", "signer.evm.other", json!({"chain_id": 31337})).await?;
    let start = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await? as i64;
    let before = evm.eth(ANVIL_ADDR_2).await?;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let refused = evm.movement("evm.wrong", "ETH", "0.3", "fill-refused").await?;
    evm.done(&refused, "FAILED").await?;
    assert_eq!(evm.reservation(&refused).await?, (start, "released".to_string()));
    // As it stood while the refused movement's signer was still deciding: the nonce reserved.
    evm.reserve_again(start, &refused).await?;
    let waiting = evm.movement("evm.eth", "ETH", "0.1", "fill-waiting").await?;
    let node = evm.send_node(&waiting).await?;
    wait_until("the later transfer is sent", Duration::from_secs(30), || async {
        Ok(evm.refs(node).await?["tx_hash"].is_string())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", dispatcher.log()))?;
    assert_eq!(evm.reservation(&waiting).await?.0, start + 1, "the nonce above the held one");
    let m = evm.api.ok("GET", &format!("/v3/movements/{waiting}"), &evm.keys.requester, None, 200).await?;
    assert_eq!(m["request_state"], "EXECUTING", "it cannot be mined before nonce {start} is used: {m:#}");
    // Now the held nonce is given back (the reaper, as after a crash; a refusal gives back alike).
    let mut env = evm.env.clone();
    env.push(("MG_EVM_NONCE_REAPER_AGE_SECONDS".into(), "1".into()));
    env.push(("MG_EVM_NONCE_REAPER_INTERVAL_SECONDS".into(), "0.3".into()));
    let reaper = Proc::spawn("qtg-reaper", &evm.db.url, &env_pairs(&env)).await?;
    evm.done(&waiting, "COMPLETED").await.map_err(|e| anyhow::anyhow!("{e}\n{}", observer.log()))?;
    // The chain: two transactions from the address (the fill and the transfer), one payment.
    let end = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await? as i64;
    assert_eq!(end - start, 2);
    assert_eq!(evm.eth(ANVIL_ADDR_2).await? - before, WEI / 10, "the refused movement paid nothing");
    let (status, owner, fills, by): (String, Option<uuid::Uuid>, Value, Option<String>) = sqlx::query_as(
        "SELECT status, request_node_id, cancel_hashes, consumed_by FROM evm_nonce_reservation WHERE nonce = $1",
    )
    .bind(start)
    .fetch_one(&evm.db.pool)
    .await?;
    assert_eq!((status.as_str(), owner), ("consumed", None), "a fill belongs to no node");
    let fill = fills.as_array().and_then(|f| f.first()).and_then(Value::as_str).unwrap_or_default().to_string();
    assert_eq!(by.as_deref(), Some(fill.as_str()), "consumed by the fill");
    let tx = evm.anvil.rpc("eth_getTransactionByHash", json!([fill])).await?;
    assert_eq!(
        (tx["to"].as_str(), tx["value"].as_str()),
        (Some(ANVIL_ADDR_0.to_ascii_lowercase().as_str()), Some("0x0"))
    );
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'evm.nonce.fill' AND movement_id = $1::uuid
            AND (data->>'nonce')::bigint = $2 AND data->>'tx_hash' = $3",
    )
    .bind(&waiting)
    .bind(start)
    .bind(&fill)
    .fetch_one(&evm.db.pool)
    .await?;
    assert_eq!(audits, 1, "the fill is audited on the movement it unblocked");
    assert_eq!(evm.reservation(&waiting).await?, (start + 1, "consumed".to_string()));
    drop((dispatcher, observer, reaper));
    evm.db.drop_db().await;
    Ok(())
}

/// Call deadline 3 s (submit window 3.4 s with the harness' 0.2 s skew), grace 5 s, recovery
/// every 0.3 s.
const FAST_RECOVERY: [(&str, &str); 3] = [
    ("MG_EXECUTOR_TIMEOUT_MS", "3000"),
    ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "5"),
    ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.3"),
];

/// The dispatcher is killed after its transaction reached the chain and before it heard the
/// answer: recovery finds the transaction by the hash recorded before the broadcast, and the
/// chain saw one `eth_sendRawTransaction`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_killed_after_broadcast_is_reconciled_by_hash() -> anyhow::Result<()> {
    let evm = Evm::start_with(ChainSetup { proxied: true, ..PLAIN }, &FAST_RECOVERY).await?;
    let rpc = evm.proxy.as_ref().expect("proxied");
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    rpc.swallow_answers(1);
    let mut killed = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let recovery = evm.worker("qtg-recovery").await?;
    let before = evm.eth(ANVIL_ADDR_2).await?;
    let start = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    let id = evm.movement("evm.eth", "ETH", "0.5", "evm-killed").await?;
    wait_until("the transfer reaches the chain", Duration::from_secs(30), || async {
        Ok(evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await? > start)
    })
    .await?;
    killed.signal("KILL");
    killed.wait_exit(Duration::from_secs(10)).await?;
    let node = evm.send_node(&id).await?;
    let state: String = sqlx::query_scalar("SELECT node_state FROM movement_request_nodes WHERE id = $1")
        .bind(node)
        .fetch_one(&evm.db.pool)
        .await?;
    assert_eq!(state, "SUBMITTING", "qtg never heard the answer");
    let m = evm.done(&id, "COMPLETED").await.map_err(|e| anyhow::anyhow!("{e}\n{}", recovery.log()))?;
    assert_eq!(node_key_refs(&m)["tx_hash"], evm.refs(node).await?["tx_hash"]);
    assert_eq!(rpc.count("eth_sendRawTransaction"), 1, "one broadcast, never a second");
    assert_eq!(evm.eth(ANVIL_ADDR_2).await? - before, WEI / 2);
    drop((observer, recovery));
    evm.db.drop_db().await;
    Ok(())
}

fn node_key_refs(m: &Value) -> &Value {
    &node(m, "send")["provider_refs"]
}

/// A dispatcher frozen after the arm, its broadcast not yet on the chain: recovery forces the
/// nonce with a zero-value send and fails the attempt once that is final; the operator's
/// retry moves the money with a new nonce; the thawed dispatcher's transaction is rejected by
/// the chain (nonce consumed). One transfer on chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_frozen_before_its_broadcast_loses_its_nonce_to_recovery() -> anyhow::Result<()> {
    let evm = Evm::start_with(ChainSetup { proxied: true, ..PLAIN }, &FAST_RECOVERY).await?;
    let rpc = evm.proxy.as_ref().expect("proxied");
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    rpc.hold_broadcasts(1);
    let frozen = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let recovery = evm.worker("qtg-recovery").await?;
    let before = evm.eth(ANVIL_ADDR_2).await?;
    let start = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    let id = evm.movement("evm.eth", "ETH", "0.5", "evm-frozen").await?;
    wait_until("the broadcast reaches the proxy", Duration::from_secs(30), || async {
        Ok(rpc.count("eth_sendRawTransaction") >= 1)
    })
    .await?;
    frozen.signal("STOP");
    let node = evm.send_node(&id).await?;
    let first = evm.refs(node).await?;
    let m = evm.done(&id, "FAILED").await.map_err(|e| anyhow::anyhow!("{e}\n{}", recovery.log()))?;
    assert_eq!(qtg_tests::node(&m, "send")["error_code"], "EVM_NONCE_CONSUMED", "{m:#}");
    let forced: (i64, Value) = sqlx::query_as(
        "SELECT nonce, cancel_hashes FROM evm_nonce_reservation WHERE request_node_id = $1 AND status = 'consumed'",
    )
    .bind(node)
    .fetch_one(&evm.db.pool)
    .await?;
    assert_eq!(forced.0 as u128, start, "the node's nonce was forced");
    assert_eq!(forced.1.as_array().map(Vec::len), Some(1), "{forced:?}");
    evm.api
        .ok(
            "POST",
            &format!("/v3/movements/{id}/nodes/send/actions/retry"),
            &evm.keys.operator,
            Some(json!({"reason": "nonce forced by recovery"})),
            200,
        )
        .await?;
    let second = evm.worker("qtg-dispatcher").await?;
    evm.done(&id, "COMPLETED").await?;
    // The frozen process wakes; its held transaction reaches the chain and is refused.
    frozen.signal("CONT");
    rpc.release();
    assert!(first["tx_hash"].is_null(), "the frozen attempt recorded no answer: {first}");
    wait_until("the late broadcast reaches the chain", Duration::from_secs(20), || async {
        Ok(rpc.forwarded("eth_sendRawTransaction") >= 3)
    })
    .await?;
    let held: Vec<String> = serde_json::from_value(
        sqlx::query_scalar::<_, Value>(
            "SELECT tx_hashes FROM evm_nonce_reservation WHERE request_node_id = $1 AND status = 'consumed'",
        )
        .bind(node)
        .fetch_one(&evm.db.pool)
        .await?,
    )?;
    assert_eq!(held.len(), 1, "attempt 1's transfer, recorded before its broadcast");
    assert!(evm.anvil.rpc("eth_getTransactionReceipt", json!([held[0]])).await?.is_null(), "refused: nonce consumed");
    assert_eq!(evm.eth(ANVIL_ADDR_2).await? - before, WEI / 2, "one transfer on chain");
    let end = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    assert_eq!(end - start, 2, "the forcing send and the retry's transfer, nothing else");
    assert_eq!(request_state(&evm.db.pool, id.parse()?).await?, "COMPLETED", "the late answer changed nothing");
    drop((frozen, second, observer, recovery));
    evm.db.drop_db().await;
    Ok(())
}

/// A transaction dropped from the pool is replaced after the chain's replace_after_seconds
/// with the same nonce and a fee at least 10 % higher; every hash stays in provider_refs and
/// one transfer lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_transaction_is_replaced_with_a_bumped_fee() -> anyhow::Result<()> {
    let evm = Evm::start_with(ChainSetup { replace_after_seconds: 1.0, ..PLAIN }, &[]).await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let before = evm.eth(ANVIL_ADDR_2).await?;
    evm.anvil.rpc("evm_setAutomine", json!([false])).await?;
    let id = evm.movement("evm.eth", "ETH", "0.25", "evm-dropped").await?;
    let node = evm.send_node(&id).await?;
    wait_until("the first broadcast", Duration::from_secs(30), || async {
        Ok(evm.refs(node).await?["tx_hash"].is_string())
    })
    .await?;
    let first = evm.refs(node).await?["tx_hash"].clone();
    let first_fee = evm.refs(node).await?["max_fee_per_gas"].as_str().unwrap_or("0").parse::<u128>()?;
    evm.anvil.rpc("anvil_dropTransaction", json!([first])).await?;
    wait_until("a replacement", Duration::from_secs(30), || async {
        Ok(evm.refs(node).await?["tx_hashes"].as_array().is_some_and(|h| h.len() == 2))
    })
    .await?;
    evm.anvil.rpc("evm_mine", json!([])).await?;
    evm.done(&id, "COMPLETED").await?;
    let refs = evm.refs(node).await?;
    let hashes = refs["tx_hashes"].as_array().cloned().unwrap_or_default();
    assert_eq!(hashes[0], first, "{refs}");
    assert_eq!(refs["tx_hash"], hashes[1], "the replacement is what was mined");
    let mined = evm.anvil.rpc("eth_getTransactionByHash", json!([hashes[1]])).await?;
    let fee = u128::from_str_radix(mined["maxFeePerGas"].as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)?;
    assert!(fee * 10 >= first_fee * 11, "bumped by at least 10 %: {first_fee} -> {fee}");
    assert_eq!(evm.eth(ANVIL_ADDR_2).await? - before, WEI / 4, "one transfer");
    drop((dispatcher, observer));
    evm.db.drop_db().await;
    Ok(())
}

/// A reorg takes the transfer's block away before it is final: the node goes back to
/// observing (its block forgotten), the transfer lands again, and completes once final.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reorg_returns_the_node_to_observing() -> anyhow::Result<()> {
    let evm = Evm::start_with(ChainSetup { confirmations: 3, replace_after_seconds: 1.0, ..PLAIN }, &[]).await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let observer = evm.worker("qtg-observer").await?;
    let before = evm.eth(ANVIL_ADDR_2).await?;
    let snapshot = evm.anvil.rpc("evm_snapshot", json!([])).await?;
    let id = evm.movement("evm.eth", "ETH", "0.3", "evm-reorg").await?;
    let node = evm.send_node(&id).await?;
    wait_until("the transfer is mined (not final)", Duration::from_secs(30), || async {
        Ok(evm.refs(node).await?["block_number"].is_string())
    })
    .await?;
    evm.anvil.rpc("evm_revert", json!([snapshot])).await?;
    wait_until("the node forgets the block", Duration::from_secs(30), || async {
        Ok(evm.refs(node).await?["block_number"].is_null())
    })
    .await?;
    let state: String = sqlx::query_scalar("SELECT node_state FROM movement_request_nodes WHERE id = $1")
        .bind(node)
        .fetch_one(&evm.db.pool)
        .await?;
    assert_eq!(state, "OBSERVING");
    // Blocks keep coming until it is final.
    let m = loop {
        evm.anvil.rpc("evm_mine", json!([])).await?;
        let m = evm.api.ok("GET", &format!("/v3/movements/{id}"), &evm.keys.requester, None, 200).await?;
        if m["request_state"] != "EXECUTING" {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    assert_eq!(evm.eth(ANVIL_ADDR_2).await? - before, WEI * 3 / 10, "one transfer after the reorg");
    drop((dispatcher, observer));
    evm.db.drop_db().await;
    Ok(())
}

/// The address that signed must be the signer's enrolled identity: a signature by any other
/// address fails the node before anything is broadcast.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signature_by_another_address_than_the_enrolled_one_is_not_sent() -> anyhow::Result<()> {
    let evm = Evm::start_with(PLAIN, &[("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", "0.5")]).await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    // The health worker lists the signer (with its observed address); an admin enrols another.
    let health = evm.worker("qtg-health").await?;
    wait_until("the signer is on the roster", Duration::from_secs(20), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM signers WHERE signer_key = 'signer.evm.local'")
            .fetch_one(&evm.db.pool)
            .await?;
        Ok(n == 1)
    })
    .await?;
    evm.api
        .ok(
            "PUT",
            "/v3/signers/signer.evm.local/expected-identity",
            &evm.api.admin_key,
            Some(json!({"address": ANVIL_ADDR_2})),
            200,
        )
        .await?;
    let dispatcher = evm.worker("qtg-dispatcher").await?;
    let start = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    let id = evm.movement("evm.eth", "ETH", "0.1", "evm-identity").await?;
    let m = evm.done(&id, "FAILED").await?;
    assert_eq!(node(&m, "send")["error_code"], "SIGNER_IDENTITY_MISMATCH", "{m:#}");
    let end = evm.anvil.quantity("eth_getTransactionCount", json!([ANVIL_ADDR_0, "latest"])).await?;
    assert_eq!(end, start, "nothing was broadcast");
    drop((health, dispatcher));
    evm.db.drop_db().await;
    Ok(())
}

/// Addresses are read strictly when the movement is created, never found out after approval:
/// a mixed-case address must carry its EIP-55 checksum (all-lower and all-upper carry none and
/// are taken), the zero address and the precompile range are refused unless the template
/// allow-lists them, a destination object is refused with what the lane expects, and a source
/// that is not the address the template sends from is refused. Nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn addresses_are_read_strictly_at_creation() -> anyhow::Result<()> {
    let evm = Evm::start().await?;
    evm.template("evm.eth", json!({"chain_id": 31337})).await?;
    let burn = json!({
        "template_key": "evm.burn",
        "risk_controls": {"allowed_destinations": ["0x000000000000000000000000000000000000dEaD"]},
        "nodes": [{
            "node_key": "send", "node_kind": "action", "action_type": "evm_transfer",
            "executor_key": "exec.evm.transfer", "signer_key": "signer.evm.local", "signing_required": true,
            "config": {"chain_id": 31337}
        }]
    });
    install_template(&evm.api, &evm.keys, burn).await?;
    let create = |template: &str, destination: Value, source: &str, idem: &str| {
        json!({"template_key": template, "idempotency_key": idem,
               "intent": {"asset": "ETH", "amount": "0.01", "source": source, "destination": destination}})
    };
    let checksummed = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"; // anvil's third account, EIP-55
    let mistyped = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293Bc"; // one letter's case flipped
    let count = || async {
        anyhow::Ok(
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM movement_requests").fetch_one(&evm.db.pool).await?,
        )
    };
    let before = count().await?;
    for (template, destination, source, expect) in [
        ("evm.eth", json!(mistyped), ANVIL_ADDR_0, "EIP-55"),
        ("evm.eth", json!("0x0000000000000000000000000000000000000000"), ANVIL_ADDR_0, "zero address"),
        ("evm.eth", json!("0x0000000000000000000000000000000000000001"), ANVIL_ADDR_0, "precompile"),
        ("evm.eth", json!("0x3c44cdddb6a900fa2b585dd299e03d12fa4293"), ANVIL_ADDR_0, "40 hex digits"),
        ("evm.eth", json!({"address": ANVIL_ADDR_2}), ANVIL_ADDR_0, "not an object"),
        (
            "evm.eth",
            json!(ANVIL_ADDR_2),
            "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
            "not the account this template pays from",
        ),
    ] {
        let (s, b) = evm
            .api
            .call("POST", "/v3/movements", &evm.keys.requester, Some(create(template, destination, source, "bad")))
            .await?;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{expect}: {b}");
        assert!(b["error"]["message"].as_str().unwrap_or_default().contains(expect), "{expect}: {b}");
    }
    assert_eq!(count().await?, before, "nothing recorded");
    // Taken: the checksum right, all lower case, all upper case, and the allow-listed burn
    // address (mixed-case checksummed in the list, lower case here).
    for (i, (template, destination)) in [
        ("evm.eth", checksummed.to_string()),
        ("evm.eth", ANVIL_ADDR_2.to_string()),
        ("evm.eth", format!("0x{}", ANVIL_ADDR_2[2..].to_uppercase())),
        ("evm.burn", "0x000000000000000000000000000000000000dead".to_string()),
    ]
    .into_iter()
    .enumerate()
    {
        let source = ANVIL_ADDR_0.to_uppercase().replacen("0X", "0x", 1);
        evm.api
            .ok(
                "POST",
                "/v3/movements",
                &evm.keys.requester,
                Some(create(template, json!(destination), &source, &format!("ok-{i}"))),
                201,
            )
            .await?;
    }
    evm.db.drop_db().await;
    Ok(())
}
