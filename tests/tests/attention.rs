//! What the console's operator screens stand on, black-box: movement search, the approval
//! queue with m-of-n progress, the attention counts, a bulk dead-letter replay that replays
//! each dead letter once, proposals and key requests listed, and worker instances that are
//! gone (crashed long ago) or stopped cleanly (their heartbeats removed).

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

fn sim(key: &str, script: Value) -> Value {
    json!({"node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
           "config": {"sim": script}})
}

fn ids(v: &Value) -> Vec<String> {
    v["items"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str().map(str::to_string)).collect()
}

async fn create(api: &Api, keys: &Keys, template: &str, idem: &str, amount: &str, to: &str) -> anyhow::Result<String> {
    let body = json!({"template_key": template, "idempotency_key": idem,
        "intent": {"asset": "USDC", "amount": amount, "source": "venue-a", "destination": to}});
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
    Ok(m["id"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn search_the_approval_queue_attention_and_a_bulk_replay() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.3")]).await?;
    let keys = Keys::create(&api).await?;
    let bob = api.key("bob", "approver").await?;
    let admin = api.key("root-2", "admin").await?;
    install_template(&api, &keys, json!({"template_key": "att.one", "nodes": [sim("a", json!({}))]})).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "att.two", "nodes": [sim("a", json!({}))], "risk_controls": {"approvals_required": 2}}),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "att.stuck", "nodes": [sim("u", json!({"submit": "unknown", "recover": "unknown"}))]}),
    )
    .await?;
    let small = create(&api, &keys, "att.one", "att-1", "10", "0xAbC").await?;
    let large = create(&api, &keys, "att.one", "att-2", "250.5", "0xdef").await?;
    let two = create(&api, &keys, "att.two", "att-3", "99.99", "0xdef").await?;

    // Search.
    let q = |query: &str| format!("/v3/movements?{query}");
    let find = |query: &str| {
        let path = q(query);
        let key = keys.requester.clone();
        let api = &api;
        async move { api.ok("GET", &path, &key, None, 200).await.map(|v| ids(&v)) }
    };
    assert_eq!(find("idempotency_key=att-2").await?, vec![large.clone()]);
    assert_eq!(find("destination=0xabc").await?, vec![small.clone()], "a destination matches in any case");
    assert_eq!(find("amount_min=100").await?, vec![large.clone()]);
    assert_eq!(find("amount_max=99.99").await?, vec![two.clone(), small.clone()]);
    assert_eq!(find("amount_min=50&amount_max=100&destination=0xDEF").await?, vec![two.clone()]);
    assert_eq!(find(&format!("id={}", &small[..8])).await?, vec![small.clone()]);
    assert_eq!(find(&format!("id={}", small[..13].to_uppercase())).await?, vec![small.clone()], "any case, dashes");
    assert!(find("until=2000-01-01T00:00:00Z").await?.is_empty());
    for bad in [
        "amount_min=ten",
        "id=xyz",
        "id=----",
        "id=12%25",
        "node_state=STUCK",
        "awaiting_approval=bob",
        "until=tomorrow",
    ] {
        let (status, err) = api.call("GET", &q(bad), &keys.requester, None).await?;
        assert_eq!((status, err["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{bad}: {err}");
    }

    // The approval queue: alice approves the two-approval movement once; it leaves her queue,
    // stays in bob's with 1 of 2; the requester's own are never in their queue.
    api.ok("POST", &format!("/v3/movements/{two}/approve"), &keys.approver, Some(json!({"reason": "first"})), 200)
        .await?;
    let mine = api.ok("GET", &q("awaiting_approval=me"), &keys.approver, None, 200).await?;
    assert_eq!(ids(&mine), vec![large.clone(), small.clone()]);
    let bobs = api.ok("GET", &q("awaiting_approval=me"), &bob, None, 200).await?;
    assert_eq!(ids(&bobs), vec![two.clone(), large.clone(), small.clone()]);
    assert_eq!(
        (bobs["items"][0]["approvals_given"].as_i64(), bobs["items"][0]["approvals_required"].as_i64()),
        (Some(1), Some(2))
    );
    assert!(ids(&api.ok("GET", &q("awaiting_approval=me"), &keys.requester, None, 200).await?).is_empty());
    let att = api.ok("GET", "/v3/attention", &bob, None, 200).await?;
    assert_eq!((att["pending_approval"].as_i64(), att["awaiting_my_approval"].as_i64()), (Some(3), Some(3)), "{att}");
    let att = api.ok("GET", "/v3/attention", &keys.approver, None, 200).await?;
    assert_eq!(att["awaiting_my_approval"].as_i64(), Some(2), "{att}");
    let att = api.ok("GET", "/v3/attention", &keys.requester, None, 200).await?;
    assert_eq!(att["awaiting_my_approval"].as_i64(), Some(0), "only an approver has a queue: {att}");

    // A node in UNKNOWN is counted and found.
    let stuck = create(&api, &keys, "att.stuck", "att-4", "1", "0x1").await?;
    api.ok("POST", &format!("/v3/movements/{stuck}/approve"), &keys.approver, None, 200).await?;
    wait_until("the stuck movement is counted", T, || async {
        let att = api.ok("GET", "/v3/attention", &keys.requester, None, 200).await?;
        Ok(att["unknown"].as_i64() == Some(1))
    })
    .await?;
    assert_eq!(find("node_state=UNKNOWN").await?, vec![stuck.clone()]);

    // Two dead letters, replayed in bulk with one reason; each once.
    let mut dead = Vec::new();
    for seq in [900, 901] {
        let id: uuid::Uuid = sqlx::query_scalar(
            "INSERT INTO movement_callback_outbox (id, request_id, event_id, event_type, sequence, payload,
                callback_url, status, attempts, callback_timestamp, callback_nonce, last_error)
             VALUES (gen_random_uuid(), $1::uuid, gen_random_uuid(), 'node_state_changed', $2, '{}'::jsonb,
                'http://127.0.0.1:9/gone', 'dlq', 5, 0, gen_random_uuid()::text, 'connection refused')
             RETURNING id",
        )
        .bind(&small)
        .bind(seq as i64)
        .fetch_one(&db.pool)
        .await?;
        dead.push(id.to_string());
    }
    let open = api.ok("GET", "/v3/callbacks?status=dlq&replayed=false", &keys.operator, None, 200).await?;
    assert_eq!(ids(&open).len(), 2, "{open}");
    let att = api.ok("GET", "/v3/attention", &keys.operator, None, 200).await?;
    assert_eq!(att["dlq"].as_i64(), Some(2));
    let none = "00000000-0000-4000-8000-000000000009";
    let body = json!({"ids": [dead[0], dead[1], none], "reason": "receiver back after the outage"});
    let (status, err) =
        api.call("POST", "/v3/callbacks/actions/replay", &keys.operator, Some(json!({"ids": [dead[0]]}))).await?;
    assert_eq!(status, 400, "a bulk replay needs its reason: {err}");
    let done = api.ok("POST", "/v3/callbacks/actions/replay", &keys.operator, Some(body.clone()), 200).await?;
    assert_eq!(done["replayed"].as_u64(), Some(2), "{done}");
    let missing = done["outcomes"].as_array().unwrap().iter().find(|o| o["id"] == none).cloned().unwrap_or_default();
    assert!(missing["error"].as_str().unwrap_or_default().starts_with("NOT_FOUND"), "{done}");
    let again = api.ok("POST", "/v3/callbacks/actions/replay", &keys.operator, Some(body), 200).await?;
    assert_eq!(again["replayed"].as_u64(), Some(0), "a dead letter replays once: {again}");
    assert!(again.to_string().contains("already replayed"), "{again}");
    let (status, _) =
        api.call("POST", &format!("/v3/callbacks/{}/actions/replay", dead[0]), &keys.operator, None).await?;
    assert_eq!(status, 409, "nor one by one");
    let replays: i64 =
        sqlx::query_scalar("SELECT count(*) FROM movement_callback_outbox WHERE replay_of::text = ANY($1)")
            .bind(&dead)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(replays, 2);
    assert!(ids(&api.ok("GET", "/v3/callbacks?status=dlq&replayed=false", &keys.operator, None, 200).await?)
        .iter()
        .all(|id| !dead.contains(id)));
    let path = format!("/v3/audit-events?movement_id={small}&action=callback.replay");
    wait_until("both replays audited with their reason", T, || async {
        let audit = api.ok("GET", &path, &keys.operator, None, 200).await?;
        Ok(audit["items"].as_array().map(Vec::len) == Some(2)
            && audit.to_string().matches("receiver back after the outage").count() == 2)
    })
    .await?;

    // A destination given as an object is found by its address.
    let body = json!({"template_key": "att.one", "idempotency_key": "att-obj",
        "intent": {"asset": "USDC", "amount": "5", "source": "venue-a",
                   "destination": {"address": "0xObj", "memo": "7"}}});
    let obj = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
    assert_eq!(find("destination=0xOBJ").await?, vec![obj["id"].as_str().unwrap_or_default().to_string()]);

    // Proposals and key requests are listed.
    let pending = api
        .ok(
            "POST",
            "/v3/template-proposals",
            &keys.operator,
            Some(json!({"template_key": "att.later", "nodes": [sim("a", json!({}))]})),
            201,
        )
        .await?;
    let listed = api.ok("GET", "/v3/template-proposals?status=pending", &keys.requester, None, 200).await?;
    assert_eq!(ids(&listed), vec![pending["id"].as_str().unwrap_or_default().to_string()]);
    let (status, _) = api.call("GET", "/v3/template-proposals?status=maybe", &keys.requester, None).await?;
    assert_eq!(status, 400);
    let requests = api.ok("GET", "/v3/api-key-requests?status=pending", &admin, None, 200).await?;
    assert!(requests["items"].as_array().is_some());
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_worker_leaves_no_heartbeat_and_a_long_silent_one_is_gone() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let viewer = api.key("watcher", "viewer").await?;
    // A crashed instance silent for two hours: gone, listed only when asked for, not stale.
    sqlx::query(
        "INSERT INTO worker_heartbeats (worker, network_class, instance_id, hostname, pid, started_at, last_beat_at)
         VALUES ('audit_outbox_promoter', 'default', 'old-host-1', 'old-host', 1, now() - interval '3 hours',
                 now() - interval '2 hours')",
    )
    .execute(&db.pool)
    .await?;
    let listed = api.ok("GET", "/v3/workers", &viewer, None, 200).await?;
    assert!(!listed.to_string().contains("old-host-1"), "{listed}");
    let all = api.ok("GET", "/v3/workers?include_gone=true", &viewer, None, 200).await?;
    let gone = all["items"].as_array().unwrap().iter().find(|w| w["instance_id"] == "old-host-1").cloned();
    assert_eq!(gone.map(|w| w["gone"].clone()), Some(json!(true)), "{all}");
    assert_eq!(api.ok("GET", "/v3/attention", &viewer, None, 200).await?["stale_workers"].as_i64(), Some(0));

    // A worker that stops on SIGTERM removes its rows; one killed keeps them (stale).
    let mut audit = Proc::spawn("qtg-audit", &db.url, &[]).await?;
    let pid = audit.pid().unwrap_or_default() as i64;
    let rows = |pid: i64| {
        let pool = db.pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM worker_heartbeats WHERE pid = $1")
                .bind(pid as i32)
                .fetch_one(&pool)
                .await?;
            anyhow::Ok(n)
        }
    };
    wait_until("qtg-audit's heartbeat", T, || async { Ok(rows(pid).await? > 0) }).await?;
    audit.signal("TERM");
    assert_eq!(audit.wait_exit(T).await?, Some(0), "{}", audit.log());
    assert_eq!(rows(pid).await?, 0, "a clean stop removes the instance's heartbeats: {}", audit.log());
    let mut killed = Proc::spawn("qtg-audit", &db.url, &[]).await?;
    let kpid = killed.pid().unwrap_or_default() as i64;
    // One row per worker of the binary: audit_outbox_promoter and outbox_retention.
    wait_until("the second qtg-audit's heartbeats", T, || async { Ok(rows(kpid).await? == 2) }).await?;
    killed.signal("KILL");
    killed.wait_exit(T).await?;
    assert_eq!(rows(kpid).await?, 2, "a killed instance's rows stay, to read as stale");
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// The balance chart's view: the window cut into `limit` intervals, per account the last
/// snapshot of each, whatever the snapshot rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_history_is_spread_over_its_window() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let viewer = api.key("watcher", "viewer").await?;
    // 600 snapshots a minute apart over the last 10 hours, the newest 30 s old.
    sqlx::query(
        "INSERT INTO balance_snapshots (venue_key, account, asset, free, locked, source, as_of)
         SELECT 'sim_a', 'sim_a', 'USDT', m, 0, 'worker', now() - interval '30 seconds' - make_interval(mins => m)
         FROM generate_series(0, 599) AS m",
    )
    .execute(&db.pool)
    .await?;
    let since = (chrono::Utc::now() - chrono::Duration::hours(10)).to_rfc3339();
    let q = |extra: &str| {
        format!("/v3/balances/history?venue=sim_a&asset=USDT&limit=20&since={}{extra}", urlencode(&since))
    };
    let plain = api.ok("GET", &q(""), &viewer, None, 200).await?;
    let rows = plain["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 20);
    assert_eq!(rows[19]["free"], "580", "without spread: the first 20 of the window");
    let spread = api.ok("GET", &q("&spread=true"), &viewer, None, 200).await?;
    let rows = spread["items"].as_array().cloned().unwrap_or_default();
    assert!((19..=21).contains(&rows.len()), "one per interval: {}", rows.len());
    assert_eq!(rows.last().map(|r| r["free"].clone()), Some(json!("0")), "the newest snapshot closes the chart");
    let first: i64 = rows[0]["free"].as_str().unwrap_or_default().parse()?;
    assert!(first >= 560, "the first interval's last snapshot: {first}");
    let times: Vec<&str> = rows.iter().filter_map(|r| r["as_of"].as_str()).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "oldest first");
    let (status, _) = api.call("GET", "/v3/balances/history?venue=sim_a&asset=USDT&spread=true", &viewer, None).await?;
    assert_eq!(status, 400, "spread needs since");
    drop(api);
    db.drop_db().await;
    Ok(())
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}
