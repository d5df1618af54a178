//! Leased dispatch (docs/architecture.md §6, "The lease and the fence"), against the real
//! binaries: no lock is held across a call, so fan-out branches prepare in parallel and an
//! operator's cancel wins during a slow prepare; a dispatcher killed or frozen while preparing
//! loses its lease to another one; a dispatcher frozen right after the arm is refused by the
//! venue's fence once recovery voided its key. Every count is of submit *calls* that reached
//! the sim venue (`sim_submit_calls`), not of deduplicated ledger rows.

use std::time::{Duration, Instant};

use qtg_tests::*;
use serde_json::{json, Value};
use sqlx::PgPool;

/// A 1.5 s call deadline: a 1.9 s submit window, a 4.9 s lease, and a 3 s grace above both.
const SHORT: [(&str, &str); 3] = [
    ("MG_EXECUTOR_TIMEOUT_MS", "1500"),
    ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "3"),
    ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"),
];

async fn node_id(pool: &PgPool, movement: &str, key: &str) -> anyhow::Result<uuid::Uuid> {
    Ok(sqlx::query_scalar("SELECT id FROM movement_request_nodes WHERE request_id = $1::uuid AND node_key = $2")
        .bind(movement)
        .bind(key)
        .fetch_one(pool)
        .await?)
}

async fn wait_node_state(pool: &PgPool, node: uuid::Uuid, state: &str, timeout: Duration) -> anyhow::Result<()> {
    let sql = format!("SELECT node_state = '{state}' FROM movement_request_nodes WHERE id = $1");
    wait_db(pool, &sql, node, timeout).await
}

/// `(attempt_no, outcome)` of every submit call the sim venue received for `node`.
async fn submit_calls(pool: &PgPool, node: uuid::Uuid) -> anyhow::Result<Vec<(i32, String)>> {
    Ok(sqlx::query_as("SELECT attempt_no, outcome FROM sim_submit_calls WHERE request_node_id = $1 ORDER BY id")
        .bind(node)
        .fetch_all(pool)
        .await?)
}

async fn ledger_rows(pool: &PgPool, node: uuid::Uuid) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM sim_ledger WHERE request_node_id = $1")
        .bind(node)
        .fetch_one(pool)
        .await?)
}

async fn events(pool: &PgPool, node: uuid::Uuid, outcome: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM node_events WHERE request_node_id = $1 AND outcome = $2")
        .bind(node)
        .bind(outcome)
        .fetch_one(pool)
        .await?)
}

