//! The pipelines' edge cases, in-process against real Postgres: what each kind of failure
//! does to a node and its movement.

use std::time::Duration;

use qtg_core::NodeState;
use qtg_engine::EngineSettings;
use qtg_store::transition::{self, Meta, NodePatch};
use qtg_tests::*;
use serde_json::json;

/// A sim transfer node whose venue behaves as `sim` says.
fn sim_node(key: &str, sim: serde_json::Value) -> serde_json::Value {
    json!({
        "node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
        "config": {"sim": sim}
    })
}

fn one(key: &str, sim: serde_json::Value) -> serde_json::Value {
    json!({"nodes": [sim_node(key, sim)]})
}

#[tokio::test]
async fn a_submit_without_an_answer_is_unknown_never_failed() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.timeout", one("n", json!({"submit": "timeout"}))).await?;
    let id = create_approved(&engine, "t.timeout", "m1").await?;
    assert_eq!(engine.dispatch_tick().await?, 1);
    let (state, code, refs, attempt) = node_row(&db.pool, id, "n").await?;
    assert_eq!(state, "UNKNOWN");
    assert_eq!(code.as_deref(), Some("EXECUTOR_TIMEOUT"));
    assert_eq!(refs["__submit_attempt_pending"], true, "the marker stays until evidence");
    assert_eq!(attempt, 1);
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING", "recovery may still decide");
    // Recovery waits the lane's grace before its first recover().
    assert_eq!(engine.recover_tick().await?, 0);
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn an_executor_hand_over_stops_recovery_and_calls_a_person() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let mut settings = test_settings();
    settings.grace.other = std::time::Duration::ZERO;
    let engine = sim_engine(&db, settings)?;
    install_plan(
        &engine,
        "t.review",
        one(
            "n",
            json!({
                "submit": "unknown", "recover": "unknown",
                "provider_refs": {"__manual_review_required": "reconciliation_ambiguous"}
            }),
        ),
    )
    .await?;
    let id = create_approved(&engine, "t.review", "m1").await?;
    engine.dispatch_tick().await?;
    // submit's own UNKNOWN already carries the marker: handed over at once.
    assert_eq!(request_state(&db.pool, id).await?, "MANUAL_INTERVENTION");
    // Past the (zero) grace: recovery would sweep the node if the movement were EXECUTING.
    let past = "SELECT bool_and(now() > started_at) FROM movement_request_nodes WHERE request_id = $1";
    wait_db(&db.pool, past, id, Duration::from_secs(10)).await?;
    assert_eq!(engine.recover_tick().await?, 0, "a movement outside EXECUTING is not swept");
    let (state, _, refs, _) = node_row(&db.pool, id, "n").await?;
    assert_eq!(state, "UNKNOWN");
    assert_eq!(refs["__submit_attempt_pending"], true);
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn observation_timeout_is_enforced_only_when_enabled() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let plan = json!({
        "nodes": [{
            "node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
            "timeout_policy": {"observe_seconds": 0.05},
            "config": {"sim": {"observe_polls": 1000, "retry_after_seconds": 0}}
        }]
    });
    let off = sim_engine(&db, test_settings())?;
    install_plan(&off, "t.slow", plan).await?;
    let id = create_approved(&off, "t.slow", "m1").await?;
    off.dispatch_tick().await?;
    let past = "SELECT bool_and(now() > started_at + interval '0.05 seconds') FROM movement_request_nodes WHERE \
                request_id = $1";
    wait_db(&db.pool, past, id, Duration::from_secs(10)).await?;
    off.observe_tick().await?;
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "OBSERVING");

    let on = sim_engine(&db, EngineSettings { observe_timeout_enforcement: true, ..test_settings() })?;
    on.observe_tick().await?;
    let (state, code, _, _) = node_row(&db.pool, id, "n").await?;
    assert_eq!((state.as_str(), code.as_deref()), ("UNKNOWN", Some("OBSERVATION_TIMEOUT")));
    assert_eq!(request_state(&db.pool, id).await?, "MANUAL_INTERVENTION", "never FAILED; a person decides");
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn unresolved_refs_and_plan_drift_fail_before_anything_is_sent() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.ref", json!({
        "nodes": [
            {
                "node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
                "config": {"sim": {"submit_result": "completed"}}
            },
            {
                "node_key": "b", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
                "config": {"x": "$ref:a.no_such_field"}
            },
        ],
        "edges": [{"from": "a", "to": "b"}],
    }))
    .await?;
    let id = create_approved(&engine, "t.ref", "m1").await?;
    engine.dispatch_tick().await?;
    engine.dispatch_tick().await?;
    let (state, code, _, attempt) = node_row(&db.pool, id, "b").await?;
    assert_eq!((state.as_str(), code.as_deref(), attempt), ("FAILED", Some("CONFIG_REF_UNRESOLVED"), 0));
    assert_eq!(request_state(&db.pool, id).await?, "MANUAL_INTERVENTION", "a's side effect is done");

    install_plan(&engine, "t.drift", one("n", json!({}))).await?;
    let id = create_approved(&engine, "t.drift", "m2").await?;
    sqlx::query(
        "UPDATE plan_versions SET compiled_plan_hash = repeat('0', 64) WHERE id = (SELECT plan_version_id FROM \
         movement_requests WHERE id = $1)",
    )
    .bind(id)
    .execute(&db.pool)
    .await?;
    engine.dispatch_tick().await?;
    let (state, code, _, _) = node_row(&db.pool, id, "n").await?;
    assert_eq!((state.as_str(), code.as_deref()), ("FAILED", Some("PLAN_HASH_DRIFT")));
    assert_eq!(request_state(&db.pool, id).await?, "FAILED");
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls").fetch_one(&db.pool).await?;
    assert_eq!(calls, 1, "only node a reached the venue, with one call");
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn manual_nodes_wait_for_a_person_and_are_never_dispatched() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.manual", json!({
        "nodes": [{"node_key": "m", "node_kind": "manual", "action_type": "manual_bank_wire", "executor_key": "manual"}]
    })).await?;
    let id = create_approved(&engine, "t.manual", "m1").await?;
    assert_eq!(request_state(&db.pool, id).await?, "WAITING_MANUAL_ACTION");
    assert_eq!(engine.dispatch_tick().await?, 0);
    assert_eq!(node_row(&db.pool, id, "m").await?.0, "READY");
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn the_one_door_refuses_what_the_table_forbids_and_writes_nothing() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.one", one("n", json!({}))).await?;
    let id = create_approved(&engine, "t.one", "m1").await?;
    let node_id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM movement_request_nodes WHERE request_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await?;
    let audits =
        || async { sqlx::query_scalar::<_, i64>("SELECT count(*) FROM audit_outbox").fetch_one(&db.pool).await };
    let before = audits().await?;
    let mut tx = db.pool.begin().await?;
    let forbidden = transition::transition_node(
        &mut tx,
        node_id,
        NodeState::Ready,
        NodeState::Completed,
        &NodePatch::default(),
        &Meta::actor("t"),
    )
    .await;
    assert!(
        matches!(forbidden, Ok(qtg_store::Cas::Applied(_))),
        "READY -> COMPLETED is complete-manual's path; the table allows it: {forbidden:?}"
    );
    tx.rollback().await?;
    let mut tx = db.pool.begin().await?;
    let err = transition::transition_node(
        &mut tx,
        node_id,
        NodeState::Ready,
        NodeState::Submitted,
        &NodePatch::default(),
        &Meta::actor("t"),
    )
    .await;
    assert!(matches!(err, Err(qtg_store::StoreError::Transition(_))), "{err:?}");
    let stale = transition::transition_node(
        &mut tx,
        node_id,
        NodeState::Unknown,
        NodeState::Completed,
        &NodePatch::default(),
        &Meta::actor("t"),
    )
    .await;
    assert!(matches!(stale, Ok(qtg_store::Cas::Stale(_))), "a compare-and-set miss is a value: {stale:?}");
    tx.commit().await?;
    assert_eq!(audits().await?, before, "a refused transition writes no audit row");
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "READY");
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn a_worker_only_takes_nodes_whose_executor_it_has() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let full = sim_engine(&db, test_settings())?;
    install_plan(&full, "t.one", one("n", json!({}))).await?;
    let id = create_approved(&full, "t.one", "m1").await?;
    // A replica whose registry does not have the key yet (e.g. mid rolling update).
    let partial =
        qtg_engine::Engine { registry: std::sync::Arc::new(qtg_executor::Registry::default()), ..full.clone() };
    assert_eq!(partial.dispatch_tick().await?, 0);
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "READY", "left for a replica that can serve it");
    assert_eq!(full.dispatch_tick().await?, 1);
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "SUBMITTED");
    db.drop_db().await;
    Ok(())
}

