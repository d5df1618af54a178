//! The `ccip` lane against Chainlink's own CCIP 1.6 contracts — the released bytecode of
//! `@chainlink/contracts-ccip`, deployed on two anvils by `qtg-ccip-sim deploy` — with
//! `qtg-ccip-sim relay` standing in for the off-chain network (commit a merkle root signed by
//! F+1 OCR signers, then execute). Separately started workers move a token from chain A to
//! chain B; every `ccipSend` is counted where it reaches chain A.

use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use alloy::sol;
use alloy::sol_types::SolCall;
use qtg_tests::*;
use serde_json::{json, Value};

sol! {
    function balanceOf(address owner) returns (uint256);
    function approve(address spender, uint256 value) returns (bool);
    struct RateLimiterConfig { bool isEnabled; uint128 capacity; uint128 rate; }
    function setChainRateLimiterConfig(
        uint64 remoteChainSelector, RateLimiterConfig outboundConfig, RateLimiterConfig inboundConfig
    );
    struct RouterOnRamp { uint64 destChainSelector; address onRamp; }
    struct RouterOffRamp { uint64 sourceChainSelector; address offRamp; }
    function applyRampUpdates(
        RouterOnRamp[] onRampUpdates, RouterOffRamp[] offRampRemoves, RouterOffRamp[] offRampAdds
    );
}

/// anvil's tenth account: `qtg-ccip-sim deploy`'s deployer, the lane's owner.
const DEPLOYER: &str = "0xa0ee7a142d267c1f36714e4a8f75612f20a79720";

const E18: u128 = 1_000_000_000_000_000_000;

struct Lane {
    db: TestDb,
    a: Anvil,
    b: Anvil,
    /// Chain A through a recording proxy: every `eth_sendRawTransaction` qtg sends is counted.
    proxy_a: RpcProxy,
    lane: Value,
    api: Api,
    keys: Keys,
    env: Vec<(String, String)>,
}

fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.qtg/evm/ccip/package")
}

impl Lane {
    async fn start() -> anyhow::Result<Lane> {
        Lane::start_with(&[]).await
    }

    /// With more settings.
    async fn start_with(extra: &[(&str, &str)]) -> anyhow::Result<Lane> {
        Lane::start_deployed(extra, &[]).await
    }

