//! What a treasury sees: balance snapshots per venue (qtg-balance through the registry's
//! `[balances.*]` fetchers: the venue simulator's accounts and an anvil chain), retention, a
//! failing fetcher that blocks no other, `fresh=true` reading live numbers, `stale` flipping;
//! capital transfers end to end with their follow-up (qtg-followup), the balance check where
//! money leaves, and transfers whose movement was rejected or expired handed to a person once,
//! with two follow-up replicas.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

/// The same fast loops as the CEX lane's tests, plus the balance and follow-up workers.
const ENV: [(&str, &str); 8] = [
    ("MG_EXECUTOR_TIMEOUT_MS", "3000"),
    ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "5"),
    ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2"),
    ("MG_BALANCE_SNAPSHOT_ENABLED", "true"),
    ("MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS", "0.5"),
    ("MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED", "true"),
    ("MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS", "0.3"),
];

struct Treasury {
    db: TestDb,
    venue: VenueSim,
    anvil: Anvil,
    api: Api,
    keys: Keys,
    env: Vec<(String, String)>,
}

impl Treasury {
    async fn start(extra: &[(&str, &str)]) -> anyhow::Result<Treasury> {
        let db = TestDb::new().await?;
        let venue = VenueSim::start(&db.name).await?;
        let anvil = Anvil::start().await?;
        let registry = venue.registry(&db.name, "")?;
        let mut text = std::fs::read_to_string(&registry)?;
        text.push_str(&format!(
            "\n[balances.\"sim_a\"]\ntransport = \"local\"\nimpl = \"cex\"\n\
             config = {{ venue = \"sim_a\", base_url = \"{b}\" }}\n\n\
             [balances.\"sim_b\"]\ntransport = \"local\"\nimpl = \"cex\"\n\
             config = {{ venue = \"sim_b\", base_url = \"{b}\" }}\n\n\
             [balances.\"broken\"]\ntransport = \"local\"\nimpl = \"cex\"\n\
             config = {{ venue = \"broken\", base_url = \"http://127.0.0.1:9\" }}\n\n\
             [balances.\"evm:31337\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ chain_id = 31337, addresses = [\"{ANVIL_ADDR_0}\", \"{ANVIL_ADDR_2}\"] }}\n",
            b = venue.base
        ));
        std::fs::write(&registry, text)?;
        let mut env: Vec<(String, String)> = ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.extend(VENUE_SIM_CREDENTIALS.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env.push(("MG_BROKEN_ACCESS_KEY".into(), "broken-key".into()));
        env.push(("MG_BROKEN_SECRET".into(), "broken-secret".into()));
        env.push(("MG_EXECUTOR_REGISTRY".into(), registry.to_string_lossy().to_string()));
        env.push(("MG_EVM_CHAINS".into(), anvil.chains()));
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        let api = Api::start(&db.url, &env_pairs(&env)).await?;
        let keys = Keys::create(&api).await?;
        for file in ["deploy/cex-demo-template.json", "deploy/demo-template.json"] {
            let t: Value = serde_json::from_str(&std::fs::read_to_string(
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(file),
            )?)?;
            install_template(&api, &keys, t).await?;
        }
        Ok(Treasury { db, venue, anvil, api, keys, env })
    }

    async fn worker(&self, binary: &str) -> anyhow::Result<Proc> {
        Proc::spawn(binary, &self.db.url, &env_pairs(&self.env)).await
    }

    async fn balances(&self, query: &str) -> anyhow::Result<Vec<Value>> {
        let v = self.api.ok("GET", &format!("/v3/balances{query}"), &self.keys.requester, None, 200).await?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// The latest free balance of (venue, account, asset), if any.
    async fn free(&self, query: &str, venue: &str, account: &str, asset: &str) -> anyhow::Result<Option<f64>> {
        Ok(self
            .balances(query)
            .await?
            .into_iter()
            .find(|b| {
                b["venue_key"] == venue
                    && b["account"].as_str().is_some_and(|a| a.eq_ignore_ascii_case(account))
                    && b["asset"] == asset
            })
            .and_then(|b| b["free"].as_str().and_then(|f| f.parse().ok())))
    }

    async fn transfer(&self, body: Value, status: u16) -> anyhow::Result<Value> {
        self.api.ok("POST", "/v3/capital-transfers", &self.keys.requester, Some(body), status).await
    }

    async fn transfer_state(&self, id: &str) -> anyhow::Result<Value> {
        self.api.ok("GET", &format!("/v3/capital-transfers/{id}"), &self.keys.requester, None, 200).await
    }

    async fn wait_transfer(&self, id: &str, state: &str, logs: &[&Proc]) -> anyhow::Result<Value> {
        wait_until(&format!("capital transfer {state}"), Duration::from_secs(60), || async {
            Ok(self.transfer_state(id).await?["state"] == state)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n")))?;
        self.transfer_state(id).await
    }
}

/// Snapshots appear per venue (the venue's two accounts and the chain's two addresses), the
/// broken fetcher stores nothing and blocks nobody, retention deletes old rows, `stale`
/// flips once the worker stops, and `fresh=true` answers the chain's live number (once per
/// caller per interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_retention_a_failing_fetcher_fresh_and_stale() -> anyhow::Result<()> {
    let t = Treasury::start(&[
        // Retention alone: with balance_history_rollup on, a snapshot stays until its hour is
        // rolled up (snapshots_roll_up_per_hour_and_day_once_and_outlive_the_snapshots).
        ("MG_BALANCE_HISTORY_ENABLED", "false"),
        ("MG_BALANCE_SNAPSHOT_RETENTION_SECONDS", "3"),
        ("MG_BALANCE_STALE_THRESHOLD_SECONDS", "2"),
        ("MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS", "30"),
    ])
    .await?;
    let balance = t.worker("qtg-balance").await?;
    wait_until("snapshots of every working venue", Duration::from_secs(30), || async {
        let b = t.balances("").await?;
        let has = |venue: &str| b.iter().any(|r| r["venue_key"] == venue);
        Ok(has("sim_a") && has("sim_b") && has("evm:31337"))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", balance.log()))?;
    assert_eq!(t.free("", "sim_a", "sim_a", "USDT").await?, Some(1_000_000.0));
    assert_eq!(t.free("", "sim_b", "sim_b", "USDT").await?, Some(500_000.0));
    assert!(t.free("", "evm:31337", ANVIL_ADDR_2, "ETH").await?.is_some_and(|e| e > 1000.0));
    let all = t.balances("").await?;
    assert!(!all.iter().any(|r| r["venue_key"] == "broken"), "the broken venue stored nothing");
    assert!(all.iter().all(|r| r["stale"] == false && r["source"] == "worker"), "{all:#?}");
    // Filters.
    let usdt = t.balances("?asset=usdt").await?;
    assert!(!usdt.is_empty() && usdt.iter().all(|r| r["asset"] == "USDT"), "{usdt:#?}");
    assert!(t.balances("?venue=sim_b").await?.iter().all(|r| r["venue_key"] == "sim_b"));
    // Retention: the first rows are gone once they are older than 3 s; newer ones stay.
    let first: i64 = sqlx::query_scalar("SELECT min(id) FROM balance_snapshots").fetch_one(&t.db.pool).await?;
    wait_until("the first snapshots deleted", Duration::from_secs(20), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM balance_snapshots WHERE id = $1")
            .bind(first)
            .fetch_one(&t.db.pool)
            .await?;
        Ok(n == 0)
    })
    .await?;
    let old: i64 =
        sqlx::query_scalar("SELECT count(*) FROM balance_snapshots WHERE as_of < now() - interval '5 seconds'")
            .fetch_one(&t.db.pool)
            .await?;
    assert_eq!(old, 0, "nothing older than the retention (plus a tick) remains");
    // History for a chart: oldest first, one venue's asset.
    let h = t.api.ok("GET", "/v3/balances/history?venue=sim_a&asset=USDT", &t.keys.requester, None, 200).await?;
    let h = h["items"].as_array().cloned().unwrap_or_default();
    assert!(h.len() >= 2 && h.windows(2).all(|w| w[0]["as_of"].as_str() <= w[1]["as_of"].as_str()), "{h:#?}");
    // The worker stops: the numbers go stale after the threshold.
    drop(balance);
    wait_until("stale", Duration::from_secs(20), || async {
        Ok(t.balances("?venue=sim_a").await?.iter().all(|r| r["stale"] == true))
    })
    .await?;
    // Money moves on chain; fresh=true answers the live number, as a fresh snapshot.
    let before = t.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await?;
    let tx = json!({"from": ANVIL_ADDR_0, "to": ANVIL_ADDR_2, "value": "0xde0b6b3a7640000"});
    t.anvil.rpc("eth_sendTransaction", json!([tx])).await?;
    wait_until("the transfer mined", Duration::from_secs(10), || async {
        Ok(t.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await? > before)
    })
    .await?;
    let live = t.anvil.quantity("eth_getBalance", json!([ANVIL_ADDR_2, "latest"])).await?;
    let fresh = t.balances("?fresh=true&venue=evm:31337").await?;
    let row = fresh
        .iter()
        .find(|r| r["account"].as_str().is_some_and(|a| a.eq_ignore_ascii_case(ANVIL_ADDR_2)) && r["asset"] == "ETH")
        .cloned()
        .unwrap_or_default();
    assert_eq!((row["source"].as_str(), row["stale"].as_bool()), (Some("fresh"), Some(false)), "{row:#}");
    let wei = |s: &str| -> u128 {
        let (i, f) = s.split_once('.').unwrap_or((s, ""));
        format!("{i}{f:0<18}").parse().unwrap_or(0)
    };
    assert_eq!(wei(row["free"].as_str().unwrap_or("0")), live, "the live number: {row:#}");
    // Once per caller per interval.
    let (status, body) = t.api.call("GET", "/v3/balances?fresh=true", &t.keys.requester, None).await?;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("RATE_LIMITED")), "{body}");
    // fresh=true for a venue that fails names it, and still answers the others' last rows.
    let (status, body) = t.api.call("GET", "/v3/balances?fresh=true&venue=broken", &t.keys.approver, None).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["failed"][0]["venue_key"], "broken", "{body}");
    let (status, _) = t.api.call("GET", "/v3/balances?fresh=maybe", &t.keys.approver, None).await?;
    assert_eq!(status, 400);
    t.db.drop_db().await;
    Ok(())
}

/// A capital transfer from sim_a to sim_b through the CEX lane: recorded, its movement
/// created, approved, completed; the follow-up closes it COMPLETED; the balances before and
/// after reflect it. The same request again is the same transfer; another body with the key
/// is refused. A source balance below the amount is refused at creation (transfer and plain
/// movement alike) and records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capital_transfer_runs_end_to_end_and_is_closed_by_the_follow_up() -> anyhow::Result<()> {
    let t = Treasury::start(&[("MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS", "1")]).await?;
    let balance = t.worker("qtg-balance").await?;
    let dispatcher = t.worker("qtg-dispatcher").await?;
    let observer = t.worker("qtg-observer").await?;
    let followup = t.worker("qtg-followup").await?;
    wait_until("sim_a's balance", Duration::from_secs(30), || async {
        Ok(t.free("", "sim_a", "sim_a", "USDT").await?.is_some()
            && t.free("", "sim_b", "sim_b", "USDT").await?.is_some())
    })
    .await?;
    let (a0, b0) = (
        t.free("", "sim_a", "sim_a", "USDT").await?.unwrap_or(0.0),
        t.free("", "sim_b", "sim_b", "USDT").await?.unwrap_or(0.0),
    );
    let body = json!({
        "from": "sim_a", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "250", "reason": "rebalance to sim_b",
        "template_key": "demo.cex.a_to_b", "idempotency_key": "ct-1"
    });
    let ct = t.transfer(body.clone(), 201).await?;
    assert_eq!(ct["state"], "MOVEMENT_CREATED", "{ct:#}");
    let id = ct["id"].as_str().unwrap_or_default().to_string();
    let movement = ct["movement_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(t.transfer(body.clone(), 200).await?["id"], json!(id), "same key, same body: the same transfer");
    let mut other = body.clone();
    other["amount"] = json!("251");
    let conflict = t.transfer(other, 409).await?;
    assert_eq!(conflict["error"]["code"], "IDEMPOTENCY_CONFLICT");
    let m = t.api.ok("GET", &format!("/v3/movements/{movement}"), &t.keys.requester, None, 200).await?;
    assert_eq!(m["intent"]["source"], "sim_a", "{m:#}");
    t.api.ok("POST", &format!("/v3/movements/{movement}/approve"), &t.keys.approver, None, 200).await?;
    let done = t.wait_transfer(&id, "COMPLETED", &[&dispatcher, &observer, &followup]).await?;
    assert_eq!(done["movement_state"], "COMPLETED");
    assert!(done["closed_at"].is_string(), "{done:#}");
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_outbox WHERE entity_type = 'capital_transfer' AND entity_id = $1 ORDER BY id",
    )
    .bind(&id)
    .fetch_all(&t.db.pool)
    .await?;
    assert_eq!(audit, ["capital_transfer.create", "capital_transfer.movement_created", "capital_transfer.completed"]);
    // The venue's books, read fresh: sim_a paid 250, of which its 1 USDT fee was deducted
    // (Binance's model); sim_b received 249 — and the transfer's settlement says so.
    wait_until("sim_b credited", Duration::from_secs(20), || async {
        Ok(t.free("?fresh=true&venue=sim_b", "sim_b", "sim_b", "USDT").await? == Some(b0 + 249.0))
    })
    .await?;
    assert_eq!(t.free("", "sim_a", "sim_a", "USDT").await?, Some(a0 - 250.0));
    let s = &done["settlement"];
    assert_eq!(
        (s["fee_model"].as_str(), s["debit"].as_str(), s["fee_charged"].as_str(), s["arrived"].as_str()),
        (Some("deducted"), Some("250"), Some("1"), Some("249.00000000")),
        "{done:#}"
    );
    // More than sim_a holds: refused at creation, nothing recorded.
    let before: i64 =
        sqlx::query_scalar("SELECT count(*) FROM capital_transfer_requests").fetch_one(&t.db.pool).await?;
    let too_much = json!({
        "from": "sim_a", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "5000000", "reason": "too much",
        "template_key": "demo.cex.a_to_b", "idempotency_key": "ct-2"
    });
    let refused = t.transfer(too_much, 409).await?;
    assert_eq!(refused["error"]["code"], "INSUFFICIENT_BALANCE", "{refused}");
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM capital_transfer_requests").fetch_one(&t.db.pool).await?;
    assert_eq!(before, after, "a refused request records nothing");
    let movement_body = json!({"template_key": "demo.cex.a_to_b", "idempotency_key": "m-too-much",
        "intent": {"asset": "USDT", "amount": "5000000", "source": "sim_a", "destination": SIM_B_DEPOSIT}});
    let refused = t.api.ok("POST", "/v3/movements", &t.keys.requester, Some(movement_body), 409).await?;
    assert_eq!(refused["error"]["code"], "INSUFFICIENT_BALANCE", "{refused}");
    // Bad input: a clear 400.
    let bad = json!({"from": "sim_a", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "-1", "reason": "x",
                     "template_key": "demo.cex.a_to_b", "idempotency_key": "ct-3"});
    assert_eq!(t.transfer(bad, 400).await?["error"]["code"], "VALIDATION_ERROR");
    drop((balance, dispatcher, observer, followup));
    t.db.drop_db().await;
    Ok(())
}