/// What each call of a node saw: (method, attempt, provider_refs, provider_ref_id).
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, i32, serde_json::Value, Option<String>)>>>;

/// The sim executor, recording the context of every call.
struct Recording {
    inner: qtg_sim::SimExecutor,
    seen: Seen,
}

impl Recording {
    fn saw(&self, method: &'static str, ctx: &qtg_core::ExecutionContext) {
        self.seen.lock().expect("seen").push((
            method,
            ctx.attempt_no,
            ctx.provider_refs.clone(),
            ctx.provider_ref_id.clone(),
        ));
    }
}

#[async_trait::async_trait]
impl qtg_executor::Executor for Recording {
    async fn preflight(
        &self,
        ctx: &qtg_core::ExecutionContext,
    ) -> Result<Option<qtg_core::Refusal>, qtg_executor::ExecutorError> {
        self.saw("preflight", ctx);
        self.inner.preflight(ctx).await
    }

    async fn prepare(
        &self,
        ctx: &qtg_core::ExecutionContext,
    ) -> Result<qtg_executor::Prepared, qtg_executor::ExecutorError> {
        self.saw("prepare", ctx);
        self.inner.prepare(ctx).await
    }

    async fn submit(
        &self,
        ctx: &qtg_core::ExecutionContext,
        submission: &qtg_executor::Submission<'_>,
    ) -> Result<qtg_core::SubmitOutcome, qtg_executor::ExecutorError> {
        self.saw("submit", ctx);
        self.inner.submit(ctx, submission).await
    }