fn sim_node(key: &str, sim: Value) -> Value {
    json!({"node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
           "config": {"sim": sim}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fan_out_branches_prepare_in_parallel_and_a_cancel_during_prepare_wins() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // A remote executor whose prepare takes 1.5 s, four parallel branches, four claim loops.
    let remote = start_example(&db, 4000, &[]).await?;
    let reg = remote.registry.to_string_lossy().to_string();
    let env = [
        ("MG_EXECUTOR_REGISTRY", reg.as_str()),
        ("QTG_EXAMPLE_SECRET", EXAMPLE_HMAC_SECRET),
        ("MG_EXECUTOR_TIMEOUT_MS", "4000"),
        // The seed's 2 s idle poll: the approval's NOTIFY wakes one loop, and each loop busy
        // on a slow call recruits the next.
        ("MG_DISPATCHER_CONCURRENCY", "4"),
    ];
    let api = Api::start(&db.url, &env).await?;
    let dispatcher = Proc::spawn("qtg-dispatcher", &db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    let branch = |k: &str| {
        json!({"node_key": k, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.ex.http",
               "config": {"example": {"slow": {"prepare": 1500}}}})
    };
    let branches: Vec<Value> = ["b1", "b2", "b3", "b4"].into_iter().map(branch).collect();
    install_template(&api, &keys, json!({"template_key": "t.fan", "nodes": branches})).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.slowprep", "nodes": [sim_node("n", json!({"prepare_delay_ms": 3000}))]}),
    )
    .await?;

    let fan = start_movement(&api, &keys, "t.fan", "fan-1", None).await?;
    let sql = "SELECT count(*) = 4 FROM movement_request_nodes WHERE request_id = $1 AND started_at IS NOT NULL";
    wait_db(&db.pool, sql, fan.parse()?, Duration::from_secs(30)).await?;
    let (first_claim, last_arm): (f64, f64) = sqlx::query_as(
        "SELECT extract(epoch FROM min(created_at) FILTER (WHERE to_state = 'PREPARING'))::float8,
                extract(epoch FROM max(created_at) FILTER (WHERE to_state = 'SUBMITTING'))::float8
         FROM node_events WHERE request_id = $1::uuid AND kind = 'transition'",
    )
    .bind(&fan)
    .fetch_one(&db.pool)
    .await?;
    let spread = last_arm - first_claim;
    // Serialised on the movement, four 1.5 s prepares take at least 6 s; in parallel about 1.5
    // (more on a loaded machine). Under 5 s, they overlapped: this is a structure, not a speed.
    assert!(spread < 5.0, "four branches armed {spread:.2} s after the first claim (4 × 1.5 s would be serialised)");

    // A cancel while the node is PREPARING (a 3 s prepare in flight) answers at once and wins.
    let id = start_movement(&api, &keys, "t.slowprep", "cancel-1", None).await?;
    let node = node_id(&db.pool, &id, "n").await?;
    wait_node_state(&db.pool, node, "PREPARING", Duration::from_secs(20)).await?;
    let asked = Instant::now();
    let (status, body) = api
        .call(
            "POST",
            &format!("/v3/movements/{id}/actions/cancel"),
            &keys.operator,
            Some(json!({"reason": "changed our mind"})),
        )
        .await?;
    let took = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(took < Duration::from_secs(2), "the cancel waited {took:?} on a call in flight");
    // The prepare finishes, the arm matches nothing, nothing is sent.
    wait_db(
        &db.pool,
        "SELECT count(*) > 0 FROM node_events WHERE request_node_id = $1 AND outcome = 'claim_lost'",
        node,
        Duration::from_secs(15),
    )
    .await?;
    assert_eq!(request_state(&db.pool, id.parse()?).await?, "CANCELLED");
    assert_eq!(node_row(&db.pool, id.parse()?, "n").await?.0, "CANCELLED");
    assert!(submit_calls(&db.pool, node).await?.is_empty(), "no submit call reached the venue");
    drop((dispatcher, api, remote));
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_dispatchers_lease_expires_and_another_dispatches_once() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &SHORT).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.p", "nodes": [sim_node("n", json!({"prepare_delay_ms": 1000}))]}),
    )
    .await?;
    let mut first = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    let id = start_movement(&api, &keys, "t.p", "kill-1", None).await?;
    let node = node_id(&db.pool, &id, "n").await?;
    wait_node_state(&db.pool, node, "PREPARING", Duration::from_secs(20)).await?;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(10)).await?;
    let armed_before: bool =
        sqlx::query_scalar("SELECT started_at IS NOT NULL FROM movement_request_nodes WHERE id = $1")
            .bind(node)
            .fetch_one(&db.pool)
            .await?;
    assert!(!armed_before, "killed while preparing: nothing was armed");

    let second = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    let observer = Proc::spawn("qtg-observer", &db.url, &SHORT).await?;
    let m = wait_state(
        &api,
        &keys.requester,
        &id,
        &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
        Duration::from_secs(40),
    )
    .await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", second.log());
    assert_eq!(qtg_tests::node(&m, "n")["attempt_no"], 1);
    assert_eq!(events(&db.pool, node, "lease_expired").await?, 1, "the re-claim is a node event");
    assert_eq!(submit_calls(&db.pool, node).await?, vec![(1, "executed".to_string())], "exactly one submit call");
    assert_eq!(ledger_rows(&db.pool, node).await?, 1);
    drop((second, observer, api));
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_frozen_after_the_arm_is_refused_by_the_fence() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &SHORT).await?;
    let keys = Keys::create(&api).await?;
    // The submit call reaches the venue 1 s after it leaves the dispatcher (on the wire).
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.hold", "nodes": [sim_node("n", json!({"submit_hold_ms": 1000}))]}),
    )
    .await?;
    let frozen = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    let recovery =
        Proc::spawn("qtg-recovery", &db.url, &[SHORT[0], SHORT[1], ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.5")])
            .await?;
    let id = start_movement(&api, &keys, "t.hold", "freeze-1", None).await?;
    let node = node_id(&db.pool, &id, "n").await?;
    // Frozen once the call has left: the arm is logged just before the stored hash is checked
    // and the call spawned; the venue sees the call only 1 s later.
    frozen.wait_field("submit_by", Duration::from_secs(20)).await?;
    tokio::time::sleep(Duration::from_millis(250)).await;
    frozen.signal("STOP");
    assert_eq!(submit_calls(&db.pool, node).await?, vec![], "frozen before the venue saw the call");

    // Recovery, past submit_by + skew, finds nothing at the venue and voids the key.
    let m = wait_state(
        &api,
        &keys.requester,
        &id,
        &["FAILED", "MANUAL_INTERVENTION", "COMPLETED"],
        Duration::from_secs(30),
    )
    .await?;
    assert_eq!(m["request_state"], "FAILED", "{m:#}\n{}", recovery.log());
    assert_eq!(qtg_tests::node(&m, "n")["error_code"], "SIM_NOT_FOUND");
    // The operator retries: attempt 2 runs on another dispatcher and executes.
    let other = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    api.ok(
        "POST",
        &format!("/v3/movements/{id}/nodes/n/actions/retry"),
        &keys.operator,
        Some(json!({"reason": "recovery found nothing"})),
        200,
    )
    .await?;
    let sql = "SELECT count(*) > 0 FROM sim_submit_calls WHERE request_node_id = $1 AND attempt_no = 2";
    wait_db(&db.pool, sql, node, Duration::from_secs(20)).await?;

    // Thawed, the first dispatcher's attempt 1 reaches the venue — and is refused. (Had the
    // freeze come between the arm and the call's start on a busy machine, the thawed
    // dispatcher sends nothing: the submit window has closed. Either way one execution.)
    frozen.signal("CONT");
    let sql = "SELECT (SELECT count(*) > 0 FROM sim_submit_calls WHERE request_node_id = $1 AND attempt_no = 1)
                   OR (SELECT count(*) > 0 FROM node_events WHERE request_node_id = $1 AND outcome = 'not_sent')";
    wait_db(&db.pool, sql, node, Duration::from_secs(30))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", frozen.log()))?;
    let calls = submit_calls(&db.pool, node).await?;
    let on_the_wire = calls.len() > 1;
    let expected = [(2, "executed".to_string()), (1, "refused_void".to_string())];
    assert_eq!(calls, expected[..if on_the_wire { 2 } else { 1 }], "the venue executed exactly once");
    assert_eq!(ledger_rows(&db.pool, node).await?, 1);
    // The frozen dispatcher's answer for attempt 1 is stale: it changes nothing.
    if on_the_wire {
        wait_db(
            &db.pool,
            "SELECT count(*) > 0 FROM node_events WHERE request_node_id = $1 AND outcome = 'stale'",
            node,
            Duration::from_secs(20),
        )
        .await?;
    }
    let (state, _, _, attempt) = node_row(&db.pool, id.parse()?, "n").await?;
    assert_eq!((state.as_str(), attempt), ("SUBMITTED", 2));
    drop((frozen, other, recovery, api));
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_frozen_while_preparing_past_its_lease_arms_nothing() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &SHORT).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.p", "nodes": [sim_node("n", json!({"prepare_delay_ms": 1000}))]}),
    )
    .await?;
    let frozen = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    let id = start_movement(&api, &keys, "t.p", "freeze-2", None).await?;
    let node = node_id(&db.pool, &id, "n").await?;
    wait_node_state(&db.pool, node, "PREPARING", Duration::from_secs(20)).await?;
    frozen.signal("STOP");
    // Another dispatcher takes the node once the lease (4.9 s) has expired, and submits it.
    let other = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    wait_node_state(&db.pool, node, "SUBMITTED", Duration::from_secs(30)).await?;
    frozen.signal("CONT");
    wait_db(
        &db.pool,
        "SELECT count(*) > 0 FROM node_events WHERE request_node_id = $1 AND outcome = 'claim_lost'",
        node,
        Duration::from_secs(20),
    )
    .await?;
    assert_eq!(events(&db.pool, node, "lease_expired").await?, 1);
    assert_eq!(submit_calls(&db.pool, node).await?, vec![(1, "executed".to_string())], "exactly one submit call");
    assert_eq!(ledger_rows(&db.pool, node).await?, 1);
    let (state, _, _, attempt) = node_row(&db.pool, id.parse()?, "n").await?;
    assert_eq!((state.as_str(), attempt), ("SUBMITTED", 1));
    drop((frozen, other, api));
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_connections_bound_what_a_frozen_process_can_hold() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let dispatcher = Proc::spawn(
        "qtg-dispatcher",
        &db.url,
        &[("MG_DB_LOCK_TIMEOUT_MS", "1234"), ("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "7.5")],
    )
    .await?;
    // As the server reports them for the worker's own connections.
    assert_eq!(dispatcher.wait_field("lock_timeout_ms", Duration::from_secs(20)).await?, "1234");
    assert_eq!(dispatcher.wait_field("idle_in_transaction_session_timeout_ms", Duration::from_secs(5)).await?, "7500");
    assert_eq!(dispatcher.wait_field("synchronous_commit", Duration::from_secs(5)).await?, "on");
    let active: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = \
         'qtg-dispatcher'",
    )
    .fetch_one(&db.pool)
    .await?;
    assert!(active >= 1, "the dispatcher's connections carry its name");
    // Settings that do not nest stop the binary at start, naming the numbers.
    let mut bad = Proc::spawn(
        "qtg-dispatcher",
        &db.url,
        &[("MG_EXECUTOR_TIMEOUT_MS", "60000"), ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "30")],
    )
    .await?;
    assert_ne!(bad.wait_exit(Duration::from_secs(20)).await?, Some(0));
    assert!(bad.log().contains("MG_RECOVERY_SUBMITTING_GRACE_SECONDS"), "{}", bad.log());
    drop(dispatcher);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_effect_reported_after_the_node_failed_calls_a_person() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &SHORT).await?;
    let keys = Keys::create(&api).await?;
    // The venue executes at once, the answer takes 1 s to come back, and this venue's Recover
    // wrongly finds nothing (a lagging history): recovery fails the node meanwhile.
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.late", "nodes": [sim_node("n", json!({"delay_ms": 1000, "recover": "failed"}))]}),
    )
    .await?;
    let dispatcher = Proc::spawn("qtg-dispatcher", &db.url, &SHORT).await?;
    let recovery =
        Proc::spawn("qtg-recovery", &db.url, &[SHORT[0], SHORT[1], ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.5")])
            .await?;
    let id = start_movement(&api, &keys, "t.late", "late-1", None).await?;
    let node = node_id(&db.pool, &id, "n").await?;
    wait_db(&db.pool, "SELECT count(*) > 0 FROM sim_ledger WHERE request_node_id = $1", node, Duration::from_secs(20))
        .await?;
    dispatcher.signal("STOP");
    let m = wait_state(&api, &keys.requester, &id, &["FAILED", "MANUAL_INTERVENTION"], Duration::from_secs(30)).await?;
    assert_eq!(m["request_state"], "FAILED", "{m:#}\n{}", recovery.log());
    // The frozen dispatcher wakes with the venue's SUBMITTED: money moved after qtg gave up.
    dispatcher.signal("CONT");
    let m = wait_state(&api, &keys.requester, &id, &["MANUAL_INTERVENTION"], Duration::from_secs(20)).await?;
    let n = qtg_tests::node(&m, "n");
    assert_eq!(n["node_state"], "FAILED");
    let (_, _, refs, _) = node_row(&db.pool, id.parse()?, "n").await?;
    assert_eq!(refs["__late_effect"]["next_state"], "SUBMITTED", "{refs}");
    let attention: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE movement_id = $1::uuid AND action = 'movement.transition'
           AND data->>'to' = 'MANUAL_INTERVENTION'",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(attention, 1);
    // A node with a late effect is not retried blind.
    let (status, body) = api
        .call(
            "POST",
            &format!("/v3/movements/{id}/nodes/n/actions/retry"),
            &keys.operator,
            Some(json!({"reason": "again"})),
        )
        .await?;
    assert_eq!(status, 409, "{body}");
    drop((dispatcher, recovery, api));
    db.drop_db().await;
    Ok(())
}