    /// With more settings, the lane deployed with more `qtg-ccip-sim deploy` arguments.
    async fn start_deployed(extra: &[(&str, &str)], deploy: &[&str]) -> anyhow::Result<Lane> {
        let (a, b) = (Anvil::start_chain(31337).await?, Anvil::start_chain(31338).await?);
        let db = TestDb::new().await?;
        let out = std::env::temp_dir().join(format!("{}-ccip-lane.json", db.name));
        let deployed = tokio::process::Command::new(bin_dir().join("qtg-ccip-sim"))
            .args(["deploy", "--source", &a.url, "--destination", &b.url, "--out"])
            .arg(&out)
            .arg("--artifacts")
            .arg(artifacts())
            .args(deploy)
            .output()
            .await?;
        anyhow::ensure!(
            deployed.status.success(),
            "qtg-ccip-sim deploy failed: {}",
            String::from_utf8_lossy(&deployed.stderr)
        );
        let lane: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
        let proxy_a = RpcProxy::start(&a.url).await?;
        let registry = std::env::temp_dir().join(format!("{}-registry-ccip.toml", db.name));
        std::fs::write(
            &registry,
            format!(
                "{}\n[executors.\"exec.ccip.send\"]\ntransport = \"local\"\nimpl = \"ccip\"\n\
                 config = {{ from = \"{ANVIL_ADDR_0}\" }}\n\n\
                 [executors.\"exec.ccip.observe\"]\ntransport = \"local\"\nimpl = \"ccip\"\n\
                 config = {{ poll_seconds = 0.5 }}\n\n\
                 [signers.\"signer.evm.local\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
                 config = {{ account = \"anvil0\" }}\n\n\
                 [signers.\"signer.evm.other\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
                 config = {{ account = \"anvil1\" }}\n",
                std::fs::read_to_string(registry_file())?
            ),
        )?;
        let chain = |id: u64, url: &str| {
            json!({"chain_id": id, "rpc_urls": [url], "confirmations": 1,
                   "max_fee_per_gas_wei": "100000000000", "max_priority_fee_per_gas_wei": "2000000000"})
        };
        let mut env: Vec<(String, String)> = [
            ("MG_EXECUTOR_REGISTRY", registry.to_string_lossy().to_string()),
            ("MG_EVM_CHAINS", json!([chain(31337, &proxy_a.url), chain(31338, &b.url)]).to_string()),
            ("MG_CCIP_CHAINS", lane["mg_ccip_chains"].to_string()),
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
        let api = Api::start(&db.url, &env_pairs(&env)).await?;
        let keys = Keys::create(&api).await?;
        Ok(Lane { db, a, b, proxy_a, lane, api, keys, env })
    }

    fn at(&self, side: &str, key: &str) -> String {
        self.lane[side][key].as_str().unwrap_or_default().to_string()
    }

    async fn worker(&self, binary: &str) -> anyhow::Result<Proc> {
        Proc::spawn(binary, &self.db.url, &env_pairs(&self.env)).await
    }

    async fn relay(&self) -> anyhow::Result<Proc> {
        let out = std::env::temp_dir().join(format!("{}-ccip-lane.json", self.db.name));
        let lane = out.to_string_lossy().to_string();
        Proc::spawn_args("qtg-ccip-sim", &["relay", "--lane", &lane, "--poll-ms", "200"], "", &[]).await
    }

    /// A send-and-deliver template: `fee` is the cap, in the native coin.
    async fn template(&self, key: &str, max_fee: &str, gas_limit: u64) -> anyhow::Result<()> {
        self.template_signed_by(key, "signer.evm.local", max_fee, gas_limit).await
    }

    async fn template_signed_by(&self, key: &str, signer: &str, max_fee: &str, gas_limit: u64) -> anyhow::Result<()> {
        self.template_full(key, signer, "native", max_fee, gas_limit).await
    }

    async fn template_full(
        &self,
        key: &str,
        signer: &str,
        fee_token: &str,
        max_fee: &str,
        gas_limit: u64,
    ) -> anyhow::Result<()> {
        let t = json!({"template_key": key, "nodes": [
            {"node_key": "send", "node_kind": "action", "action_type": "ccip_send",
             "executor_key": "exec.ccip.send", "signer_key": signer, "signing_required": true,
             "config": {"chain_id": 31337, "contract": self.at("source", "router"),
                        "destination_chain_selector": self.lane["destination"]["selector"],
                        "token_contract": self.at("source", "token"), "decimals": 18,
                        "fee_token": fee_token, "max_fee": max_fee, "gas_limit": gas_limit}},
            {"node_key": "deliver", "node_kind": "observe", "action_type": "ccip_delivery",
             "executor_key": "exec.ccip.observe", "config": {}}],
            "edges": [{"from": "send", "to": "deliver"}]});
        install_template(&self.api, &self.keys, t).await
    }

    async fn movement(&self, template: &str, amount: &str, to: &str, idem: &str) -> anyhow::Result<String> {
        let body = json!({"template_key": template, "idempotency_key": idem,
            "intent": {"asset": "QCA", "amount": amount, "source": ANVIL_ADDR_0, "destination": to}});
        let m = self.api.ok("POST", "/v3/movements", &self.keys.requester, Some(body), 201).await?;
        let id = m["id"].as_str().unwrap_or_default().to_string();
        self.api.ok("POST", &format!("/v3/movements/{id}/approve"), &self.keys.approver, None, 200).await?;
        Ok(id)
    }

    async fn done(&self, id: &str, logs: &[&Proc]) -> anyhow::Result<Value> {
        wait_settled(&self.api, &self.keys.requester, id, logs).await
    }

    async fn balance(&self, side: &str, who: &str) -> anyhow::Result<U256> {
        self.balance_of(side, "token", who).await
    }

    /// `who`'s balance of the lane's `token` ("token", "link") on `side`.
    async fn balance_of(&self, side: &str, token: &str, who: &str) -> anyhow::Result<U256> {
        let anvil = if side == "source" { &self.a } else { &self.b };
        let data = balanceOfCall { owner: who.parse()? }.abi_encode();
        let v = anvil
            .rpc(
                "eth_call",
                json!([{"to": self.at(side, token), "data": format!("0x{}", alloy::primitives::hex::encode(data))},
                       "latest"]),
            )
            .await?;
        Ok(U256::from_str_radix(v.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)?)
    }

    /// The holder (qtg's sender, anvil's first account) approves A's router itself.
    async fn approve_router(&self) -> anyhow::Result<()> {
        self.approve_router_for("token").await
    }

    /// The holder approves A's router for the lane's `token` ("token", "link").
    async fn approve_router_for(&self, token: &str) -> anyhow::Result<()> {
        let data = approveCall { spender: self.at("source", "router").parse()?, value: U256::MAX }.abi_encode();
        self.send_a(ANVIL_ADDR_0, &self.at("source", token), data).await
    }

    /// A transaction on chain A from an unlocked account, mined.
    async fn send_a(&self, from: &str, to: &str, data: Vec<u8>) -> anyhow::Result<()> {
        let hash = self
            .a
            .rpc(
                "eth_sendTransaction",
                // A fixed gas limit: anvil's estimate for the pool's rate limiter update is short.
                json!([{"from": from, "to": to, "gas": "0x200000",
                        "data": format!("0x{}", alloy::primitives::hex::encode(data))}]),
            )
            .await?;
        wait_until("the transaction is mined", Duration::from_secs(20), || async {
            let receipt = self.a.rpc("eth_getTransactionReceipt", json!([hash])).await?;
            anyhow::ensure!(receipt.is_null() || receipt["status"] == "0x1", "reverted: {receipt}");
            Ok(!receipt.is_null())
        })
        .await
    }

    /// The newest drift check of `scope` (`Null` before the first).
    async fn drift_check(&self, scope: &str) -> anyhow::Result<Value> {
        let v = self.api.ok("GET", "/v3/drift", &self.keys.requester, None, 200).await?;
        let item = v["items"].as_array().and_then(|a| a.iter().find(|c| c["scope"] == scope).cloned());
        Ok(item.unwrap_or(Value::Null))
    }

    /// An admin records what the checks of `scope` saw as its baseline (`qtgctl drift baseline`).
    async fn baseline(&self, scope: &str) -> anyhow::Result<()> {
        let out = tokio::process::Command::new(bin_dir().join("qtgctl"))
            .args(["drift", "baseline", "--scope", scope, "--reason", "lane reviewed"])
            .env_clear()
            .env("QTG_API_URL", &self.api.base)
            .env("QTG_API_KEY", &self.api.admin_key)
            .output()
            .await?;
        anyhow::ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    }

    /// The movement's CCIP send intents: `(status, message id)`.
    async fn intents(&self, movement: &str) -> anyhow::Result<Vec<(String, Option<String>)>> {
        Ok(sqlx::query_as("SELECT status, message_id FROM ccip_send_intent WHERE request_id = $1::uuid ORDER BY id")
            .bind(movement)
            .fetch_all(&self.db.pool)
            .await?)
    }

    /// `CCIPMessageSent` logs of A's OnRamp: one per message that left.
    async fn messages_sent(&self) -> anyhow::Result<usize> {
        let logs = self
            .a
            .rpc(
                "eth_getLogs",
                json!([{"address": self.at("source", "on_ramp"), "fromBlock": "0x0", "toBlock": "latest",
                        "topics": [qtg_ccip_topic()]}]),
            )
            .await?;
        Ok(logs.as_array().map(Vec::len).unwrap_or(0))
    }
}

fn qtg_ccip_topic() -> String {
    alloy::primitives::keccak256(
        "CCIPMessageSent(uint64,uint64,((bytes32,uint64,uint64,uint64,uint64),address,bytes,bytes,bytes,address,\
         uint256,uint256,(address,bytes,bytes,uint256,bytes)[]))",
    )
    .to_string()
}

/// A token transfer by CCIP: one `ccipSend` reaches chain A, the OffRamp executes the message on
/// B, the delivery node completes with the message id and the execution's transaction; A's
/// token left the sender (burned by the pool), B's arrived at the receiver.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_transfer_by_ccip_completes_with_one_send() -> anyhow::Result<()> {
    let lane = Lane::start().await?;
    lane.approve_router().await?;
    lane.template("ccip.qca", "0.01", 0).await?;
    let (dispatcher, observer, relay) =
        (lane.worker("qtg-dispatcher").await?, lane.worker("qtg-observer").await?, lane.relay().await?);
    let holder_before = lane.balance("source", ANVIL_ADDR_0).await?;
    let id = lane.movement("ccip.qca", "250", ANVIL_ADDR_2, "ccip-1").await?;
    let m = lane.done(&id, &[&dispatcher, &observer, &relay]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}\n{}", dispatcher.log(), relay.log());
    let send = node(&m, "send");
    let deliver = node(&m, "deliver");
    let message_id = send["provider_refs"]["message_id"].as_str().unwrap_or_default();
    assert_eq!(message_id.len(), 66, "{send:#}");
    assert_eq!(deliver["provider_refs"]["message_id"], message_id, "{deliver:#}");
    assert_eq!(deliver["provider_refs"]["execution_state"], "SUCCESS");
    assert!(deliver["provider_refs"]["execution_tx_hash"].is_string(), "{deliver:#}");
    assert_eq!(holder_before - lane.balance("source", ANVIL_ADDR_0).await?, U256::from(250 * E18));
    assert_eq!(lane.balance("destination", ANVIL_ADDR_2).await?, U256::from(250 * E18));
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 1, "one ccipSend broadcast");
    assert_eq!(lane.messages_sent().await?, 1, "one message left chain A");
    drop((dispatcher, observer, relay));
    lane.db.drop_db().await;
    Ok(())
}

/// The router's fee above the template's cap: refused at preflight — nothing signed, nothing
/// sent; qtg never sends `approve`: without the holder's allowance to the router the send is
/// refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fee_above_the_cap_or_a_missing_allowance_is_refused_before_signing() -> anyhow::Result<()> {
    let lane = Lane::start().await?;
    lane.template("ccip.cheap", "0.000000001", 0).await?;
    lane.template("ccip.qca", "0.01", 0).await?;
    let dispatcher = lane.worker("qtg-dispatcher").await?;
    let unapproved = lane.movement("ccip.qca", "1", ANVIL_ADDR_2, "ccip-unapproved").await?;
    let m = lane.done(&unapproved, &[&dispatcher]).await?;
    assert_eq!(node(&m, "send")["error_code"], "CCIP_ALLOWANCE_INSUFFICIENT", "{m:#}");
    lane.approve_router().await?;
    let capped = lane.movement("ccip.cheap", "1", ANVIL_ADDR_2, "ccip-capped").await?;
    let m = lane.done(&capped, &[&dispatcher]).await?;
    let send = node(&m, "send");
    assert_eq!(send["error_code"], "CCIP_FEE_ABOVE_CAP", "{m:#}");
    let signed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM artifacts a JOIN movement_request_nodes n ON n.id = a.request_node_id
          WHERE n.request_id = ANY($1::uuid[]) AND a.kind = 'sign_result'",
    )
    .bind(vec![unapproved.clone(), capped.clone()])
    .fetch_one(&lane.db.pool)
    .await?;
    assert_eq!(signed, 0, "nothing was signed");
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 0, "nothing was sent");
    drop(dispatcher);
    lane.db.drop_db().await;
    Ok(())
}