    async fn observe(
        &self,
        ctx: &qtg_core::ExecutionContext,
    ) -> Result<qtg_core::ObserveOutcome, qtg_executor::ExecutorError> {
        self.saw("observe", ctx);
        self.inner.observe(ctx).await
    }

    async fn recover(
        &self,
        ctx: &qtg_core::ExecutionContext,
        key: &str,
    ) -> Result<qtg_core::SubmitOutcome, qtg_executor::ExecutorError> {
        self.saw("recover", ctx);
        self.inner.recover(ctx, key).await
    }
}

/// Attempt 2 of a node starts clean: its preflight, prepare and submit see nothing of
/// attempt 1 (no refs, no ref id, no qtg marker), and its observe sees only its own.
#[tokio::test]
async fn a_new_attempt_sees_nothing_of_the_previous_one() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let seen: Seen = Default::default();
    let mut registry = qtg_executor::Registry::default();
    registry.insert_executor(
        "exec.sim.transfer",
        qtg_core::Lane::Other,
        std::sync::Arc::new(Recording {
            inner: qtg_sim::SimExecutor::new("exec.sim.transfer", db.pool.clone()),
            seen: seen.clone(),
        }),
    );
    let engine = qtg_engine::Engine {
        pool: db.pool.clone(),
        registry: std::sync::Arc::new(registry),
        settings: test_settings(),
        actor: "test".into(),
        shutdown: Default::default(),
    };
    install_plan(&engine, "t.clean", one("n", json!({"observe": "fail", "provider_refs": {"venue_order": "o-1"}})))
        .await?;
    let id = create_approved(&engine, "t.clean", "c-1").await?;
    engine.dispatch_tick().await?;
    engine.observe_tick().await?;
    let (state, _, refs, _) = node_row(&db.pool, id, "n").await?;
    assert_eq!(state, "FAILED");
    assert_eq!(refs["venue_order"], "o-1", "attempt 1 left its refs on the node");
    engine.retry_node("ops", id, "n", "try again").await?;
    engine.dispatch_tick().await?;
    engine.observe_tick().await?;
    let seen = seen.lock().expect("seen").clone();
    let attempt2: Vec<_> = seen.iter().filter(|(_, attempt, _, _)| *attempt == 2).collect();
    assert!(attempt2.iter().any(|(m, ..)| *m == "submit"), "{seen:?}");
    for (method, _, refs, ref_id) in &attempt2 {
        assert!(!refs.as_object().is_some_and(|r| r.keys().any(|k| k.starts_with("__submit"))), "{method}: {refs}");
        if matches!(*method, "preflight" | "prepare" | "submit") {
            assert_eq!((refs, ref_id), (&json!({}), &None), "{method} of attempt 2 saw attempt 1");
        }
    }
    let observe2 = attempt2.iter().find(|(m, ..)| *m == "observe").expect("attempt 2 observed");
    let node = node_row_id(&db.pool, id).await?;
    assert_eq!(
        observe2.2["sim_order_id"],
        json!(format!("{node}:2")),
        "observe sees its own attempt's order: {observe2:?}"
    );
    db.drop_db().await;
    Ok(())
}

