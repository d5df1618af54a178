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
    api: Api,
    keys: Keys,
    env: Vec<(String, String)>,
}

impl Evm {
    async fn start() -> anyhow::Result<Evm> {
        let db = TestDb::new().await?;
        let anvil = Anvil::start().await?;
        let registry = evm_registry(&db.name)?;
        let env: Vec<(String, String)> = [
            ("MG_EXECUTOR_REGISTRY", registry.to_string_lossy().to_string()),
            ("MG_EVM_CHAINS", anvil.chains()),
            ("MG_ANVIL0_PRIVATE_KEY", ANVIL_KEY_0.to_string()),
            ("MG_ANVIL1_PRIVATE_KEY", ANVIL_KEY_1.to_string()),
            ("MG_EXECUTOR_TIMEOUT_MS", "5000".to_string()),
            ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2".to_string()),
            ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let api = Api::start(&db.url, &pairs).await?;
        let keys = Keys::create(&api).await?;
        Ok(Evm { db, anvil, api, keys, env })
    }

    async fn worker(&self, binary: &str) -> anyhow::Result<Proc> {
        let pairs: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
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

    async fn reservation(&self, movement: &str) -> anyhow::Result<(i64, String)> {
        Ok(sqlx::query_as(
            "SELECT r.nonce, r.status FROM evm_nonce_reservation r JOIN movement_request_nodes n ON n.id = r.request_node_id
              WHERE n.request_id = $1::uuid ORDER BY r.id DESC LIMIT 1",
        )
        .bind(movement)
        .fetch_one(&self.db.pool)
        .await?)
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
    assert_eq!((gap, status.as_str()), (used_nonce + 1, "reserved"), "prepare reserved it; nothing signed it");
    let mut env = evm.env.clone();
    env.push(("MG_EVM_NONCE_REAPER_AGE_SECONDS".into(), "1".into()));
    env.push(("MG_EVM_NONCE_REAPER_INTERVAL_SECONDS".into(), "0.3".into()));
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let reaper = Proc::spawn("qtg-reaper", &evm.db.url, &pairs).await?;
    wait_until("the reaper reclaims the abandoned nonce", Duration::from_secs(20), || async {
        Ok(evm.reservation(&abandoned).await?.1 == "released")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", reaper.log()))?;
    assert_eq!(evm.reservation(&used).await?.1, "consumed", "a used nonce is never reclaimed");
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'evm.nonce.reclaim' AND movement_id = $1::uuid AND (data->>'nonce')::bigint = $2",
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