/// The receiver reverts on B: the execution is a FAILURE, which is not final (manual execution
/// may still deliver it). The delivery node goes to a person with the message id — the
/// movement in MANUAL_INTERVENTION — and the send is never repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_execution_is_handed_to_a_person_with_its_message_id() -> anyhow::Result<()> {
    let lane = Lane::start().await?;
    lane.approve_router().await?;
    lane.template("ccip.call", "0.01", 200_000).await?;
    let (dispatcher, observer, relay) =
        (lane.worker("qtg-dispatcher").await?, lane.worker("qtg-observer").await?, lane.relay().await?);
    let receiver = lane.at("destination", "failing_receiver");
    let receiver = receiver.parse::<Address>()?.to_checksum(None);
    let id = lane.movement("ccip.call", "5", &receiver, "ccip-failing").await?;
    let m = lane.done(&id, &[&dispatcher, &observer, &relay]).await?;
    assert_eq!(m["request_state"], "MANUAL_INTERVENTION", "{m:#}");
    let deliver = node(&m, "deliver");
    assert_eq!(deliver["node_state"], "UNKNOWN", "{deliver:#}");
    assert_eq!(deliver["error_code"], "CCIP_EXECUTION_FAILED", "{deliver:#}");
    let message_id = node(&m, "send")["provider_refs"]["message_id"].as_str().unwrap_or_default().to_string();
    assert!(deliver["error_detail"].as_str().unwrap_or_default().contains(&message_id), "{deliver:#}");
    assert_eq!(deliver["provider_refs"]["execution_state"], "FAILURE");
    assert_eq!(lane.balance("destination", &receiver).await?, U256::ZERO, "nothing arrived");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 1, "the send was never repeated");
    assert_eq!(lane.messages_sent().await?, 1);
    drop((dispatcher, observer, relay));
    lane.db.drop_db().await;
    Ok(())
}