async fn node_row_id(pool: &sqlx::PgPool, request: uuid::Uuid) -> anyhow::Result<uuid::Uuid> {
    Ok(sqlx::query_scalar("SELECT id FROM movement_request_nodes WHERE request_id = $1")
        .bind(request)
        .fetch_one(pool)
        .await?)
}

/// Limits are checked once more at a movement's first claim: a cap lowered since the approval
/// fails the node before anything reaches the venue.
#[tokio::test]
async fn risk_limits_are_checked_again_before_the_first_submit() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let lax = sim_engine(&db, test_settings())?;
    install_plan(&lax, "t.cap", one("n", json!({}))).await?;
    let id = create_approved(&lax, "t.cap", "cap-1").await?;
    let amount: String = sqlx::query_scalar("SELECT intent ->> 'amount' FROM movement_requests WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await?;
    let below = qtg_core::risk::Amount::parse(&amount).expect("amount");
    let strict_limits =
        qtg_core::risk::RiskLimits::from_plan(&json!({"hard_cap": "0.000001"})).map_err(anyhow::Error::msg)?;
    assert!(strict_limits.hard_cap.as_ref().is_some_and(|c| &below > c));
    let strict = sim_engine(&db, EngineSettings { risk: strict_limits, ..test_settings() })?;
    strict.dispatch_tick().await?;
    let (state, code, _, _) = node_row(&db.pool, id, "n").await?;
    assert_eq!((state.as_str(), code.as_deref()), ("FAILED", Some("RISK_LIMIT_EXCEEDED")));
    let sent: i64 = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls").fetch_one(&db.pool).await?;
    assert_eq!(sent, 0, "nothing reached the venue");
    assert_eq!(request_state(&db.pool, id).await?, "FAILED");
    db.drop_db().await;
    Ok(())
}

/// Node and movement writes wake the workers with NOTIFY in the same statement (the `ntf`
/// CTE, run because the statement reads `notified`): the approval wakes the dispatchers, the
/// submit's SUBMITTED wakes the observers. A write that lost its wake-up would still be found by
/// the interval poll, which is why only a listener can tell.
#[tokio::test]
async fn transitions_wake_the_workers() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.notify", one("n", json!({"observe_polls": 3}))).await?;
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await?;
    listener.listen_all(["qtg_dispatch", "qtg_observe", "qtg_recover", "qtg_callback"]).await?;
    let id = create_approved(&engine, "t.notify", "wake-1").await?;
    heard(&mut listener, "qtg_dispatch").await?;
    assert_eq!(engine.dispatch_tick().await?, 1);
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "SUBMITTED");
    heard(&mut listener, "qtg_observe").await?;
    db.drop_db().await;
    Ok(())
}

