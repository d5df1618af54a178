//! Movements (`qtg_store::movements`), what workers read about them (`context`, `diagnosis`)
//! and the approval window's pickup (`expiry::lock_expired_movements`).

mod common;

use common::*;
use qtg_core::{NodeKind, NodeState, RequestState};
use qtg_store::artifacts::{self, ArtifactKind};
use qtg_store::claims::{self, Pickup};
use qtg_store::movements::{self, Created, MovementFilter};
use qtg_store::transition::NodePatch;
use qtg_store::{context, diagnosis, expiry, health, PgPool, Result};
use serde_json::json;

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_movement_is_created_once_per_principal_and_idempotency_key(pool: PgPool) -> Result<()> {
    install(&pool, "t.two", &plan(vec![action("a"), action("b")], &[("a", "b")])).await?;
    let spec = Spec { body_hash: "h1", ..Spec::new("t.two", "same-key") };
    let Created::New(id) = insert_movement(&pool, &spec).await? else { panic!("first insert is new") };
    match insert_movement(&pool, &Spec { body_hash: "h2", ..Spec::new("t.two", "same-key") }).await? {
        Created::Existing { id: again, body_hash } => assert_eq!((again, body_hash.as_str()), (id, "h1")),
        other => panic!("a repeat must find the first: {other:?}"),
    }
    let Created::New(other) = insert_movement(&pool, &Spec { created_by: "someone-else", ..spec }).await? else {
        panic!("another principal's key is its own")
    };
    assert_ne!(other, id);

    let mut conn = pool.acquire().await?;
    let row = movements::get(&mut conn, id).await?.expect("movement");
    assert_eq!((row.request_state, row.approval_status.as_str()), (RequestState::PendingApproval, "pending"));
    assert_eq!((row.template_key.as_str(), row.template_version, row.created_by.as_str()), ("t.two", 1, "bot"));
    assert_eq!(row.intent_hash, qtg_core::hash::canonical_hash(&row.intent));
    assert!(row.expires_at.is_some() && !row.expired);
    assert_eq!(row.approvals_required, 1);
    let nodes = movements::nodes(&mut conn, id).await?;
    let seen: Vec<_> = nodes.iter().map(|n| (n.node_key.as_str(), n.node_state, n.attempt_no)).collect();
    assert_eq!(seen, vec![("a", NodeState::Blocked, 0), ("b", NodeState::Blocked, 0)]);
    assert!(nodes.iter().all(|n| n.executor_key == EXECUTOR && n.dispatch_hold.is_none()));
    assert!(movements::get(&mut conn, uuid::Uuid::new_v4()).await?.is_none());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_list_filters_and_pages_newest_first(pool: PgPool) -> Result<()> {
    install(&pool, "t.list", &plan(vec![action("n")], &[])).await?;
    install(&pool, "t.other", &plan(vec![action("n")], &[])).await?;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(movement(&pool, &Spec::new("t.list", &format!("k{i}"))).await?.id);
    }
    let other = movement(&pool, &Spec { created_by: "eve", ..Spec::new("t.other", "k0") }).await?.id;
    move_request(&pool, ids[1], RequestState::PendingApproval, RequestState::Approved).await?;

    let mut conn = pool.acquire().await?;
    let filter = MovementFilter { template_key: Some("t.list"), ..MovementFilter::default() };
    let page1 = movements::list(&mut conn, &filter, None, 3).await?;
    let last = page1.last().expect("a page");
    let page2 = movements::list(&mut conn, &filter, Some((last.created_at, last.id)), 3).await?;
    let all: Vec<_> = page1.iter().chain(&page2).map(|r| r.id).collect();
    assert_eq!(all, ids.iter().rev().copied().collect::<Vec<_>>());

    let approved = MovementFilter { state: Some("APPROVED"), ..MovementFilter::default() };
    assert_eq!(
        movements::list(&mut conn, &approved, None, 10).await?.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    let by_eve = MovementFilter { created_by: Some("eve"), ..MovementFilter::default() };
    assert_eq!(
        movements::list(&mut conn, &by_eve, None, 10).await?.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![other]
    );
    let future = MovementFilter { since: Some(chrono::Utc::now() + chrono::Duration::days(1)), ..Default::default() };
    assert!(movements::list(&mut conn, &future, None, 10).await?.is_empty());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_approver_counts_once_and_is_bound_to_the_hashes_they_saw(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.approve", None).await?;
    let mut conn = pool.acquire().await?;
    assert!(movements::add_approval(&mut conn, m.id, "alice", Some("approver"), Some("ok")).await?);
    assert!(!movements::add_approval(&mut conn, m.id, "alice", None, Some("again")).await?);
    assert!(movements::add_approval(&mut conn, m.id, "bob", None, None).await?);
    let row = movements::get(&mut conn, m.id).await?.expect("movement");
    let approvals = movements::approvals(&mut conn, m.id).await?;
    let who: Vec<_> = approvals.iter().map(|a| (a.approver.as_str(), a.reason.as_deref())).collect();
    assert_eq!(who, vec![("alice", Some("ok")), ("bob", None)]);
    assert!(approvals.iter().all(|a| a.intent_hash == row.intent_hash && a.plan_hash == row.compiled_plan_hash));

    movements::raise_approvals_required(&mut conn, m.id, 3).await?;
    movements::raise_approvals_required(&mut conn, m.id, 2).await?;
    assert_eq!(movements::get(&mut conn, m.id).await?.expect("movement").approvals_required, 3, "never lowered");
    Ok(())
}

/// One velocity budget per (asset, source) however they are spelled; movements that ended
/// unapproved do not count, nor does the movement being checked.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn velocity_sums_the_bucket_however_it_is_spelled(pool: PgPool) -> Result<()> {
    install(&pool, "t.velocity", &plan(vec![action("n")], &[])).await?;
    let intents = [
        ("a", json!({"asset": "USDC", "amount": "10", "source": "0xAbC"})),
        ("b", json!({"asset": " usdc ", "amount": "2.5", "source": {"address": " 0xabc "}})),
        ("c", json!({"asset": "USDC", "amount": "100", "source": "0xdef"})),
        ("d", json!({"asset": "ETH", "amount": "1000", "source": "0xabc"})),
        ("rejected", json!({"asset": "USDC", "amount": "7", "source": "0xabc"})),
        ("self", json!({"asset": "USDC", "amount": "40", "source": "0xabc"})),
    ];
    let mut ids = std::collections::BTreeMap::new();
    for (key, intent) in intents {
        ids.insert(key, movement(&pool, &Spec { intent, ..Spec::new("t.velocity", key) }).await?.id);
    }
    move_request(&pool, ids["rejected"], RequestState::PendingApproval, RequestState::Rejected).await?;
    let mut tx = pool.begin().await?;
    let probe = json!({"asset": "usdc", "amount": "40", "source": "0XABC"});
    movements::lock_velocity(&mut tx, &probe).await?;
    let used = movements::velocity_used(&mut tx, &probe, 3600, ids["self"]).await?;
    assert_eq!(used.parse::<f64>().ok(), Some(12.5), "{used}");
    tx.rollback().await?;
    Ok(())
}

/// The engine applies the top-level velocity limit to an intent without an asset (as asset
/// ""): the store's bucket of such an intent is `|<source>`, never NULL (a NULL bucket took no
/// lock and counted nothing, so the limit never bound; migration 0023).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn velocity_counts_intents_without_an_asset(pool: PgPool) -> Result<()> {
    install(&pool, "t.velocity", &plan(vec![action("n")], &[])).await?;
    for key in ["a", "b"] {
        let intent = json!({"amount": "10", "source": "0xabc"});
        movement(&pool, &Spec { intent, ..Spec::new("t.velocity", key) }).await?;
    }
    let probe = json!({"amount": "5", "source": "0xabc"});
    let mut tx = pool.begin().await?;
    let used = movements::velocity_used(&mut tx, &probe, 3600, uuid::Uuid::new_v4()).await?;
    assert_eq!(used.parse::<f64>().ok(), Some(20.0), "{used}");
    // The bucket is locked too: a second checker of the same bucket cannot take it meanwhile.
    movements::lock_velocity(&mut tx, &probe).await?;
    let mut other = pool.acquire().await?;
    let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended('qtg.velocity:|0xabc', 0))")
        .fetch_one(&mut *other)
        .await?;
    assert!(!free, "an intent without an asset locks its bucket");
    tx.rollback().await?;
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn only_pending_movements_past_their_window_expire_each_taken_once(pool: PgPool) -> Result<()> {
    install(&pool, "t.expiry", &plan(vec![action("n")], &[])).await?;
    let past = movement(&pool, &Spec { ttl_seconds: -1.0, ..Spec::new("t.expiry", "past") }).await?.id;
    movement(&pool, &Spec::new("t.expiry", "open")).await?;
    let approved = movement(&pool, &Spec { ttl_seconds: -1.0, ..Spec::new("t.expiry", "approved") }).await?.id;
    move_request(&pool, approved, RequestState::PendingApproval, RequestState::Approved).await?;

    let mut conn = pool.acquire().await?;
    assert!(movements::get(&mut conn, past).await?.expect("movement").expired);
    let (mut tx1, mut tx2) = (pool.begin().await?, pool.begin().await?);
    assert_eq!(expiry::lock_expired_movements(&mut tx1, 10).await?, vec![past]);
    assert!(expiry::lock_expired_movements(&mut tx2, 10).await?.is_empty(), "locked by the first expirer");
    tx1.rollback().await?;
    assert_eq!(expiry::lock_expired_movements(&mut tx2, 10).await?, vec![past]);
    tx2.rollback().await?;
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn unhealthy_bindings_name_each_binding_and_why(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    health::record_executor(&mut conn, "exec.up", "local", "other", "up", None).await?;
    health::record_executor(&mut conn, "exec.down", "grpc", "cex", "down", Some("refused")).await?;
    health::record_signer(&mut conn, "signer.unknown", "local", "unknown", None, None).await?;
    let executors = vec!["exec.up".to_string(), "exec.down".to_string(), "exec.missing".to_string()];
    let signers = vec!["signer.unknown".to_string()];
    let found = movements::unhealthy_bindings(&mut conn, &executors, &signers, 3600.0).await?;
    let expected = [("exec.down", "down"), ("exec.missing", "missing"), ("signer.unknown", "unknown")];
    assert_eq!(found, expected.map(|(k, w)| (k.to_string(), w.to_string())).to_vec());
    // Checked, but longer ago than the freshness bound allows (a negative bound: always).
    let stale = movements::unhealthy_bindings(&mut conn, &executors[..1], &[], -1.0).await?;
    assert_eq!(stale, vec![("exec.up".to_string(), "stale".to_string())]);
    Ok(())
}

/// What derivation and context building read: the request's state with every node, and the
/// artifacts of each node's current attempt only; diagnosis reads one node's evidence.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn context_reads_the_snapshot_and_the_current_attempts_artifacts(pool: PgPool) -> Result<()> {
    install(&pool, "t.context", &plan(vec![action("a"), action("b")], &[("a", "b")])).await?;
    let m = movement(&pool, &Spec::new("t.context", "k")).await?;
    execute(&pool, m.id).await?;
    let a = m.node("a");
    walk(&pool, a, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing]).await?;
    let mut conn = pool.acquire().await?;
    artifacts::insert(&mut conn, m.id, a, 0, ArtifactKind::Generated, &json!({"attempt": 0}), None).await?;
    let arm = NodePatch { begin_attempt: true, ..NodePatch::default() };
    write(&pool, a, NodeState::Preparing, NodeState::Submitting, &arm).await?.or_stale()?;
    artifacts::insert(&mut conn, m.id, a, 1, ArtifactKind::Proof, &json!({"attempt": 1}), Some("h")).await?;

    let (state, nodes) = context::request_snapshot(&mut conn, m.id).await?;
    assert_eq!(state, RequestState::Executing);
    let seen: Vec<_> = nodes.iter().map(|n| (n.node_key.as_str(), n.node_kind, n.node_state)).collect();
    assert_eq!(seen, vec![("a", NodeKind::Action, NodeState::Submitting), ("b", NodeKind::Action, NodeState::Blocked)]);
    assert_eq!(context::plan_edges(&mut conn, m_plan_version(&pool, m.id).await?).await?.len(), 1);

    // The API's view never shows a signature's payload (a signed transaction anyone could send).
    artifacts::insert(&mut conn, m.id, a, 1, ArtifactKind::SignResult, &json!({"raw": "0xf86c"}), Some("sh")).await?;
    let shown = artifacts::of_node(&mut conn, a).await?;
    let signature = shown.iter().find(|v| v["kind"] == "sign_result").expect("listed");
    assert_eq!((&signature["payload"], &signature["payload_hash"]), (&json!(null), &json!("sh")));
    assert_eq!(shown.iter().find(|v| v["kind"] == "proof").map(|v| &v["payload"]), Some(&json!({"attempt": 1})));

    let evidence = diagnosis::node_evidence(&mut conn, m.id, "a").await?.expect("node a");
    assert_eq!(
        (evidence.node_id, evidence.facts_state, evidence.request_state),
        (a, NodeState::Submitting, RequestState::Executing)
    );
    assert_eq!(evidence.node["attempt_no"], 1);
    assert!(evidence.seconds_since_started.is_some());
    assert_eq!(evidence.recent_events.first().and_then(|e| e["to"].as_str()), Some("SUBMITTING"));
    assert!(diagnosis::node_evidence(&mut conn, m.id, "zz").await?.is_none());
    // The claim of the successor reads, in its own statement, every node and the artifacts
    // of its completed predecessor's current attempt.
    let (b, served) = (m.node("b"), [EXECUTOR.to_string()]);
    walk(&pool, a, &[NodeState::Submitting, NodeState::Completed]).await?;
    walk(&pool, b, &[NodeState::Blocked, NodeState::Ready]).await?;
    let mut tx = pool.begin().await?;
    let item = claims::claim_first(&mut tx, Pickup::Dispatch, &served, b).await?.expect("b is READY");
    let seen: Vec<_> = item.context.nodes.iter().map(|n| (n.node_key.as_str(), n.node_kind, n.node_state)).collect();
    assert_eq!(seen, vec![("a", NodeKind::Action, NodeState::Completed), ("b", NodeKind::Action, NodeState::Ready)]);
    assert_eq!(
        item.context.prior_artifacts,
        vec![
            json!({"node_key": "a", "kind": "proof", "attempt_no": 1, "payload": {"attempt": 1}, "payload_hash": "h"}),
            json!({"node_key": "a", "kind": "sign_result", "attempt_no": 1, "payload": {"raw": "0xf86c"},
                   "payload_hash": "sh"}),
        ],
        "the current attempt's only, oldest first"
    );
    tx.rollback().await?;
    // The first node has no predecessor: nothing prior.
    install(&pool, "t.context.one", &plan(vec![action("a")], &[])).await?;
    let one = movement(&pool, &Spec::new("t.context.one", "k-one")).await?;
    execute(&pool, one.id).await?;
    walk(&pool, one.node("a"), &[NodeState::Blocked, NodeState::Ready]).await?;
    let mut tx = pool.begin().await?;
    let item = claims::claim_first(&mut tx, Pickup::Dispatch, &served, one.node("a")).await?.expect("READY");
    assert!(item.context.prior_artifacts.is_empty());
    assert_eq!(item.context.nodes.len(), 1);
    tx.rollback().await?;
    Ok(())
}

async fn m_plan_version(pool: &PgPool, id: uuid::Uuid) -> Result<uuid::Uuid> {
    let mut conn = pool.acquire().await?;
    Ok(movements::get(&mut conn, id).await?.expect("movement").plan_version_id)
}