/// Two follow-up replicas: a transfer whose movement was rejected and one whose movement
/// expired each end NEEDS_ATTENTION with exactly one attention callback and one audit row; a
/// request whose movement creation was lost (recorded, then the process died) gets its
/// movement from the follow-up, as its requester.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rejected_and_expired_movements_leave_the_transfer_needing_attention_once() -> anyhow::Result<()> {
    let hooks = Hooks::default();
    let hook_url = hooks.serve().await?;
    let t = Treasury::start(&[
        ("MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS", "1"),
        ("MG_APPROVAL_TTL_SECONDS", "3"),
        ("MG_EXPIRATION_CHECK_INTERVAL_SECONDS", "0.5"),
        ("MG_CALLBACK_SECRET", "capital-test-secret"),
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ])
    .await?;
    let followups = (t.worker("qtg-followup").await?, t.worker("qtg-followup").await?);
    let expiry = t.worker("qtg-expiry").await?;
    let callbacks = t.worker("qtg-callback").await?;
    let request = |key: &str| {
        json!({"from": "venue-a", "to": "0xabc", "asset": "USDC", "amount": "100", "reason": "top up",
               "template_key": "demo.sim.transfer", "idempotency_key": key, "callback_url": hook_url})
    };
    let rejected = t.transfer(request("ct-rejected"), 201).await?;
    let expired = t.transfer(request("ct-expired"), 201).await?;
    let movement = rejected["movement_id"].as_str().unwrap_or_default().to_string();
    t.api
        .ok(
            "POST",
            &format!("/v3/movements/{movement}/reject"),
            &t.keys.approver,
            Some(json!({"reason": "not now"})),
            200,
        )
        .await?;
    for ct in [&rejected, &expired] {
        let id = ct["id"].as_str().unwrap_or_default();
        let done = t.wait_transfer(id, "NEEDS_ATTENTION", &[&followups.0, &followups.1, &expiry]).await?;
        assert!(["REJECTED", "EXPIRED"].contains(&done["movement_state"].as_str().unwrap_or("")), "{done:#}");
    }
    // Several more follow-up ticks of both replicas: still one of each.
    followups.0.wait_ticks("capital_transfer_followup", 5, Duration::from_secs(20)).await?;
    followups.1.wait_ticks("capital_transfer_followup", 5, Duration::from_secs(20)).await?;
    let attention = |hooks: &Hooks| hooks.of("capital_transfer_attention");
    wait_until("two attention callbacks", Duration::from_secs(20), || async { Ok(attention(&hooks).len() >= 2) })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", callbacks.log()))?;
    callbacks.wait_ticks("callback_dispatcher", 5, Duration::from_secs(20)).await?;
    let got = attention(&hooks);
    assert_eq!(got.len(), 2, "one per transfer: {got:#?}");
    let ids: std::collections::BTreeSet<String> =
        got.iter().filter_map(|h| h["data"]["capital_transfer_id"].as_str().map(str::to_string)).collect();
    assert_eq!(ids.len(), 2, "{got:#?}");
    let audits: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_outbox WHERE action = 'capital_transfer.needs_attention'")
            .fetch_one(&t.db.pool)
            .await?;
    assert_eq!(audits, 2);
    // A person decides the rejected one: closed FAILED with the reason; a closed one is not
    // closed again.
    let rid = rejected["id"].as_str().unwrap_or_default();
    let closed = t
        .api
        .ok(
            "POST",
            &format!("/v3/capital-transfers/{rid}/actions/close"),
            &t.keys.operator,
            Some(json!({"reason": "re-requested"})),
            200,
        )
        .await?;
    assert_eq!(closed["state"], "FAILED", "{closed:#}");
    assert!(closed["outcome"].as_str().is_some_and(|o| o.contains("re-requested")), "{closed:#}");
    let again = t
        .api
        .ok(
            "POST",
            &format!("/v3/capital-transfers/{rid}/actions/close"),
            &t.keys.operator,
            Some(json!({"reason": "x"})),
            409,
        )
        .await?;
    assert_eq!(again["error"]["code"], "INVALID_STATE");
    // A request recorded without its movement (the creating process died): the follow-up
    // creates it, as the requester.
    let lost: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO capital_transfer_requests
             (id, requested_by, idempotency_key, body_hash, source, destination, asset, amount, reason, template_key,
              state, updated_at)
         VALUES (gen_random_uuid(), 'treasury-bot', 'ct-lost', 'x', 'venue-a', '0xabc', 'USDC', 5, 'lost', \
             'demo.sim.transfer',
                 'PENDING', now() - interval '1 minute') RETURNING id",
    )
    .fetch_one(&t.db.pool)
    .await?;
    let found = t.wait_transfer(&lost.to_string(), "MOVEMENT_CREATED", &[&followups.0, &followups.1]).await?;
    let m = t
        .api
        .ok(
            "GET",
            &format!("/v3/movements/{}", found["movement_id"].as_str().unwrap_or("")),
            &t.keys.requester,
            None,
            200,
        )
        .await?;
    assert_eq!(m["created_by"], "treasury-bot", "{m:#}");
    let linked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'capital_transfer.movement_created' AND entity_id = $1",
    )
    .bind(lost.to_string())
    .fetch_one(&t.db.pool)
    .await?;
    assert_eq!(linked, 1, "linked once, with two replicas");
    drop((followups, expiry, callbacks));
    t.db.drop_db().await;
    Ok(())
}