/// A completion that activates two successors hands on the last one, so the writes keep the
/// order they had when each was its own: b READY, c READY (the first hop of c's claim write),
/// then c PREPARING — and the frontier records both.
#[tokio::test]
async fn a_fan_out_hands_on_its_last_successor_and_keeps_the_order_of_the_writes() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    let node = |key: &str| sim_node(key, json!({"submit_result": "completed"}));
    let plan = json!({
        "nodes": [node("a"), node("b"), node("c")],
        "edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}],
    });
    install_plan(&engine, "t.fan", plan).await?;
    let id = create_approved(&engine, "t.fan", "fan-1").await?;
    while engine.dispatch_tick().await? > 0 {}
    assert_eq!(request_state(&db.pool, id).await?, "COMPLETED");
    let audited: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT n.node_key, a.data->>'from', a.data->>'to' FROM audit_outbox a
           JOIN movement_request_nodes n ON a.entity_id = n.id::text
          WHERE n.request_id = $1 AND a.action = 'node.transition' AND a.data->>'to' IN ('READY', 'PREPARING')
            AND n.node_key <> 'a'
          ORDER BY a.id LIMIT 3",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await?;
    let audited: Vec<(&str, &str, &str)> =
        audited.iter().map(|(k, f, t)| (k.as_str(), f.as_str(), t.as_str())).collect();
    assert_eq!(audited, [("b", "BLOCKED", "READY"), ("c", "BLOCKED", "READY"), ("c", "READY", "PREPARING")]);
    let frontier: serde_json::Value =
        sqlx::query_scalar("SELECT current_frontier FROM movement_requests WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(frontier, json!(["b", "c"]));
    db.drop_db().await;
    Ok(())
}

/// A step whose submit completes it hands its successor to the same loop: claimed in the
/// record's transaction, so one tick runs the chain, each node through every state (READY
/// included, audited), one submit each, and no dispatcher is woken for a node already taken.
#[tokio::test]
async fn a_completed_step_hands_its_successor_to_the_same_loop() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    let node = |key: &str| sim_node(key, json!({"submit_result": "completed"}));
    install_plan(
        &engine,
        "t.chain",
        json!({
            "nodes": [node("a"), node("b"), node("c")],
            "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}],
        }),
    )
    .await?;
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await?;
    listener.listen_all(["qtg_dispatch", "qtg_test_mark"]).await?;
    let id = create_approved(&engine, "t.chain", "chain-1").await?;
    assert!(wakes_before_mark(&db, &mut listener).await? >= 1, "the approval woke the dispatchers");
    assert_eq!(engine.dispatch_tick().await?, 3, "a, then b and c handed on");
    assert_eq!(request_state(&db.pool, id).await?, "COMPLETED");
    // One wake-up: the movement's start (APPROVED → EXECUTING, a's claim); none for b or c,
    // which were claimed when they became READY.
    assert_eq!(wakes_before_mark(&db, &mut listener).await?, 1, "nobody is woken for a node already claimed");
    for key in ["b", "c"] {
        let path: Vec<(String, String)> = sqlx::query_as(
            "SELECT e.from_state, e.to_state FROM node_events e
               JOIN movement_request_nodes n ON n.id = e.request_node_id
              WHERE n.request_id = $1 AND n.node_key = $2 AND e.kind = 'transition' ORDER BY e.id",
        )
        .bind(id)
        .bind(key)
        .fetch_all(&db.pool)
        .await?;
        let path: Vec<(&str, &str)> = path.iter().map(|(f, t)| (f.as_str(), t.as_str())).collect();
        assert_eq!(
            path,
            [("BLOCKED", "READY"), ("READY", "PREPARING"), ("PREPARING", "SUBMITTING"), ("SUBMITTING", "COMPLETED")],
            "{key}"
        );
        let audited: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM audit_outbox a JOIN movement_request_nodes n ON a.entity_id = n.id::text
              WHERE n.request_id = $1 AND n.node_key = $2 AND a.action = 'node.transition'",
        )
        .bind(id)
        .bind(key)
        .fetch_one(&db.pool)
        .await?;
        assert_eq!(audited, 4, "{key}: every transition audited");
    }
    let calls: Vec<(String, i64)> = sqlx::query_as(
        "SELECT n.node_key, count(c.*) FROM movement_request_nodes n
           LEFT JOIN sim_submit_calls c ON c.request_node_id = n.id
          WHERE n.request_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(calls, [("a".to_string(), 1), ("b".to_string(), 1), ("c".to_string(), 1)], "one submit call each");
    db.drop_db().await;
    Ok(())
}

