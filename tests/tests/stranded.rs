//! Never stranded, never stalled (issue 25): one item's failure stays with that item. A worker
//! whose loop sleeps for hours is alive; a dead process is seen dead within a few heartbeat
//! periods; one slow callback receiver delays no other; a nonce reserved by a node that failed
//! before broadcasting is given back at once; an executor's answers are bounded; a retired
//! template version takes no new movement.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

const SECRET: &str = "whsec-stranded-0001";

/// A receiver on its own loopback host (`127.0.0.2`, another host than the fast ones) that
/// takes `delay` to answer each request; counts requests and the most it ever held at once.
#[derive(Clone, Default)]
struct SlowReceiver {
    requests: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

impl SlowReceiver {
    async fn serve(&self, delay: Duration) -> anyhow::Result<String> {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move || {
                let me = me.clone();
                async move {
                    me.requests.fetch_add(1, Ordering::SeqCst);
                    let now = me.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    me.most_at_once.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    me.in_flight.fetch_sub(1, Ordering::SeqCst);
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(url)
    }
}

async fn one_node_template(api: &Api, keys: &Keys, key: &str) -> anyhow::Result<()> {
    install_template(
        api,
        keys,
        json!({"template_key": key, "nodes": [
            {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await
}

async fn outbox_states(db: &TestDb, movement: &str) -> anyhow::Result<Vec<(String, Option<String>)>> {
    Ok(sqlx::query_as(
        "SELECT status, last_error FROM movement_callback_outbox WHERE request_id = $1::uuid ORDER BY sequence",
    )
    .bind(movement)
    .fetch_all(&db.pool)
    .await?)
}

fn worker_rows<'a>(workers: &'a Value, name: &str) -> Vec<&'a Value> {
    workers["items"].as_array().map(|i| i.iter().filter(|w| w["worker"] == name).collect()).unwrap_or_default()
}

/// Liveness comes from the process, not from a worker's loop: a worker whose interval is an
/// hour stays fresh and ready between its ticks, the view says when it last ticked and when
/// it is next due, and a SIGKILLed process is stale within a few heartbeat periods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_follow_the_process_not_its_loop() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let beat = [("MG_HEARTBEAT_INTERVAL_SECONDS", "0.5"), ("MG_WORKER_STALE_SECONDS", "3")];
    let api = Api::start(&db.url, &beat).await?;
    let viewer = api.key("auditor", "viewer").await?;
    let mut env = beat.to_vec();
    env.extend([
        ("MG_EXPIRATION_CHECK_INTERVAL_SECONDS", "3600"),
        ("MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", "3600"),
    ]);
    let mut worker = Proc::spawn("qtg-expiry", &db.url, &env).await?;
    let admin = worker.wait_field("admin_addr", Duration::from_secs(30)).await?;
    wait_until("the first tick", Duration::from_secs(30), || async {
        Ok(worker.ticks("expiration_checker").await? >= 1)
    })
    .await?;
    // Well past the stale threshold, with the loops asleep for the hour.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let ready = http_client().get(format!("http://{admin}/readyz")).send().await?;
    assert_eq!(ready.status().as_u16(), 200, "{}", ready.text().await?);
    let workers = api.ok("GET", "/v3/workers", &viewer, None, 200).await?;
    for name in ["expiration_checker", "template_proposal_expiration"] {
        let rows = worker_rows(&workers, name);
        assert_eq!(rows.len(), 1, "{workers:#}");
        let row = rows[0];
        assert_eq!(row["stale"], false, "a loop asleep for an hour is not a dead process: {row:#}");
        assert!(row["age_seconds"].as_f64().is_some_and(|a| a < 3.0), "{row:#}");
        let last: chrono::DateTime<chrono::Utc> = serde_json::from_value(row["last_tick_at"].clone())?;
        let next: chrono::DateTime<chrono::Utc> = serde_json::from_value(row["next_tick_at"].clone())?;
        let gap = (next - last).num_seconds();
        assert!((3000..=4000).contains(&gap), "next tick due about an hour after the last: {row:#}");
    }
    assert_eq!(worker.ticks("expiration_checker").await?, 1, "the loop itself slept");

    worker.signal("KILL");
    worker.wait_exit(Duration::from_secs(10)).await?;
    wait_until("the killed process reads stale", Duration::from_secs(30), || async {
        let workers = api.ok("GET", "/v3/workers", &viewer, None, 200).await?;
        Ok(worker_rows(&workers, "expiration_checker").iter().all(|r| r["stale"] == true))
    })
    .await?;
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// A slow receiver (20 s an answer) holds only its own callbacks: another requester's
/// callbacks, enqueued after it, are delivered at once, and the slow one never has more than
/// `MG_CALLBACK_MAX_IN_FLIGHT_PER_RECEIVER` requests open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_callback_receiver_delays_no_other() -> anyhow::Result<()> {
    let slow = SlowReceiver::default();
    let slow_url = slow.serve(Duration::from_secs(20)).await?;
    let fast = Hooks::default();
    let fast_url = fast.serve().await?;
    let db = TestDb::new().await?;
    let env = [
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_SECRET", SECRET),
        ("MG_CALLBACK_TIMEOUT_SECONDS", "30"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ];
    let api = Api::all_in_one(&db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    one_node_template(&api, &keys, "t.cb").await?;
    // The slow receiver's movement first: its callbacks are the oldest in the outbox.
    let slow_id = start_movement(&api, &keys, "t.cb", "slow-1", Some(&slow_url)).await?;
    wait_state(&api, &keys.operator, &slow_id, &["COMPLETED"], Duration::from_secs(60)).await?;
    let fast_id = start_movement(&api, &keys, "t.cb", "fast-1", Some(&fast_url)).await?;
    wait_state(&api, &keys.operator, &fast_id, &["COMPLETED"], Duration::from_secs(60)).await?;
    wait_until("the other receiver's callbacks, while the slow one still answers", Duration::from_secs(15), || async {
        Ok(outbox_states(&db, &fast_id).await?.iter().all(|(s, _)| s == "sent"))
    })
    .await?;
    let slow_rows = outbox_states(&db, &slow_id).await?;
    assert!(slow_rows.len() >= 4, "{slow_rows:?}");
    assert!(slow_rows.iter().any(|(s, _)| s == "pending"), "the slow receiver is still behind: {slow_rows:?}");
    let fast_seen = fast.all().iter().filter(|h| h["movement_id"] == fast_id.as_str()).count();
    assert_eq!(fast_seen, outbox_states(&db, &fast_id).await?.len(), "every event of the other movement arrived");
    assert!(slow.most_at_once.load(Ordering::SeqCst) <= 2, "at most two requests open at the slow receiver");
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// A receiver that never answers, under a short executor deadline (so a short
/// idle-in-transaction timeout): each send ends at its deadline, its outcome is recorded (no
/// transaction was open across it), and the rows reach the dead-letter queue on schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_is_dead_lettered_on_schedule() -> anyhow::Result<()> {
    let silent = SlowReceiver::default();
    let silent_url = silent.serve(Duration::from_secs(3600)).await?;
    let db = TestDb::new().await?;
    let env = [
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_SECRET", SECRET),
        ("MG_CALLBACK_TIMEOUT_SECONDS", "2"),
        ("MG_CALLBACK_MAX_ATTEMPTS", "2"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
        // Lease 3.4 s, idle-in-transaction timeout 1.7 s: below one send's deadline.
        ("MG_EXECUTOR_TIMEOUT_MS", "1000"),
        ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "5"),
    ];
    let api = Api::all_in_one(&db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    one_node_template(&api, &keys, "t.cb").await?;
    let id = start_movement(&api, &keys, "t.cb", "silent-1", Some(&silent_url)).await?;
    wait_state(&api, &keys.operator, &id, &["COMPLETED"], Duration::from_secs(60)).await?;
    wait_until("every row dead-lettered", Duration::from_secs(90), || async {
        let rows = outbox_states(&db, &id).await?;
        Ok(!rows.is_empty() && rows.iter().all(|(s, _)| s == "dlq"))
    })
    .await?;
    let rows = outbox_states(&db, &id).await?;
    assert!(
        rows.iter().all(|(_, e)| e.as_deref().is_some_and(|e| e.contains("no answer within"))),
        "each ends with why: {rows:?}"
    );
    let attempts: Vec<i32> =
        sqlx::query_scalar("SELECT attempts FROM movement_callback_outbox WHERE request_id = $1::uuid")
            .bind(&id)
            .fetch_all(&db.pool)
            .await?;
    assert!(attempts.iter().all(|a| *a == 2), "two attempts each, no more: {attempts:?}");
    assert!(!api.proc.log().contains("idle-in-transaction"), "no transaction was open across a send");
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// Tightened limits bind every movement: approving version 2 retires version 1, which then
/// takes no new movement or capital transfer; a movement created on version 1 before that is
/// held to the stricter of both versions' limits at approval and at its first claim; an admin
/// can retire the current version by hand, audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_template_version_binds_no_new_movement_and_old_ones_meet_the_new_limits() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let plan_node =
        json!({"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"});
    let template =
        |cap: &str| json!({"template_key": "t.lim", "risk_controls": {"hard_cap": cap}, "nodes": [plan_node.clone()]});
    install_template(&api, &keys, template("1000")).await?;
    let create = |version: Option<i32>, amount: &str, idem: &str| {
        let mut body = json!({"template_key": "t.lim", "intent": {"asset": "USDC", "amount": amount,
            "source": "venue-a", "destination": "0xdest"}, "idempotency_key": idem});
        if let Some(v) = version {
            body["template_version"] = json!(v);
        }
        body
    };
    // Created on version 1 while it is current: one waits for approval, one is approved.
    let pending =
        api.ok("POST", "/v3/movements", &keys.requester, Some(create(None, "500", "old-pending")), 201).await?;
    let approved =
        api.ok("POST", "/v3/movements", &keys.requester, Some(create(None, "500", "old-approved")), 201).await?;
    let approved_id = approved["id"].as_str().unwrap().to_string();
    api.ok("POST", &format!("/v3/movements/{approved_id}/approve"), &keys.approver, None, 200).await?;

    // Version 2 lowers the cap; approving it retires version 1.
    let p = api.ok("POST", "/v3/template-proposals", &keys.operator, Some(template("100")), 201).await?;
    let review = api
        .ok(
            "POST",
            &format!("/v3/template-proposals/{}/approve", p["id"].as_str().unwrap()),
            &api.admin_key,
            Some(json!({"reason": "lower the cap"})),
            200,
        )
        .await?;
    assert_eq!(review["retired_versions"], json!([1]), "{review}");
    let t = api.ok("GET", "/v3/templates/t.lim", &keys.requester, None, 200).await?;
    let v1 = t["versions"].as_array().unwrap().iter().find(|v| v["version"] == 1).cloned().unwrap_or_default();
    assert!(v1["retired_at"].is_string(), "{t:#}");

    let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(create(Some(1), "500", "escape"))).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("INVALID_STATE")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap_or_default().contains("retired"), "{b}");
    let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(create(None, "500", "current"))).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (422, Some("RISK_LIMIT_EXCEEDED")), "{b}");
    let transfer = json!({"from": "venue-a", "to": "0xdest", "asset": "USDC", "amount": "50", "reason": "rebalance",
                          "template_key": "t.lim", "template_version": 1, "idempotency_key": "ct-escape"});
    let (s, b) = api.call("POST", "/v3/capital-transfers", &keys.requester, Some(transfer)).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("INVALID_STATE")), "a capital transfer too: {b}");

    // The movement waiting on version 1 is held to version 2's cap at its approval.
    let pending_id = pending["id"].as_str().unwrap();
    let (s, b) = api.call("POST", &format!("/v3/movements/{pending_id}/approve"), &keys.approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (422, Some("RISK_LIMIT_EXCEEDED")), "{b}");
    // The one approved before is held to it at its first claim: nothing is submitted.
    let _dispatcher = Proc::spawn("qtg-dispatcher", &db.url, &[("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2")]).await?;
    let m = wait_state(&api, &keys.requester, &approved_id, &["FAILED", "COMPLETED"], Duration::from_secs(30)).await?;
    assert_eq!(node(&m, "a")["error_code"], "RISK_LIMIT_EXCEEDED", "{m:#}");
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls").fetch_one(&db.pool).await?;
    assert_eq!(calls, 0, "nothing reached the venue");

    // An admin retires the current version by hand: no version takes new movements now.
    let (s, _) = api
        .call("POST", "/v3/templates/t.lim/versions/2/actions/retire", &keys.operator, Some(json!({"reason": "x"})))
        .await?;
    assert_eq!(s, 403, "an admin action");
    let (s, b) = api
        .call("POST", "/v3/templates/t.lim/versions/2/actions/retire", &api.admin_key, Some(json!({"reason": " "})))
        .await?;
    assert_eq!(s, 400, "a reason is required: {b}");
    api.ok(
        "POST",
        "/v3/templates/t.lim/versions/2/actions/retire",
        &api.admin_key,
        Some(json!({"reason": "venue offboarded"})),
        200,
    )
    .await?;
    let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(create(None, "50", "after"))).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("INVALID_STATE")), "{b}");
    let (s, _) = api
        .call("POST", "/v3/templates/t.lim/versions/2/actions/retire", &api.admin_key, Some(json!({"reason": "again"})))
        .await?;
    assert_eq!(s, 409, "already retired");
    let retires: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE action = 'template.version.retire' AND entity_id = 't.lim'",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(retires, 2, "one audit row per retirement");
    drop(api);
    db.drop_db().await;
    Ok(())
}
