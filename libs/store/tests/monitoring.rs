//! What watches the system: executor and signer health (`qtg_store::health`), worker
//! heartbeats (`heartbeats`), the paging signals (`signals`) and on-chain drift (`drift`).

mod common;

use std::collections::BTreeMap;

use common::*;
use qtg_core::NodeState;
use qtg_store::drift::{self, Observation};
use qtg_store::heartbeats::{self, HeartbeatKey, LoopTimes};
use qtg_store::{callbacks, health, signals, PgPool, Result};
use serde_json::json;

const SIGNER_A: &str = "0x00000000000000000000000000000000000000aa";
const SIGNER_B: &str = "0x00000000000000000000000000000000000000bb";

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn health_is_recorded_per_key_and_identity_is_judged_when_read(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    health::record_executor(&mut conn, "exec.a", "local", "other", "down", Some("timeout")).await?;
    health::record_executor(&mut conn, "exec.a", "grpc", "cex", "up", None).await?;
    health::record_executor(&mut conn, "exec.gone", "local", "other", "up", None).await?;
    let executors = health::list_executors(&mut conn).await?;
    let a = &executors[0];
    assert_eq!((a.executor_key.as_str(), a.transport.as_str(), a.lane.as_str()), ("exec.a", "grpc", "cex"));
    assert_eq!((a.health_state.as_str(), a.last_error.as_deref()), ("up", None));

    health::record_signer(&mut conn, "signer.a", "local", "up", None, Some(SIGNER_A)).await?;
    health::record_signer(&mut conn, "signer.b", "local", "up", None, Some(SIGNER_A)).await?;
    health::record_signer(&mut conn, "signer.c", "local", "up", None, None).await?;
    assert!(health::set_expected_identity(&mut conn, "signer.a", SIGNER_A).await?);
    assert!(health::set_expected_identity(&mut conn, "signer.b", SIGNER_B).await?);
    assert!(!health::set_expected_identity(&mut conn, "signer.none", SIGNER_B).await?);
    // A later health check never touches the enrolled identity.
    health::record_signer(&mut conn, "signer.b", "local", "up", None, Some(SIGNER_A)).await?;
    let postures: Vec<_> =
        health::list_signers(&mut conn).await?.into_iter().map(|s| (s.signer_key, s.identity_posture)).collect();
    let expected = [("signer.a", "match"), ("signer.b", "mismatch"), ("signer.c", "unverified")];
    assert_eq!(postures, expected.map(|(k, p)| (k.to_string(), p)).to_vec());
    assert_eq!(health::expected_identity(&mut conn, "signer.b").await?.as_deref(), Some(SIGNER_B));
    assert_eq!(health::identities(&mut conn, "signer.b").await?, (Some(SIGNER_B.into()), Some(SIGNER_A.into())));
    assert_eq!(health::identities(&mut conn, "signer.none").await?, (None, None));

    // Keys no longer registered become orphans (once); a signer's observation is cleared.
    let keep_e = vec!["exec.a".to_string()];
    let keep_s = vec!["signer.a".to_string(), "signer.c".to_string()];
    assert_eq!(health::mark_orphans(&mut conn, &keep_e, &keep_s).await?, 2);
    assert_eq!(health::mark_orphans(&mut conn, &keep_e, &keep_s).await?, 0);
    assert_eq!(health::identities(&mut conn, "signer.b").await?, (Some(SIGNER_B.into()), None));
    let not_up =
        health::not_up(&mut conn, &["exec.a".into(), "exec.gone".into(), "exec.new".into()], &["signer.b".into()])
            .await?;
    let expected = [("exec.gone", "orphan"), ("exec.new", "unknown"), ("signer.b", "orphan")];
    assert_eq!(not_up, expected.map(|(k, s)| (k.to_string(), s.to_string())).to_vec());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_heartbeat_records_the_loops_times_by_the_databases_clock(pool: PgPool) -> Result<()> {
    let key = HeartbeatKey { worker: "dispatch".into(), network_class: "mainnet".into(), instance_id: "i-1".into() };
    heartbeats::seed(&pool, &key, "host-a", 42).await?;
    let mut conn = pool.acquire().await?;
    let seeded = health::list_workers(&mut conn, 3600.0).await?;
    assert_eq!(seeded.len(), 1);
    assert_eq!(
        (seeded[0].hostname.as_deref(), seeded[0].pid, seeded[0].last_tick_at),
        (Some("host-a"), Some(42), None)
    );

    // A process beats all its workers' rows in one statement.
    let other = HeartbeatKey { worker: "observe".into(), ..key.clone() };
    heartbeats::seed(&pool, &other, "host-a", 42).await?;
    let beats = [
        (&key, LoopTimes { ticked_ago: Some(2.0), due_in: Some(5.0) }),
        (&other, LoopTimes { ticked_ago: Some(1.0), due_in: None }),
    ];
    heartbeats::beat(&pool, &beats).await?;
    let mut workers = health::list_workers(&mut conn, 3600.0).await?;
    workers.sort_by(|a, b| a.worker.cmp(&b.worker));
    let observe = workers.pop().expect("two rows");
    assert_eq!(observe.worker, "observe");
    assert_eq!(observe.last_beat_at - observe.last_tick_at.expect("ticked"), chrono::Duration::seconds(1));
    assert_eq!(observe.next_tick_at, None);
    let w = workers.remove(0);
    let (tick, next) = (w.last_tick_at.expect("ticked"), w.next_tick_at.expect("due"));
    assert_eq!(w.last_beat_at - tick, chrono::Duration::seconds(2));
    assert_eq!(next - w.last_beat_at, chrono::Duration::seconds(5));
    assert!(!w.stale);
    assert!(health::list_workers(&mut conn, -1.0).await?[0].stale);

    // A restart re-seeds the row: nothing of the previous process' loop is left.
    heartbeats::seed(&pool, &key, "host-b", 43).await?;
    let w = health::list_workers(&mut conn, 3600.0).await?.remove(0);
    assert_eq!((w.hostname.as_deref(), w.pid, w.last_tick_at, w.next_tick_at), (Some("host-b"), Some(43), None, None));
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn signals_count_what_an_on_call_person_pages_on(pool: PgPool) -> Result<()> {
    let quiet = signals::read(&pool, 60.0).await?;
    assert_eq!((quiet.callback_dlq_size, quiet.callback_backlog, quiet.audit_backlog), (0, 0, 0));
    assert!(quiet.ready_age_by_executor.is_empty() && quiet.heartbeat_age_seconds.is_empty());
    assert_eq!(quiet.oldest_unknown_node_age_seconds, 0.0);

    let m = one_node_movement(&pool, "t.signals", Some("https://hooks.example/cb")).await?;
    execute(&pool, m.id).await?;
    walk(&pool, m.node("n"), &[NodeState::Blocked, NodeState::Ready]).await?;
    let key = HeartbeatKey { worker: "observe".into(), network_class: "testnet".into(), instance_id: "i".into() };
    heartbeats::seed(&pool, &key, "h", 1).await?;
    let mut conn = pool.acquire().await?;
    callbacks::enqueue_event(&mut conn, None, "drift_detected", "https://ops.example/a", &json!({})).await?;
    let token = callbacks::claim(&mut conn, 10, 10, 300.0).await?.into_iter().find(|r| r.request_id.is_none());
    let row = token.expect("the alert was claimed");
    callbacks::record_failed(&mut conn, row.id, row.claim_token.expect("token"), 1, "down", None).await?;
    drift::record_check(
        &mut conn,
        &Observation {
            scope: "chain:1",
            status: "drift",
            observed: json!({}),
            differences: json!([{"fact": "a"}, {"fact": "b"}]),
            executor_keys: vec![],
            error: None,
            alerted: false,
        },
    )
    .await?;

    let s = signals::read(&pool, 60.0).await?;
    assert_eq!(s.callback_dlq_size, 1);
    // Three request transitions and one node transition, each with its callback and audit row.
    assert_eq!((s.callback_backlog, s.audit_backlog), (3, 3));
    assert_eq!(s.ready_age_by_executor.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), vec![EXECUTOR]);
    assert_eq!(s.heartbeat_age_seconds.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(), vec!["observe"]);
    assert_eq!(s.drift_differences_by_scope, vec![("chain:1".to_string(), 2)]);
    // A pause holds the READY node: no dispatcher is expected to take it.
    qtg_store::controls::pause(&mut conn, "global", "", "incident", "ops").await?;
    assert!(signals::read(&pool, 60.0).await?.ready_age_by_executor.is_empty());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_drift_check_keeps_its_alert_until_the_differences_are_gone(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let facts: BTreeMap<String, String> =
        [("owner", "0xa"), ("paused", "false")].map(|(f, v)| (f.into(), v.into())).into();
    drift::set_baseline(&mut conn, "chain:1", &facts, "admin").await?;
    let fewer: BTreeMap<String, String> = [("owner".to_string(), "0xb".to_string())].into();
    drift::set_baseline(&mut conn, "chain:1", &fewer, "admin").await?;
    assert_eq!(drift::baseline(&mut conn, "chain:1").await?, fewer, "a baseline is replaced, not merged");

    let mut tx = pool.begin().await?;
    let first = drift::lock_check(&mut tx, "chain:1").await?.expect("created on first sight");
    assert_eq!((first.status.as_str(), first.baseline_facts, first.alerted_at), ("unbaselined", 1, None));
    assert!(first.checked_at < drift::now(&mut tx).await? - chrono::Duration::days(365), "never checked");
    let check = |status: &'static str, alerted: bool| Observation {
        scope: "chain:1",
        status,
        observed: json!({"owner": "0xc"}),
        differences: if status == "drift" { json!([{"fact": "owner"}]) } else { json!([]) },
        executor_keys: vec!["exec.evm".into()],
        error: None,
        alerted,
    };
    drift::record_check(&mut tx, &check("drift", true)).await?;
    tx.commit().await?;
    let alerted = drift::lock_existing(&mut conn, "chain:1").await?.expect("checked").alerted_at.expect("alerted");
    drift::record_check(&mut conn, &check("drift", false)).await?;
    let still = drift::lock_existing(&mut conn, "chain:1").await?.expect("checked");
    assert_eq!((still.status.as_str(), still.alerted_at), ("drift", Some(alerted)), "same drift, no new alert");
    assert_eq!(still.executor_keys, json!(["exec.evm"]));
    drift::record_check(&mut conn, &check("ok", false)).await?;
    assert_eq!(drift::lock_existing(&mut conn, "chain:1").await?.expect("checked").alerted_at, None);

    // An executor's error row is over once its facts are read again; other rows are left alone.
    let failed = Observation { scope: "executor:exec.evm", error: Some("rpc down".into()), ..check("error", false) };
    drift::record_check(&mut conn, &failed).await?;
    drift::clear_error(&mut conn, "executor:exec.evm").await?;
    drift::clear_error(&mut conn, "chain:1").await?;
    let all = drift::list(&mut conn).await?;
    let seen: Vec<_> = all.iter().map(|c| (c.scope.as_str(), c.status.as_str(), c.error.as_deref())).collect();
    assert_eq!(seen, vec![("chain:1", "ok", None), ("executor:exec.evm", "ok", None)]);
    assert!(drift::lock_existing(&mut conn, "chain:9").await?.is_none());
    Ok(())
}
