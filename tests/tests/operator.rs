//! Operator actions with the runbook's guards: retry only FAILED nodes (never UNKNOWN),
//! cancel refused while a side effect may be in flight unless C6 with evidence, resume only
//! when recovery has something to sweep, complete-manual only on manual nodes, and a busy
//! worker makes an action a clean 409.

use qtg_engine::movements::OpError;
use qtg_engine::operator::CancelInput;
use qtg_engine::EngineSettings;
use qtg_tests::*;
use serde_json::json;
use std::time::Duration;

fn one(sim: serde_json::Value) -> serde_json::Value {
    json!({
        "nodes": [{
            "node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
            "config": {"sim": sim}
        }]
    })
}

#[tokio::test]
async fn retry_makes_a_new_attempt_of_a_failed_node_and_refuses_unknown() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(&engine, "t.fail", one(json!({"submit": "fail"}))).await?;
    let id = create_approved(&engine, "t.fail", "m1").await?;
    engine.dispatch_tick().await?;
    assert_eq!(request_state(&db.pool, id).await?, "FAILED");
    engine.retry_node("ops", id, "n", "venue fixed").await?;
    let (state, code, _, attempt) = node_row(&db.pool, id, "n").await?;
    assert_eq!((state.as_str(), code, attempt), ("READY", None, 1));
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING");
    engine.dispatch_tick().await?;
    assert_eq!(node_row(&db.pool, id, "n").await?.3, 2, "a new attempt, with a new idempotency key");
    let submits: i64 =
        sqlx::query_scalar("SELECT count(*) FROM node_events WHERE request_id = $1 AND method = 'submit'")
            .bind(id)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(submits, 2);
    let audit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_outbox WHERE movement_id = $1 AND action = 'node.retry' AND data->>'reason' \
         = 'venue fixed'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(audit, 1);

    install_plan(&engine, "t.unknown", one(json!({"submit": "unknown"}))).await?;
    let id = create_approved(&engine, "t.unknown", "m2").await?;
    engine.dispatch_tick().await?;
    assert!(matches!(engine.retry_node("ops", id, "n", "try again").await, Err(OpError::SubmitAttemptPending(_))));
    assert!(matches!(engine.retry_node("ops", id, "nope", "x").await, Err(OpError::NotFound(_))));
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn cancel_needs_c6_evidence_while_a_side_effect_may_exist() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // A short submit window, so that the armed attempt is fenced within the test.
    let settings = EngineSettings {
        submit_window: Duration::from_millis(600),
        clock_skew: Duration::from_millis(100),
        ..test_settings()
    };
    let engine = sim_engine(&db, settings)?;
    install_plan(&engine, "t.unknown", one(json!({"submit": "unknown"}))).await?;
    let id = create_approved(&engine, "t.unknown", "m1").await?;
    engine.dispatch_tick().await?;
    let plain = CancelInput { reason: "customer asked", runbook_case: None, evidence: None };
    assert!(matches!(engine.cancel_movement("ops", id, plain).await, Err(OpError::Conflict(_))));
    let no_evidence =
        CancelInput { reason: "not found", runbook_case: Some(qtg_core::codes::RunbookCase::C6), evidence: None };
    assert!(matches!(engine.cancel_movement("ops", id, no_evidence).await, Err(OpError::Conflict(_))));
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING", "a refused cancel changes nothing");
    let evidence = json!({"exchange_console": "no withdrawal with client id", "checked_by": "ops"});
    let c6 = || CancelInput {
        reason: "C6: never reached the exchange",
        runbook_case: Some(qtg_core::codes::RunbookCase::C6),
        evidence: Some(&evidence),
    };
    // Until submit_by + skew has passed the venue could still accept the attempt: wait for the fence.
    match engine.cancel_movement("ops", id, c6()).await {
        Err(OpError::SubmitAttemptPending(why)) => assert!(why.contains("not fenced"), "{why}"),
        other => panic!("a C6 cancel before the fence must wait: {other:?}"),
    }
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING", "a refused cancel changes nothing");
    let fenced =
        "SELECT bool_and(now() > submit_by + interval '0.1 seconds') FROM movement_request_nodes WHERE request_id = $1";
    wait_db(&db.pool, fenced, id, std::time::Duration::from_secs(10)).await?;
    engine.cancel_movement("ops", id, c6()).await?;
    assert_eq!(request_state(&db.pool, id).await?, "CANCELLED");
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "CANCELLED");
    let recorded: serde_json::Value =
        sqlx::query_scalar("SELECT data FROM audit_outbox WHERE movement_id = $1 AND action = 'movement.cancel'")
            .bind(id)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(recorded["evidence"], evidence);
    let again = CancelInput { reason: "again", runbook_case: None, evidence: None };
    assert!(matches!(engine.cancel_movement("ops", id, again).await, Err(OpError::InvalidState(_))));

    // Before approval nothing is in flight.
    install_plan(&engine, "t.ok", one(json!({}))).await?;
    let (row, _) = engine
        .create_movement(
            "bot",
            qtg_engine::movements::NewMovementInput {
                template_key: "t.ok".into(),
                template_version: None,
                intent: json!({"asset": "USDC", "amount": "1"}),
                input_params: json!({}),
                callback_url: None,
                callback_secret: None,
                callback_signature: None,
                idempotency_key: "p".into(),
                body_hash: "p".into(),
                created_by_role: None,
            },
            Duration::from_secs(300),
        )
        .await?;
    engine
        .cancel_movement("ops", row.id, CancelInput { reason: "wrong amount", runbook_case: None, evidence: None })
        .await?;
    assert_eq!(request_state(&db.pool, row.id).await?, "CANCELLED");
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn resume_clears_the_hand_off_so_recovery_decides() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let mut settings = test_settings();
    settings.grace.other = Duration::ZERO;
    let engine = sim_engine(&db, settings)?;
    install_plan(
        &engine,
        "t.review",
        one(json!({
            "submit": "unknown", "recover": "completed",
            "provider_refs": {"__manual_review_required": "reconciliation_ambiguous"}
        })),
    )
    .await?;
    let id = create_approved(&engine, "t.review", "m1").await?;
    engine.dispatch_tick().await?;
    assert_eq!(request_state(&db.pool, id).await?, "MANUAL_INTERVENTION");
    engine.resume_movement("ops", id, "reconciled by hand, let recovery confirm").await?;
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING");
    assert!(node_row(&db.pool, id, "n").await?.2.get("__manual_review_required").is_none(), "hand-off mark cleared");
    sqlx::query(
        "UPDATE movement_request_nodes SET next_observe_at = now() - interval '1 second' WHERE request_id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await?;
    // The sim keeps answering with its scripted refs; recovery's answer here is COMPLETED.
    assert_eq!(engine.recover_tick().await?, 1);
    assert_eq!(request_state(&db.pool, id).await?, "COMPLETED");

    // A FAILED node after a completed action: resume has nothing to sweep, retry does.
    install_plan(
        &engine,
        "t.after",
        json!({"nodes": [
        {
            "node_key": "x", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
            "config": {"sim": {"submit_result": "completed"}}
        },
        {
            "node_key": "y", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
            "config": {"sim": {"submit": "fail"}}
        }],
        "edges": [{"from": "x", "to": "y"}]}),
    )
    .await?;
    let id = create_approved(&engine, "t.after", "m2").await?;
    engine.dispatch_tick().await?;
    engine.dispatch_tick().await?;
    assert_eq!(request_state(&db.pool, id).await?, "MANUAL_INTERVENTION");
    assert!(matches!(engine.resume_movement("ops", id, "try").await, Err(OpError::InvalidState(_))));
    assert_eq!(request_state(&db.pool, id).await?, "MANUAL_INTERVENTION", "a refused resume changes nothing");
    engine.retry_node("ops", id, "y", "limit raised").await?;
    assert_eq!(request_state(&db.pool, id).await?, "EXECUTING");
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn complete_manual_only_on_manual_nodes_and_a_busy_worker_is_a_409() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let engine = sim_engine(&db, test_settings())?;
    install_plan(
        &engine,
        "t.manual",
        json!({"nodes": [
        {"node_key": "wire", "node_kind": "manual", "action_type": "manual_bank_wire", "executor_key": "manual"},
        {
            "node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
            "config": {"sim": {"submit_result": "completed"}}
        }],
        "edges": [{"from": "wire", "to": "n"}]}),
    )
    .await?;
    let id = create_approved(&engine, "t.manual", "m1").await?;
    assert_eq!(request_state(&db.pool, id).await?, "WAITING_MANUAL_ACTION");
    let evidence = json!({"bank_ref": "WIRE-123"});
    assert!(
        matches!(engine.complete_manual("ops", id, "n", &evidence).await, Err(OpError::InvalidState(_))),
        "an action node never completes by hand"
    );

    // A worker holding a node: the action is refused, nothing half-applied.
    let mut holder = db.pool.begin().await?;
    sqlx::query("SELECT 1 FROM movement_request_nodes WHERE request_id = $1 AND node_key = 'wire' FOR UPDATE")
        .bind(id)
        .execute(&mut *holder)
        .await?;
    assert!(matches!(engine.complete_manual("ops", id, "wire", &evidence).await, Err(OpError::Conflict(_))));
    holder.rollback().await?;

    engine.complete_manual("ops", id, "wire", &evidence).await?;
    assert_eq!(node_row(&db.pool, id, "wire").await?.0, "COMPLETED");
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "READY", "the plan advances");
    let stored: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM artifacts WHERE request_id = $1 AND kind = 'manual_evidence'")
            .bind(id)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(stored["evidence"], evidence);
    engine.dispatch_tick().await?;
    assert_eq!(request_state(&db.pool, id).await?, "COMPLETED");
    db.drop_db().await;
    Ok(())
}