/// The committed bytecode of the two contracts qtg adds to the lane (the wrapped native coin,
/// the receiver) is what the pinned solc makes of `contracts/QtgCcip.sol`.
#[test]
fn the_ccip_test_contracts_bytecode_is_their_source_compiled() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let solcjs = root.join(".qtg/evm/node_modules/.bin/solcjs");
    anyhow::ensure!(solcjs.exists(), "solcjs is not installed: run scripts/ensure-evm-tools.sh (make test does)");
    let out = std::env::temp_dir().join(format!("qtg-solc-ccip-{}", uuid::Uuid::new_v4().simple()));
    let status = std::process::Command::new(&solcjs)
        .args(["--bin", "--optimize", "-o"])
        .arg(&out)
        .arg("QtgCcip.sol")
        .current_dir(root.join("contracts"))
        .status()?;
    anyhow::ensure!(status.success(), "solcjs failed");
    for contract in ["QtgWrappedNative", "QtgCcipReceiver"] {
        let file = format!("QtgCcip_sol_{contract}.bin");
        let fresh = std::fs::read_to_string(out.join(&file))?;
        let committed = std::fs::read_to_string(root.join("contracts").join(&file))?;
        assert_eq!(fresh.trim(), committed.trim(), "contracts/{file} is stale: recompile it (see the source's header)");
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

/// The dispatcher is killed after its `ccipSend` reached chain A and before it heard the answer:
/// recovery finds the transaction by the hash recorded before the broadcast; one message left,
/// one broadcast reached the chain, and the intent ends `executed` with the message id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_killed_after_the_broadcast_leaves_one_message() -> anyhow::Result<()> {
    let lane = Lane::start_with(&[
        ("MG_EXECUTOR_TIMEOUT_MS", "3000"),
        ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP", "5"),
        ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.3"),
    ])
    .await?;
    lane.approve_router().await?;
    lane.template("ccip.qca", "0.01", 0).await?;
    lane.proxy_a.swallow_answers(1);
    let mut killed = lane.worker("qtg-dispatcher").await?;
    let (observer, recovery, relay) =
        (lane.worker("qtg-observer").await?, lane.worker("qtg-recovery").await?, lane.relay().await?);
    let id = lane.movement("ccip.qca", "10", ANVIL_ADDR_2, "ccip-killed").await?;
    wait_until("the send reaches chain A", Duration::from_secs(30), || async { Ok(lane.messages_sent().await? == 1) })
        .await?;
    killed.signal("KILL");
    killed.wait_exit(Duration::from_secs(10)).await?;
    // A new dispatcher takes the steps after the send (recovery settles the send itself).
    let dispatcher = lane.worker("qtg-dispatcher").await?;
    let m = lane.done(&id, &[&observer, &recovery, &relay, &dispatcher]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", recovery.log());
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 1, "one broadcast, never a second");
    assert_eq!(lane.messages_sent().await?, 1, "one message");
    assert_eq!(lane.balance("destination", ANVIL_ADDR_2).await?, U256::from(10 * E18));
    let message_id = node(&m, "send")["provider_refs"]["message_id"].as_str().map(str::to_string);
    assert_eq!(lane.intents(&id).await?, vec![("executed".to_string(), message_id)]);
    drop((observer, recovery, relay, dispatcher));
    lane.db.drop_db().await;
    Ok(())
}