/// Numbers from outside are numbers: a venue answering `"Infinity"`, `"NaN"`, a negative or an
/// out-of-range balance has none of that answer stored (the other venues are), so a transfer of
/// 10^30 is still held to the last real number; and a capital transfer's `from` must be the
/// account its template withdraws from — the one checked, audited and shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn numbers_from_a_venue_are_numbers_and_the_payer_is_the_account_checked() -> anyhow::Result<()> {
    let t = Treasury::start(&[]).await?;
    let balance = t.worker("qtg-balance").await?;
    wait_until("a snapshot of sim_a", Duration::from_secs(30), || async {
        Ok(t.free("", "sim_a", "sim_a", "USDT").await?.is_some())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", balance.log()))?;
    let pool = t.db.pool.clone();
    let newest = |venue: &'static str| {
        let pool = pool.clone();
        async move {
            anyhow::Ok(
                sqlx::query_scalar::<_, Option<i64>>("SELECT max(id) FROM balance_snapshots WHERE venue_key = $1")
                    .bind(venue)
                    .fetch_one(&pool)
                    .await?
                    .unwrap_or(0),
            )
        }
    };
    for bad in ["Infinity", "NaN", "-5", "1e400"] {
        t.venue.admin("DELETE", "/admin/faults", None).await?;
        t.venue
            .fault(json!({"kind": "bad_number", "endpoint": "account", "account": "sim_a", "count": 0, "value": bad}))
            .await?;
        // A tick that began before the fault may still store a real number.
        balance.wait_ticks("balance_snapshot", 2, Duration::from_secs(30)).await?;
        let (a, b) = (newest("sim_a").await?, newest("sim_b").await?);
        balance.wait_ticks("balance_snapshot", 3, Duration::from_secs(30)).await?;
        assert_eq!(newest("sim_a").await?, a, "{bad}: nothing of sim_a's answer is stored");
        assert!(newest("sim_b").await? > b, "{bad}: the other venue's numbers still land");
    }
    let log = balance.log();
    assert!(log.contains("not a finite non-negative decimal"), "the refusal says why: {log}");
    let odd: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM balance_snapshots WHERE free < 0 OR free = 'NaN'::numeric OR free = 'Infinity'::numeric",
    )
    .fetch_one(&t.db.pool)
    .await?;
    assert_eq!(odd, 0);
    t.venue.admin("DELETE", "/admin/faults", None).await?;

    // The balance check still holds a huge transfer to the last real number.
    let huge = json!({
        "from": "sim_a", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "1000000000000000000000000000000",
        "reason": "more than there is", "template_key": "demo.cex.a_to_b", "idempotency_key": "huge"
    });
    let b = t.transfer(huge, 409).await?;
    assert_eq!(b["error"]["code"], "INSUFFICIENT_BALANCE", "{b}");
    // `from` names another account than the template pays from: refused, nothing recorded.
    let other = json!({"from": "sim_b", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "10",
                       "reason": "wrong payer", "template_key": "demo.cex.a_to_b", "idempotency_key": "other"});
    let b = t.transfer(other, 400).await?;
    assert!(
        b["error"]["message"].as_str().unwrap_or_default().contains("not the account this template pays from"),
        "{b}"
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM capital_transfer_requests").fetch_one(&t.db.pool).await?;
    assert_eq!(n, 0, "nothing recorded");
    // Named in another case, it is that account: recorded and audited as the payer's spelling.
    let upper = json!({"from": "SIM_A", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "10",
                       "reason": "rebalance", "template_key": "demo.cex.a_to_b", "idempotency_key": "upper"});
    let c = t.transfer(upper, 201).await?;
    assert_eq!(c["source"], "sim_a", "{c}");
    let audited: Value =
        sqlx::query_scalar("SELECT data FROM audit_outbox WHERE action = 'capital_transfer.create' AND entity_id = $1")
            .bind(c["id"].as_str().unwrap_or_default())
            .fetch_one(&t.db.pool)
            .await?;
    assert_eq!(audited["source"], "sim_a", "{audited}");
    drop(balance);
    t.db.drop_db().await;
    Ok(())
}

