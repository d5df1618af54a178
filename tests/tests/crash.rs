//! A dispatcher killed (SIGKILL) while its submit is in flight: the node keeps its intent
//! marker, recovery reconciles it by idempotency key after the grace, and the venue sees one
//! order. A dispatcher told to stop (SIGTERM) mid-submit finishes the item and exits 0.

use std::time::{Duration, Instant};

use qtg_tests::*;
use serde_json::json;

async fn wait_for_venue_order(db: &TestDb, movement: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sim_ledger l JOIN movement_request_nodes n ON n.id = l.request_node_id
             WHERE n.request_id = $1::uuid AND n.node_state = 'SUBMITTING'",
        )
        .bind(movement)
        .fetch_one(&db.pool)
        .await?;
        if n > 0 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the submit never reached the venue");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh database, the API, the principals and a one-node template whose submit takes
/// `delay_ms` after the venue has the order.
async fn slow_template(delay_ms: u64) -> anyhow::Result<(TestDb, Api, Keys)> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.slow",
            "nodes": [{"node_key": "w", "node_kind": "action", "action_type": "transfer",
                       "executor_key": "exec.sim.transfer", "config": {"sim": {"delay_ms": delay_ms}}}],
        }),
    )
    .await?;
    Ok((db, api, keys))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_dispatcher_is_recovered_without_a_second_submit() -> anyhow::Result<()> {
    let (db, api, keys) = slow_template(5000).await?;
    // A 6 s deadline nests under a 7 s grace (submit window 6.4 s + 0.2 s skew).
    let times = [("MG_EXECUTOR_TIMEOUT_MS", "6000"), ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "7")];
    let mut dispatcher = Proc::spawn("qtg-dispatcher", &db.url, &times).await?;
    let observer = Proc::spawn("qtg-observer", &db.url, &times).await?;
    let recovery =
        Proc::spawn("qtg-recovery", &db.url, &[times[0], times[1], ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.5")])
            .await?;

    let id = start_movement(&api, &keys, "t.slow", "crash-1", None).await?;
    wait_for_venue_order(&db, &id).await?;
    dispatcher.signal("KILL");
    dispatcher.wait_exit(Duration::from_secs(10)).await?;
    let m = api.ok("GET", &format!("/v3/movements/{id}"), &keys.requester, None, 200).await?;
    assert_eq!(node(&m, "w")["node_state"], "SUBMITTING");
    assert_eq!(node(&m, "w")["provider_refs"]["__submit_attempt_pending"], true);
    let d = api.ok("GET", &format!("/v3/movements/{id}/nodes/w/diagnosis"), &keys.operator, None, 200).await?;
    assert_eq!(d["case"], "C1", "a dead dispatcher's submit is recovery's to decide: {d:#}");

    let m = wait_state(
        &api,
        &keys.requester,
        &id,
        &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\nrecovery log:\n{}", recovery.log());
    let w = node(&m, "w");
    assert_eq!(w["attempt_no"], 1, "no new attempt was made");
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls WHERE request_node_id = $1::uuid")
        .bind(w["id"].as_str().unwrap())
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(calls, 1, "the venue got exactly one submit call (not only one deduplicated order)");
    let recovered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM node_events WHERE request_node_id = $1::uuid AND method = 'recover'")
            .bind(w["id"].as_str().unwrap())
            .fetch_one(&db.pool)
            .await?;
    assert!(recovered >= 1, "recovery reconciled it");
    drop((observer, recovery, api));
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_the_submit_in_hand_then_exits_zero() -> anyhow::Result<()> {
    let (db, api, keys) = slow_template(2000).await?;
    let mut dispatcher = Proc::spawn("qtg-dispatcher", &db.url, &[]).await?;
    let id = start_movement(&api, &keys, "t.slow", "term-1", None).await?;
    wait_for_venue_order(&db, &id).await?;
    dispatcher.signal("TERM");
    assert_eq!(dispatcher.wait_exit(Duration::from_secs(20)).await?, Some(0), "log:\n{}", dispatcher.log());
    let m = api.ok("GET", &format!("/v3/movements/{id}"), &keys.requester, None, 200).await?;
    assert_eq!(node(&m, "w")["node_state"], "SUBMITTED", "the item in hand was finished: {m:#}");
    assert!(node(&m, "w")["provider_refs"].get("__submit_attempt_pending").is_none());
    drop(api);
    db.drop_db().await;
    Ok(())
}
