//! The movement lifecycle end to end, through HTTP only, against separately started
//! processes: qtg-api, two qtg-dispatchers, two qtg-observers and qtg-recovery on one fresh
//! database with the sim lanes.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};
use sqlx::Row;

const CALLBACK: &str = "http://callbacks.invalid/callbacks";

fn action(key: &str, sim: Value) -> Value {
    json!({
        "node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
        "config": {"sim": sim}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn movements_run_to_their_end_states_across_separate_workers() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let recovery_env: Vec<(&str, &str)> = fast_recovery().into_iter().collect();
    let mut workers = Vec::new();
    for _ in 0..2 {
        // The grace is a shared setting: the dispatcher times an UNKNOWN submit with it.
        workers.push(Proc::spawn("qtg-dispatcher", &db.url, &recovery_env).await?);
        workers.push(Proc::spawn("qtg-observer", &db.url, &[]).await?);
    }
    workers.push(Proc::spawn("qtg-recovery", &db.url, &recovery_env).await?);
    for w in &workers {
        w.wait_field("admin_addr", Duration::from_secs(30)).await?;
    }
    let keys = Keys::create(&api).await?;

    let mut d = action("d", json!({}));
    d["config"]["from_b"] = json!("$ref:b.txid");
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.diamond",
            "nodes": [
                action("a", json!({"provider_refs": {"txid": "0xa"}})),
                action("b", json!({
                    "provider_refs": {"txid": "0xb", "b_only": 1}, "observe_polls": 2, "retry_after_seconds": 0.2
                })),
                action("c", json!({"provider_refs": {"c_only": 2}})),
                d,
            ],
            "edges": [
                {"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "b", "to": "d"}, {"from": "c", "to": "d"}
            ],
        }),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.unknown", "nodes": [action("u", json!({"submit": "unknown"}))]}),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.fail", "nodes": [action("f", json!({"preflight": "fail"}))]}),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.after_effect",
            "nodes": [
                action("x", json!({})),
                {
                    "node_key": "y", "node_kind": "observe", "action_type": "deposit_observe",
                    "executor_key": "exec.sim.observe", "config": {"sim": {"observe": "fail"}}
                },
            ],
            "edges": [{"from": "x", "to": "y"}],
        }),
    )
    .await?;
    let mut signed = action("s", json!({}));
    signed["signing_required"] = json!(true);
    signed["signer_key"] = json!("signer.sim");
    install_template(&api, &keys, json!({"template_key": "t.sign", "nodes": [signed]})).await?;

    let diamond = start_movement(&api, &keys, "t.diamond", "m-diamond", Some(CALLBACK)).await?;
    let unknown = start_movement(&api, &keys, "t.unknown", "m-unknown", Some(CALLBACK)).await?;
    let fail = start_movement(&api, &keys, "t.fail", "m-fail", Some(CALLBACK)).await?;
    let after = start_movement(&api, &keys, "t.after_effect", "m-after", Some(CALLBACK)).await?;
    let sign = start_movement(&api, &keys, "t.sign", "m-sign", Some(CALLBACK)).await?;
    let t = Duration::from_secs(60);
    let r = &keys.requester;

    // Fan-out / fan-in with $ref.
    let m = wait_state(&api, r, &diamond, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let times = sqlx::query(
        "SELECT node_key, started_at, completed_at FROM movement_request_nodes WHERE request_id = $1::uuid \
         ORDER BY node_key",
    )
    .bind(&diamond)
    .fetch_all(&db.pool)
    .await?;
    let at = |k: &str, col: &str| -> chrono::DateTime<chrono::Utc> {
        times.iter().find(|r| r.get::<String, _>("node_key") == k).unwrap().get(col)
    };
    assert!(at("d", "started_at") >= at("b", "completed_at"), "fan-in node started before b completed");
    assert!(at("d", "started_at") >= at("c", "completed_at"), "fan-in node started before c completed");
    let payload: Value = sqlx::query_scalar(
        "SELECT a.payload FROM artifacts a JOIN movement_request_nodes n ON n.id = a.request_node_id
         WHERE n.request_id = $1::uuid AND n.node_key = 'd' AND a.kind = 'prepared_action'",
    )
    .bind(&diamond)
    .fetch_one(&db.pool)
    .await?;
    assert!(payload["payload"].as_str().unwrap().contains(r#""from_b":"0xb""#), "$ref not resolved: {payload}");
    assert!(node(&m, "b")["observe_count"].as_i64().unwrap() >= 3, "b was polled while OBSERVING");

    // submit unknown → UNKNOWN → recovery → COMPLETED, one venue order.
    let m = wait_state(&api, r, &unknown, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let path: Vec<String> = sqlx::query_scalar(
        "SELECT e.to_state FROM node_events e JOIN movement_request_nodes n ON n.id = e.request_node_id
         WHERE n.request_id = $1::uuid AND e.kind = 'transition' ORDER BY e.id",
    )
    .bind(&unknown)
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(path, ["READY", "PREPARING", "SUBMITTING", "UNKNOWN", "SUBMITTED", "COMPLETED"]);
    assert!(
        node(&m, "u")["provider_refs"].get("__submit_attempt_pending").is_none(),
        "recovery evidence clears the marker"
    );

    // A failing node fails the movement.
    let m = wait_state(&api, r, &fail, &["FAILED", "COMPLETED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "FAILED");
    assert_eq!(node(&m, "f")["node_state"], "FAILED");
    assert_eq!(node(&m, "f")["error_code"], "SIM_PREFLIGHT_FAILED");

    // A failure after a completed side effect needs a person.
    let m = wait_state(&api, r, &after, &["MANUAL_INTERVENTION", "FAILED", "COMPLETED"], t).await?;
    assert_eq!(m["request_state"], "MANUAL_INTERVENTION", "{m:#}");
    assert_eq!(node(&m, "x")["node_state"], "COMPLETED");
    assert_eq!(node(&m, "y")["node_state"], "FAILED");

    // Signing goes through AWAITING_SIGNATURE with a sign result stored.
    let m = wait_state(&api, r, &sign, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let awaited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM node_events e JOIN movement_request_nodes n ON n.id = e.request_node_id
         WHERE n.request_id = $1::uuid AND e.to_state = 'AWAITING_SIGNATURE'",
    )
    .bind(&sign)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(awaited, 1);
    let signed_artifacts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM artifacts WHERE request_id = $1::uuid AND kind = 'sign_result'")
            .bind(&sign)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(signed_artifacts, 1);

    // Every transition is in audit_outbox and in the callback outbox, sequenced.
    for id in [&diamond, &unknown, &fail, &after, &sign] {
        let row = sqlx::query(
            "SELECT
               (SELECT count(*) FROM node_events WHERE request_id = $1::uuid AND kind = 'transition') AS \
                   node_transitions,
               (SELECT count(*) FROM audit_outbox WHERE movement_id = $1::uuid AND action = \
                   'node.transition') AS node_audits,
               (SELECT count(*) FROM movement_callback_outbox WHERE request_id = $1::uuid AND event_type = \
                   'node_state_changed') AS node_callbacks,
               (SELECT count(*) FROM audit_outbox WHERE movement_id = $1::uuid AND action = 'movement.transition') \
                   AS request_audits,
               (SELECT count(*) FROM movement_callback_outbox WHERE request_id = $1::uuid AND event_type = \
                   'request_state_changed') AS request_callbacks,
               (SELECT count(*) FROM movement_callback_outbox WHERE request_id = $1::uuid) AS callbacks,
               (SELECT count(DISTINCT sequence) FROM movement_callback_outbox WHERE request_id = $1::uuid) AS sequences,
               (SELECT max(sequence) FROM movement_callback_outbox WHERE request_id = $1::uuid) AS max_sequence",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await?;
        let n = |c: &str| row.get::<Option<i64>, _>(c).unwrap_or(0);
        assert!(n("node_transitions") > 0);
        assert_eq!(n("node_transitions"), n("node_audits"), "movement {id}: node audit rows");
        assert_eq!(n("node_transitions"), n("node_callbacks"), "movement {id}: node callbacks");
        assert!(n("request_audits") >= 2, "movement {id}: approve + at least one more request transition");
        assert_eq!(n("request_audits"), n("request_callbacks"), "movement {id}: request callbacks");
        assert_eq!(n("callbacks"), n("sequences"), "movement {id}: sequences are unique");
        assert_eq!(n("callbacks"), n("max_sequence"), "movement {id}: sequences are 1..N");
    }
    let attention: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM movement_callback_outbox WHERE request_id = $1::uuid AND event_type = \
         'request_attention'",
    )
    .bind(&after)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(attention, 1, "MANUAL_INTERVENTION sends request_attention");

    // Never more than one venue execution per node, across all its attempts (retries
    // included), counted from the venue's submit calls.
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT request_node_id FROM sim_submit_calls WHERE outcome = 'executed'
                               GROUP BY 1 HAVING count(*) > 1) d",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(doubled, 0);

    // SIGTERM: every worker finishes and exits 0.
    for w in &mut workers {
        w.signal("TERM");
        assert_eq!(w.wait_exit(Duration::from_secs(20)).await?, Some(0), "{} exit code; log:\n{}", w.name, w.log());
    }
    drop(api);
    db.drop_db().await;
    Ok(())
}