/// A send whose transaction never reached the chain (its signer refused): its intent stays
/// `prepared` until the stranded reaper — one of two replicas, exactly once — releases it and
/// its nonce (held as a crash would leave it), audited; with `MG_CCIP_STRANDED_REAPER_ENABLED`
/// false the reaper skips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranded_send_intent_is_released_by_one_of_two_reapers() -> anyhow::Result<()> {
    let lane = Lane::start().await?;
    lane.approve_router().await?;
    lane.template_signed_by("ccip.wrong", "signer.evm.other", "0.01", 0).await?;
    let dispatcher = lane.worker("qtg-dispatcher").await?;
    let id = lane.movement("ccip.wrong", "1", ANVIL_ADDR_2, "ccip-stranded").await?;
    let m = lane.done(&id, &[&dispatcher]).await?;
    assert_eq!(node(&m, "send")["error_code"], "SIGNER_REFUSED", "{m:#}");
    assert_eq!(lane.intents(&id).await?, vec![("prepared".to_string(), None)]);
    // As a dispatcher that died before the failure leaves it: the nonce still reserved.
    sqlx::query(
        "UPDATE evm_nonce_reservation SET status = 'reserved'
          WHERE request_node_id = (SELECT id FROM movement_request_nodes
                                    WHERE request_id = $1::uuid AND node_key = 'send')",
    )
    .bind(&id)
    .execute(&lane.db.pool)
    .await?;
    let reaper_env = |enabled: &'static str| {
        let mut env = lane.env.clone();
        for (k, v) in [
            ("MG_CCIP_STRANDED_REAPER_ENABLED", enabled),
            ("MG_CCIP_STRANDED_REAPER_AGE_SECONDS", "1"),
            ("MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS", "0.3"),
            ("MG_EVM_NONCE_REAPER_ENABLED", "false"),
        ] {
            env.push((k.to_string(), v.to_string()));
        }
        env
    };
    let off = Proc::spawn("qtg-reaper", &lane.db.url, &env_pairs(&reaper_env("false"))).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(lane.intents(&id).await?, vec![("prepared".to_string(), None)], "the disabled reaper skips it");
    drop(off);
    let on = reaper_env("true");
    let reapers = (
        Proc::spawn("qtg-reaper", &lane.db.url, &env_pairs(&on)).await?,
        Proc::spawn("qtg-reaper", &lane.db.url, &env_pairs(&on)).await?,
    );
    wait_until("a reaper releases the intent", Duration::from_secs(30), || async {
        Ok(lane.intents(&id).await?.first().map(|i| i.0.as_str()) == Some("released"))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}\n{}", reapers.0.log(), reapers.1.log()))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let audits: Vec<Value> = sqlx::query_scalar(
        "SELECT data FROM audit_outbox WHERE action = 'ccip.intent.released' AND movement_id = $1::uuid",
    )
    .bind(&id)
    .fetch_all(&lane.db.pool)
    .await?;
    assert_eq!(audits.len(), 1, "released once across two replicas: {audits:?}");
    assert_eq!(audits[0]["nonce_released"], true, "{audits:?}");
    let status: String = sqlx::query_scalar(
        "SELECT status FROM evm_nonce_reservation
          WHERE request_node_id = (SELECT id FROM movement_request_nodes
                                    WHERE request_id = $1::uuid AND node_key = 'send')",
    )
    .bind(&id)
    .fetch_one(&lane.db.pool)
    .await?;
    assert_eq!(status, "released", "the nonce went back with it");
    drop((dispatcher, reapers));
    lane.db.drop_db().await;
    Ok(())
}