/// A node set up in each runbook case (by the sim, then its facts aged or marked as the case
/// describes) is diagnosed as that case, with evidence and the required action, and nothing
/// is resolved.
#[tokio::test]
async fn diagnosis_names_each_runbook_case() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // A short submit window, so that the armed attempt is fenced within the test.
    let settings = EngineSettings {
        submit_window: Duration::from_millis(600),
        clock_skew: Duration::from_millis(100),
        ..test_settings()
    };
    let engine = sim_engine(&db, settings)?;
    install_plan(&engine, "t.unknown", one(json!({"submit": "unknown"}))).await?;
    install_plan(&engine, "t.observing", one(json!({"observe_polls": 1000, "retry_after_seconds": 0.01}))).await?;
    let set = |id: uuid::Uuid, sql: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(format!("UPDATE movement_request_nodes SET {sql} WHERE request_id = $1")))
                .bind(id)
                .execute(&pool)
                .await
        }
    };
    let cases: [(&str, &str, Option<&'static str>); 7] = [
        ("C1", "t.unknown", None),
        ("C2", "t.unknown", Some("started_at = now() - interval '2 hours'")),
        (
            "C3a",
            "t.unknown",
            Some(
                "provider_refs = provider_refs - '__submit_attempt_pending' || \
                 '{\"__legacy_reconciliation_gated\": true}'",
            ),
        ),
        (
            "C3b",
            "t.unknown",
            Some(
                "provider_refs = provider_refs || '{\"__legacy_reconciliation_gated\": \
                 true, \"__manual_review_required\": \"reconciliation_auth_failed\"}'",
            ),
        ),
        ("C5", "t.observing", Some("observe_count = 60")),
        ("C6", "t.unknown", Some("provider_refs = '{}'::jsonb, provider_ref_id = NULL")),
        ("C7", "t.observing", None),
    ];
    for (i, (case, template, tweak)) in cases.into_iter().enumerate() {
        let id = create_approved(&engine, template, &format!("diag-{i}")).await?;
        engine.dispatch_tick().await?;
        if template == "t.observing" {
            engine.observe_tick().await?;
        }
        if let Some(sql) = tweak {
            set(id, sql).await?;
        }
        let before = node_row(&db.pool, id, "n").await?;
        let d = engine.diagnose_node(id, "n").await?;
        assert_eq!(d["case"], case, "{d:#}");
        assert!(d["required_action"].as_str().is_some_and(|a| !a.is_empty()));
        assert_eq!(d["automatic_resolution"], false);
        assert!(d["evidence"]["node"].is_object() && d["evidence"]["recent_events"].is_array(), "{d:#}");
        assert_eq!(node_row(&db.pool, id, "n").await?, before, "diagnosis changes nothing");
    }
    db.drop_db().await;
    Ok(())
}