/// A successor the loop does not take (here its executor is not in this replica's registry)
/// is left READY by the record, the dispatchers are woken for it, and a replica that serves
/// it takes it.
#[tokio::test]
async fn a_successor_the_loop_does_not_take_is_left_ready_and_announced() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let full = sim_engine(&db, test_settings())?;
    install_plan(
        &full,
        "t.two_executors",
        json!({
            "nodes": [
                {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
                 "config": {"sim": {"submit_result": "completed"}}},
                {"node_key": "b", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.observe",
                 "config": {"sim": {"submit_result": "completed"}}},
            ],
            "edges": [{"from": "a", "to": "b"}],
        }),
    )
    .await?;
    let mut registry = qtg_executor::Registry::default();
    registry.insert_executor(
        "exec.sim.transfer",
        qtg_core::Lane::Other,
        std::sync::Arc::new(qtg_sim::SimExecutor::new("exec.sim.transfer", db.pool.clone())),
    );
    let partial = qtg_engine::Engine { registry: std::sync::Arc::new(registry), ..full.clone() };
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await?;
    listener.listen_all(["qtg_dispatch", "qtg_test_mark"]).await?;
    let id = create_approved(&full, "t.two_executors", "partial-1").await?;
    assert!(wakes_before_mark(&db, &mut listener).await? >= 1, "the approval woke the dispatchers");
    assert_eq!(partial.dispatch_tick().await?, 1, "a only");
    assert_eq!(node_row(&db.pool, id, "a").await?.0, "COMPLETED");
    assert_eq!(node_row(&db.pool, id, "b").await?.0, "READY");
    // The movement's start (a's claim), and b released by a's record.
    assert_eq!(wakes_before_mark(&db, &mut listener).await?, 2, "the READY node is announced");
    assert_eq!(full.dispatch_tick().await?, 1);
    assert_eq!(node_row(&db.pool, id, "b").await?.0, "COMPLETED");
    assert_eq!(request_state(&db.pool, id).await?, "COMPLETED");
    db.drop_db().await;
    Ok(())
}

/// A hand-off whose claim fails (here the database refuses b's READY → PREPARING) is rolled
/// back to its savepoint: a's record commits, b stays READY, held back for the call-failure
/// backoff with an `engine_error` event, and nothing of b reaches the venue.
#[tokio::test]
async fn a_hand_off_whose_claim_fails_keeps_the_record_and_holds_the_successor_back() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_b() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.node_key = 'b' AND NEW.node_state = 'PREPARING' THEN
               RAISE EXCEPTION 'b may not be claimed';
             END IF;
             RETURN NEW;
           END $$;
         CREATE TRIGGER refuse_b BEFORE UPDATE ON movement_request_nodes FOR EACH ROW EXECUTE FUNCTION refuse_b();",
    )
    .execute(&db.pool)
    .await?;
    let engine = sim_engine(&db, test_settings())?;
    let node = |key: &str| sim_node(key, json!({"submit_result": "completed"}));
    install_plan(&engine, "t.refused", json!({"nodes": [node("a"), node("b")], "edges": [{"from": "a", "to": "b"}]}))
        .await?;
    let id = create_approved(&engine, "t.refused", "refused-1").await?;
    assert_eq!(engine.dispatch_tick().await?, 1);
    assert_eq!(node_row(&db.pool, id, "a").await?.0, "COMPLETED", "the record committed");
    assert_eq!(node_row(&db.pool, id, "b").await?.0, "READY");
    let (held, events): (bool, i64) = sqlx::query_as(
        "SELECT n.lease_expires_at > now(),
                (SELECT count(*) FROM node_events e WHERE e.request_node_id = n.id
                   AND e.method = 'claim' AND e.error_code = 'ENGINE_ERROR')
           FROM movement_request_nodes n WHERE n.request_id = $1 AND n.node_key = 'b'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;
    assert!(held, "held back for the call-failure backoff");
    assert_eq!(events, 1);
    let sent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sim_submit_calls c JOIN movement_request_nodes n ON n.id = c.request_node_id
          WHERE n.request_id = $1 AND n.node_key = 'b'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(sent, 0);
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING");
    db.drop_db().await;
    Ok(())
}