/// A message that left chain A but is never executed (no network relays it) emits nothing on
/// B: past the stranded reaper's age the delivery node goes to a person with the message id
/// (CCIP_EXECUTION_OVERDUE), the movement to MANUAL_INTERVENTION; nothing is re-sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_never_executed_is_handed_to_a_person() -> anyhow::Result<()> {
    let lane = Lane::start_with(&[
        ("MG_CCIP_STRANDED_REAPER_AGE_SECONDS", "2"),
        ("MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS", "0.3"),
    ])
    .await?;
    lane.approve_router().await?;
    lane.template("ccip.qca", "0.01", 0).await?;
    let (dispatcher, observer, reaper) =
        (lane.worker("qtg-dispatcher").await?, lane.worker("qtg-observer").await?, lane.worker("qtg-reaper").await?);
    let id = lane.movement("ccip.qca", "3", ANVIL_ADDR_2, "ccip-never").await?;
    let m = lane.done(&id, &[&dispatcher, &observer, &reaper]).await?;
    assert_eq!(m["request_state"], "MANUAL_INTERVENTION", "{m:#}");
    let deliver = node(&m, "deliver");
    assert_eq!(
        (deliver["node_state"].as_str(), deliver["error_code"].as_str()),
        (Some("UNKNOWN"), Some("CCIP_EXECUTION_OVERDUE"))
    );
    let message_id = node(&m, "send")["provider_refs"]["message_id"].as_str().unwrap_or_default().to_string();
    assert!(deliver["error_detail"].as_str().unwrap_or_default().contains(&message_id), "{deliver:#}");
    assert_eq!(lane.intents(&id).await?, vec![("escalated".to_string(), Some(message_id))]);
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 1, "nothing re-sent");
    drop((dispatcher, observer, reaper));
    lane.db.drop_db().await;
    Ok(())
}