/// balance_history_rollup, black-box: snapshots placed across hour and day boundaries (UTC, the
/// test sets their times — nothing waits for an hour to pass) are rolled by two `qtg-balance`
/// replicas into one row per venue / account / asset / hour and day with the right first, last,
/// min, max and count; the rollups stay when the snapshot retention deletes the snapshots, rolling
/// again changes nothing, and `GET /v3/balances/history?granularity=` serves each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_roll_up_per_hour_and_day_once_and_outlive_the_snapshots() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let viewer = api.key("treasury-viewer", "viewer").await?;
    // D0 is three days ago (UTC midnight): its last half hour, then D1's first and sixth hours.
    sqlx::query(
        "INSERT INTO balance_snapshots (venue_key, account, asset, free, locked, source, as_of)
         SELECT 'sim_a', a, 'USDT', f, l, 'worker',
                date_trunc('day', now(), 'UTC') - interval '3 days' + make_interval(secs => s)
           FROM (VALUES ('acct-1', 50, 1, 84600), ('acct-1', 70, 3, 86399.5), ('acct-1', 30, 0, 85000),
                        ('acct-1', 60, 0, 86400), ('acct-1', 65, 2, 88200), ('acct-1', 40, 0, 104999),
                        ('acct-2', 5, 0, 86401)) AS t(a, f, l, s)",
    )
    .execute(&db.pool)
    .await?;
    let env = [
        ("MG_BALANCE_HISTORY_INTERVAL_SECONDS", "0.3"),
        ("MG_BALANCE_SNAPSHOT_ENABLED", "true"),
        ("MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS", "0.3"),
        ("MG_BALANCE_SNAPSHOT_RETENTION_SECONDS", "86400"),
    ];
    let replicas = (Proc::spawn("qtg-balance", &db.url, &env).await?, Proc::spawn("qtg-balance", &db.url, &env).await?);
    type Row = (String, String, f64, String, String, String, String, String, i64);
    let rows = || async {
        let r: Vec<Row> = sqlx::query_as(
            "SELECT granularity, account,
                    extract(epoch FROM bucket_start - (date_trunc('day', now(), 'UTC') - interval '3 days'))::float8,
                    free_first::text, free_last::text, free_min::text, free_max::text, locked_last::text, samples
               FROM balance_history WHERE venue_key = 'sim_a' AND asset = 'USDT'
              ORDER BY granularity DESC, bucket_start, account",
        )
        .fetch_all(&db.pool)
        .await?;
        anyhow::Ok(r)
    };
    let raw_left = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM balance_snapshots WHERE as_of < date_trunc('day', now(), 'UTC') - interval '1 day'",
        )
        .fetch_one(&db.pool)
        .await?;
        anyhow::Ok(n)
    };
    wait_until("the days rolled and the old snapshots deleted", Duration::from_secs(60), || async {
        Ok(rows().await?.iter().filter(|r| r.0 == "day").count() == 3 && raw_left().await? == 0)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}\n{}", replicas.0.log(), replicas.1.log()))?;
    let s = |v: &str| v.to_string();
    let expected: Vec<Row> = vec![
        // Hours: D0 23:00 (three snapshots), D1 00:00 (acct-1 two, acct-2 one), D1 05:00.
        (s("hour"), s("acct-1"), 82800.0, s("50"), s("70"), s("30"), s("70"), s("3"), 3),
        (s("hour"), s("acct-1"), 86400.0, s("60"), s("65"), s("60"), s("65"), s("2"), 2),
        (s("hour"), s("acct-2"), 86400.0, s("5"), s("5"), s("5"), s("5"), s("0"), 1),
        (s("hour"), s("acct-1"), 104400.0, s("40"), s("40"), s("40"), s("40"), s("0"), 1),
        // Days: D0, D1 per account.
        (s("day"), s("acct-1"), 0.0, s("50"), s("70"), s("30"), s("70"), s("3"), 3),
        (s("day"), s("acct-1"), 86400.0, s("60"), s("40"), s("40"), s("65"), s("0"), 3),
        (s("day"), s("acct-2"), 86400.0, s("5"), s("5"), s("5"), s("5"), s("0"), 1),
    ];
    let mut got = rows().await?;
    got.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.total_cmp(&b.2)).then(a.1.cmp(&b.1)));
    let mut want = expected.clone();
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.total_cmp(&b.2)).then(a.1.cmp(&b.1)));
    assert_eq!(got, want, "one row per bucket across two replicas, with its figures");

    // More ticks of both replicas change nothing; the API serves each granularity.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut again = rows().await?;
    again.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.total_cmp(&b.2)).then(a.1.cmp(&b.1)));
    assert_eq!(again, want, "rolling again is idempotent");
    let hours =
        api.ok("GET", "/v3/balances/history?venue=sim_a&asset=usdt&granularity=hour", &viewer, None, 200).await?;
    assert_eq!(hours["granularity"], "hour");
    let items = hours["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{hours:#}");
    assert_eq!((items[0]["free_first"].as_str(), items[0]["samples"].as_i64()), (Some("50"), Some(3)));
    let days = api.ok("GET", "/v3/balances/history?venue=sim_a&asset=USDT&granularity=day", &viewer, None, 200).await?;
    assert_eq!(days["items"].as_array().unwrap().len(), 3, "{days:#}");
    let raw = api.ok("GET", "/v3/balances/history?venue=sim_a&asset=USDT", &viewer, None, 200).await?;
    assert_eq!(raw["granularity"], "raw");
    for bad in ["granularity=week", "granularity=hour&spread=true", "granularity=day&limit=2001"] {
        let (status, b) =
            api.call("GET", &format!("/v3/balances/history?venue=sim_a&asset=USDT&{bad}"), &viewer, None).await?;
        assert_eq!((status, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{bad}: {b}");
    }
    drop(replicas);
    db.drop_db().await;
    Ok(())
}