/// The `qtg_dispatch` wake-ups committed so far: NOTIFYs reach a listener in commit order, so
/// those committed before a mark sent now all arrive before it.
async fn wakes_before_mark(db: &TestDb, listener: &mut sqlx::postgres::PgListener) -> anyhow::Result<usize> {
    sqlx::query("SELECT pg_notify('qtg_test_mark', '')").execute(&db.pool).await?;
    let mut wakes = 0;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .map_err(|_| anyhow::anyhow!("the mark did not arrive within 10 s"))??;
        match n.channel() {
            "qtg_test_mark" => return Ok(wakes),
            "qtg_dispatch" => wakes += 1,
            _ => {}
        }
    }
}

/// Waits (10 s at most) for a NOTIFY on `channel`, skipping the others.
async fn heard(listener: &mut sqlx::postgres::PgListener, channel: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = tokio::time::timeout_at(deadline, listener.recv())
            .await
            .map_err(|_| anyhow::anyhow!("no NOTIFY on {channel} within 10 s"))??;
        if n.channel() == channel {
            return Ok(());
        }
    }
}

/// What is submitted is what was stored for the attempt: a prepared action whose stored hash
/// differs (the artifact altered between prepare and submit — simulated by a trigger that
/// rewrites it as it is written) is never sent. The attempt is armed and left to recovery, the
/// submit call recorded `not_sent` with PAYLOAD_HASH_MISMATCH, and the venue saw nothing.
#[tokio::test]
async fn a_prepared_action_unlike_the_stored_one_is_never_submitted() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE FUNCTION tamper() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN NEW.payload_hash := repeat('0', 64); RETURN NEW; END $$;
         CREATE TRIGGER tamper BEFORE INSERT ON artifacts FOR EACH ROW
           WHEN (NEW.kind = 'prepared_action') EXECUTE FUNCTION tamper();",
    )
    .execute(&db.pool)
    .await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.tamper", one("n", json!({}))).await?;
    let id = create_approved(&engine, "t.tamper", "m-tamper").await?;
    assert_eq!(engine.dispatch_tick().await?, 1);
    let (state, _, refs, attempt) = node_row(&db.pool, id, "n").await?;
    assert_eq!((state.as_str(), attempt), ("SUBMITTING", 1), "armed, not sent: recovery decides");
    assert_eq!(refs["__submit_attempt_pending"], true, "{refs}");
    let (outcome, code): (String, Option<String>) = sqlx::query_as(
        "SELECT e.outcome, e.error_code FROM node_events e JOIN movement_request_nodes n ON n.id = e.request_node_id
          WHERE n.request_id = $1 AND e.method = 'submit'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!((outcome.as_str(), code.as_deref()), ("not_sent", Some("PAYLOAD_HASH_MISMATCH")));
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls").fetch_one(&db.pool).await?;
    assert_eq!(calls, 0, "no submit call reached the venue");
    db.drop_db().await;
    Ok(())
}
