//! Many claimers, hundreds of READY nodes: each node is claimed, prepared and submitted
//! exactly once (the real dispatch path, in-process, against real Postgres).

use std::sync::Arc;
use std::time::Duration;

use qtg_core::Lane;
use qtg_engine::movements::NewMovementInput;
use qtg_engine::templates::Proposal;
use qtg_engine::Engine;
use qtg_executor::Registry;
use qtg_tests::test_settings;
use qtg_tests::TestDb;
use serde_json::json;

const MOVEMENTS: usize = 300;
const CLAIMERS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_ready_node_is_claimed_exactly_once() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let mut registry = Registry::default();
    registry.insert_executor(
        "exec.sim.transfer",
        Lane::Other,
        Arc::new(qtg_sim::SimExecutor::new("exec.sim.transfer", db.pool.clone())),
    );
    let engine = Engine {
        pool: db.pool.clone(),
        registry: Arc::new(registry),
        settings: test_settings(),
        actor: "test".into(),
        shutdown: Default::default(),
    };

    let plan = serde_json::from_value(json!({
        "nodes": [{
            "node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"
        }],
    }))?;
    let proposal = Proposal { template_key: "t.one".into(), description: None, plan };
    let proposal = engine.propose_template("ops", proposal, Duration::from_secs(3600)).await?;
    engine.review_template_proposal("admin", proposal.id, true, None).await?;
    for i in 0..MOVEMENTS {
        let (row, _) = engine
            .create_movement(
                "bot",
                NewMovementInput {
                    template_key: "t.one".into(),
                    template_version: None,
                    intent: json!({"asset": "USDC", "amount": "1"}),
                    input_params: json!({}),
                    callback_url: None,
                    callback_secret: None,
                    callback_signature: None,
                    idempotency_key: format!("k{i}"),
                    body_hash: format!("{i}"),
                    created_by_role: None,
                },
                Duration::from_secs(300),
            )
            .await?;
        engine.approve_movement("alice", "approver", row.id, None).await?;
    }
    let ready: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_request_nodes WHERE node_state = 'READY'")
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(ready as usize, MOVEMENTS);

    let mut tasks = Vec::new();
    for _ in 0..CLAIMERS {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let mut claimed = 0usize;
            loop {
                match engine.dispatch_tick().await? {
                    0 => return anyhow::Ok(claimed),
                    n => claimed += n,
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    assert_eq!(total, MOVEMENTS, "claims across all claimers");

    let claims_per_node: Vec<i64> = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE e.to_state = 'PREPARING') FROM movement_request_nodes n
         LEFT JOIN node_events e ON e.request_node_id = n.id AND e.kind = 'transition' GROUP BY n.id",
    )
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(claims_per_node.len(), MOVEMENTS);
    assert!(claims_per_node.iter().all(|c| *c == 1), "every node claimed exactly once: {claims_per_node:?}");
    // Submit *calls* at the venue, not deduplicated ledger rows: a blind re-submit with the same
    // key would be a second call.
    let calls: Vec<i64> = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls GROUP BY request_node_id")
        .fetch_all(&db.pool)
        .await?;
    assert_eq!(calls.len(), MOVEMENTS, "every node submitted");
    assert!(calls.iter().all(|c| *c == 1), "no node got a second submit call: {calls:?}");
    let submitted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM movement_request_nodes WHERE node_state = 'SUBMITTED' AND attempt_no = 1",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(submitted as usize, MOVEMENTS);
    db.drop_db().await;
    Ok(())
}

/// The "handed to a person" rule is written twice: in Rust (`NodeView::handed_to_person`,
/// which derivation uses) and in SQL (`claims::HANDED_TO_PERSON`, which keeps recovery away).
/// For any marker value and error code, an UNKNOWN node is handed over in both or in neither.
#[tokio::test]
async fn the_sql_and_rust_forms_of_handed_to_a_person_agree() -> anyhow::Result<()> {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};

    let db = TestDb::new().await?;
    let marker = prop_oneof![
        Just(None),
        Just(Some(json!(null))),
        Just(Some(json!(false))),
        Just(Some(json!(true))),
        Just(Some(json!(0))),
        Just(Some(json!(""))),
        Just(Some(json!({}))),
        "[a-z_]{0,12}".prop_map(|s| Some(json!(s))),
    ];
    let code = prop_oneof![
        Just(None),
        Just(Some(qtg_core::codes::OBSERVATION_TIMEOUT.to_string())),
        "[A-Z_]{1,20}".prop_map(Some),
    ];
    // Drawn by proptest's generators (the database is async, so the cases are drawn first).
    let mut runner = TestRunner::new(Config::default());
    let strategy = (marker, code);
    let mut cases = Vec::new();
    for _ in 0..200 {
        cases.push(strategy.new_tree(&mut runner).map_err(|e| anyhow::anyhow!("{e}"))?.current());
    }
    let sql = format!(
        "SELECT {} FROM (SELECT $1::jsonb AS provider_refs, $2::text AS error_code) n",
        qtg_store::claims::HANDED_TO_PERSON
    );
    for (marker, error_code) in cases {
        let mut refs = serde_json::Map::new();
        if let Some(m) = &marker {
            refs.insert(qtg_core::markers::MANUAL_REVIEW_REQUIRED.into(), m.clone());
        }
        let refs = serde_json::Value::Object(refs);
        let in_sql: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(&refs)
            .bind(&error_code)
            .fetch_one(&db.pool)
            .await?;
        let node = qtg_store::NodeBrief {
            id: uuid::Uuid::nil(),
            node_key: "n".into(),
            node_kind: qtg_core::plan::NodeKind::Action,
            node_state: qtg_core::NodeState::Unknown,
            provider_refs: refs.clone(),
            error_code: error_code.clone(),
            submit_accepted: true,
        };
        assert_eq!(in_sql, node.view().handed_to_person(), "marker {marker:?}, error_code {error_code:?}");
    }
    db.drop_db().await;
    Ok(())
}
