//! Many claimers, hundreds of READY nodes: each node is claimed, prepared and submitted
//! exactly once (the real dispatch path, in-process, against real Postgres).

use std::sync::Arc;

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
    let engine =
        Engine { pool: db.pool.clone(), registry: Arc::new(registry), settings: test_settings(), actor: "test".into() };

    let plan = serde_json::from_value(json!({
        "nodes": [{"node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}],
    }))?;
    let proposal = engine
        .propose_template("ops", Proposal { template_key: "t.one".into(), description: None, plan }, 3600.0)
        .await?;
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
                    idempotency_key: format!("k{i}"),
                    body_hash: format!("{i}"),
                },
                300.0,
            )
            .await?;
        engine.approve_movement("alice", row.id, None).await?;
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