/// `ccip_drift` (qtg-drift, `MG_CCIP_ENABLED`) reads the lane's facts on chain A in a scope of
/// their own: the router's OnRamp for B, the token's pool and its rate limits. Once baselined,
/// a pool rate limit set and the router pointed at another OnRamp are drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_changed_onramp_or_pool_rate_limit_is_ccip_drift() -> anyhow::Result<()> {
    let lane = Lane::start_with(&[("MG_CCIP_ENABLED", "true"), ("MG_CCIP_DRIFT_POLL_INTERVAL_SECONDS", "0.5")]).await?;
    let drift = lane.worker("qtg-drift").await?;
    let scope = "ccip:31337";
    wait_until("chain A's CCIP facts checked", Duration::from_secs(30), || async {
        Ok(lane.drift_check(scope).await?["status"] == "unbaselined")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", drift.log()))?;
    let seen = lane.drift_check(scope).await?;
    let observed = &seen["observed"];
    let dest = lane.lane["destination"]["selector"].as_str().unwrap_or_default().to_string();
    let token = lane.at("source", "token");
    assert_eq!(observed[format!("router.on_ramp.{dest}")], lane.at("source", "on_ramp"), "{seen:#}");
    assert_eq!(observed[format!("token.{token}.pool")], lane.at("source", "pool"), "{seen:#}");
    let limit = format!("token.{token}.pool.{dest}.outbound_rate_limit");
    assert_eq!(observed[&limit], "enabled=false capacity=0 rate=0", "{seen:#}");
    assert!(
        observed.as_object().into_iter().flatten().all(|(_, v)| v != "reverted"),
        "every fact reads through a function the contracts have: {seen:#}"
    );
    lane.baseline(scope).await?;
    wait_until("chain A ok", Duration::from_secs(30), || async {
        Ok(lane.drift_check(scope).await?["status"] == "ok")
    })
    .await?;
    let capped = RateLimiterConfig { isEnabled: true, capacity: 1000 * E18, rate: E18 };
    let off = RateLimiterConfig { isEnabled: false, capacity: 0, rate: 0 };
    let call = setChainRateLimiterConfigCall {
        remoteChainSelector: dest.parse()?,
        outboundConfig: capped,
        inboundConfig: off,
    };
    lane.send_a(DEPLOYER, &lane.at("source", "pool"), call.abi_encode()).await?;
    let other: Address = ANVIL_ADDR_2.parse()?;
    let call = applyRampUpdatesCall {
        onRampUpdates: vec![RouterOnRamp { destChainSelector: dest.parse()?, onRamp: other }],
        offRampRemoves: vec![],
        offRampAdds: vec![],
    };
    lane.send_a(DEPLOYER, &lane.at("source", "router"), call.abi_encode()).await?;
    wait_until("drift on chain A", Duration::from_secs(30), || async {
        let now = lane.drift_check(scope).await?;
        let facts: Vec<String> = now["differences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["fact"].as_str().map(str::to_string))
            .collect();
        Ok(now["status"] == "drift" && facts.contains(&limit) && facts.contains(&format!("router.on_ramp.{dest}")))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", drift.log()))?;
    drop(drift);
    lane.db.drop_db().await;
    Ok(())
}

/// The fee paid in LINK (the chain's LINK of `MG_CCIP_CHAINS`, pulled by the router within the
/// holder's allowance) and a destination token with 6 decimals: an amount finer than 6 decimals
/// would arrive short and is refused before signing; 2.5 tokens arrive as 2.5 with the
/// destination's decimals, and the holder's LINK pays exactly the fee the message carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fee_in_link_and_an_amount_rescaled_to_the_destination() -> anyhow::Result<()> {
    let lane = Lane::start_deployed(&[], &["--destination-decimals", "6"]).await?;
    lane.approve_router().await?;
    lane.approve_router_for("link").await?;
    let link = lane.at("source", "link");
    lane.template_full("ccip.link", "signer.evm.local", &link, "5", 0).await?;
    let (dispatcher, observer, relay) =
        (lane.worker("qtg-dispatcher").await?, lane.worker("qtg-observer").await?, lane.relay().await?);
    let dust = lane.movement("ccip.link", "1.0000001", ANVIL_ADDR_2, "ccip-dust").await?;
    let m = lane.done(&dust, &[&dispatcher]).await?;
    assert_eq!(node(&m, "send")["error_code"], "CCIP_AMOUNT_NOT_REPRESENTABLE", "{m:#}");
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 0, "nothing was sent");
    let link_before = lane.balance_of("source", "link", ANVIL_ADDR_0).await?;
    let id = lane.movement("ccip.link", "2.5", ANVIL_ADDR_2, "ccip-link").await?;
    let m = lane.done(&id, &[&dispatcher, &observer, &relay]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    assert_eq!(lane.balance("destination", ANVIL_ADDR_2).await?, U256::from(2_500_000u64), "2.5 with 6 decimals");
    let refs = &node(&m, "send")["provider_refs"];
    assert_eq!(refs["fee_token"], link.to_lowercase(), "{refs:#}");
    let fee: U256 = refs["fee_token_amount"].as_str().unwrap_or("0").parse()?;
    assert!(fee > U256::ZERO, "{refs:#}");
    assert_eq!(link_before - lane.balance_of("source", "link", ANVIL_ADDR_0).await?, fee, "the fee, in LINK");
    assert_eq!(lane.proxy_a.count("eth_sendRawTransaction"), 1);
    drop((dispatcher, observer, relay));
    lane.db.drop_db().await;
    Ok(())
}
