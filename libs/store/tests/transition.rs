//! The one door (`qtg_store::transition`): a node or request write is a compare-and-set that
//! applies once; its audit row, history, callback and artifacts are written with it or not at all.

mod common;

use std::time::Duration;

use common::*;
use qtg_core::{NodeState, RequestState};
use qtg_store::artifacts::{self, ArtifactKind};
use qtg_store::events::{self, Call};
use qtg_store::transition::{self, Cas, Guard, Lease, Meta, NewArtifact, NodePatch, RequestPatch, Schedule, Stale};
use qtg_store::{callbacks, context, movements, PgListener, PgPool, Result, StoreError};
use serde_json::json;
use uuid::Uuid;

const HOOK: &str = "https://hooks.example/cb";

async fn audit_rows(pool: &PgPool, entity_id: Uuid, action: &str) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM audit_outbox WHERE entity_id = $1 AND action = $2")
        .bind(entity_id.to_string())
        .bind(action)
        .fetch_one(pool)
        .await?)
}

async fn callbacks_of(pool: &PgPool, movement: Uuid) -> Result<Vec<callbacks::CallbackRow>> {
    let mut conn = pool.acquire().await?;
    let mut rows = callbacks::list(
        &mut conn,
        &callbacks::CallbackFilter { request_id: Some(movement), ..Default::default() },
        None,
        100,
    )
    .await?;
    rows.sort_by_key(|r| r.sequence);
    Ok(rows)
}

async fn history(pool: &PgPool, node: Uuid) -> Result<Vec<serde_json::Value>> {
    let mut conn = pool.acquire().await?;
    events::history(&mut conn, node, 100, false).await
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_node_write_applies_once_and_the_stale_repeat_is_an_answer(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.cas", Some(HOOK)).await?;
    let n = m.node("n");

    let first = write(&pool, n, NodeState::Blocked, NodeState::Ready, &NodePatch::default()).await?;
    assert_eq!(first, Cas::Applied(0));
    let again = write(&pool, n, NodeState::Blocked, NodeState::Ready, &NodePatch::default()).await?;
    assert_eq!(again, Cas::Stale(Stale { entity: "node", id: n, expected: "BLOCKED".into() }));
    assert!(matches!(again.or_stale(), Err(StoreError::StaleState { entity: "node", .. })));
    assert_eq!(node_state(&pool, n).await?, (NodeState::Ready, 0));

    // Exactly one audit row, one transition event and one callback: the stale repeat wrote none.
    assert_eq!(audit_rows(&pool, n, "node.transition").await?, 1);
    let hist = history(&pool, n).await?;
    assert_eq!(hist.len(), 1);
    assert_eq!(
        (hist[0]["kind"].as_str(), hist[0]["from"].as_str(), hist[0]["to"].as_str()),
        (Some("transition"), Some("BLOCKED"), Some("READY"))
    );
    let cbs = callbacks_of(&pool, m.id).await?;
    assert_eq!(cbs.len(), 1);
    let cb = &cbs[0];
    assert_eq!((cb.event_type.as_str(), cb.sequence, cb.status.as_str()), ("node_state_changed", 1, "pending"));
    // Rows are keyed by time-ordered UUIDs (v7, migration 0034): new keys at each index's edge.
    assert_eq!((n.get_version_num(), cb.id.get_version_num(), cb.event_id.get_version_num()), (7, 7, 7));
    assert_eq!(cb.callback_url, HOOK);
    assert_eq!(cb.payload["movement_id"], json!(m.id));
    assert_eq!(cb.payload["event_id"], json!(cb.event_id));
    assert_eq!(cb.payload["node_key"], "n");
    assert_eq!(cb.payload["node_state"], "READY");
    assert_eq!(cb.payload["sequence"], 1);
    assert_eq!(cb.payload["data"]["from"], "BLOCKED");
    assert_eq!(cb.payload["data"]["to"], "READY");
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn without_a_callback_url_a_transition_is_audited_but_enqueues_nothing(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.quiet", None).await?;
    let n = m.node("n");
    write(&pool, n, NodeState::Blocked, NodeState::Ready, &NodePatch::default()).await?.or_stale()?;
    assert_eq!(audit_rows(&pool, n, "node.transition").await?, 1);
    assert!(callbacks_of(&pool, m.id).await?.is_empty());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_rolled_back_transition_leaves_no_audit_history_or_callback(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.rollback", Some(HOOK)).await?;
    let n = m.node("n");
    let mut tx = pool.begin().await?;
    let w = transition::transition_node(
        &mut tx,
        n,
        NodeState::Blocked,
        NodeState::Ready,
        &NodePatch::default(),
        &Meta::actor(ACTOR),
    )
    .await?;
    assert_eq!(w, Cas::Applied(0));
    tx.rollback().await?;
    assert_eq!(node_state(&pool, n).await?, (NodeState::Blocked, 0));
    assert_eq!(audit_rows(&pool, n, "node.transition").await?, 0);
    assert!(history(&pool, n).await?.is_empty());
    assert!(callbacks_of(&pool, m.id).await?.is_empty());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_transition_the_table_forbids_is_an_error_and_writes_nothing(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.forbidden", Some(HOOK)).await?;
    let n = m.node("n");
    let res = write(&pool, n, NodeState::Blocked, NodeState::Submitted, &NodePatch::default()).await;
    assert!(matches!(res, Err(StoreError::Transition(_))), "{res:?}");
    let mut conn = pool.acquire().await?;
    let res = transition::transition_request(
        &mut conn,
        m.id,
        RequestState::PendingApproval,
        RequestState::Executing,
        &RequestPatch::default(),
        &Meta::actor(ACTOR),
    )
    .await;
    assert!(matches!(res, Err(StoreError::Transition(_))), "{res:?}");
    assert_eq!(node_state(&pool, n).await?, (NodeState::Blocked, 0));
    assert_eq!(movements::get(&mut conn, m.id).await?.expect("movement").request_state, RequestState::PendingApproval);
    assert_eq!(audit_rows(&pool, n, "node.transition").await?, 0);
    assert!(callbacks_of(&pool, m.id).await?.is_empty());
    Ok(())
}

/// The arm (begin_attempt) under the claim's token: a write under another token, or for an
/// attempt that is no longer the node's, matches nothing and changes nothing.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_stale_claim_token_or_attempt_matches_nothing(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.guard", None).await?;
    let n = m.node("n");
    execute(&pool, m.id).await?;
    walk(&pool, n, &[NodeState::Blocked, NodeState::Ready]).await?;
    let token = Uuid::new_v4();
    let claim = NodePatch {
        lease: Some(Lease { token, expires_in: Some(Duration::from_secs(300)) }),
        merge_refs: json!({"old_ref": "x"}).as_object().cloned().unwrap_or_default(),
        ..NodePatch::error("OLD", "from before")
    };
    write(&pool, n, NodeState::Ready, NodeState::Preparing, &claim).await?.or_stale()?;

    let arm = |guard: Guard| NodePatch {
        begin_attempt: true,
        submit_window: Duration::from_secs(60),
        guard: Guard { dispatchable: true, ..guard },
        ..NodePatch::default()
    };
    let other = Guard { claim_token: Some(Uuid::new_v4()), attempt_no: Some(0), ..Guard::default() };
    assert!(write(&pool, n, NodeState::Preparing, NodeState::Submitting, &arm(other)).await?.is_stale());
    let stale_attempt = Guard { claim_token: Some(token), attempt_no: Some(3), ..Guard::default() };
    assert!(write(&pool, n, NodeState::Preparing, NodeState::Submitting, &arm(stale_attempt)).await?.is_stale());
    assert_eq!(node_state(&pool, n).await?, (NodeState::Preparing, 0));

    let mut conn = pool.acquire().await?;
    let ours = Guard { claim_token: Some(token), attempt_no: Some(0), ..Guard::default() };
    let written = transition::write_transition(
        &mut conn,
        n,
        NodeState::Preparing,
        NodeState::Submitting,
        &NodePatch {
            artifacts: vec![NewArtifact {
                kind: ArtifactKind::PreparedAction,
                payload: json!({"action": "transfer"}),
                payload_hash: Some("hash-armed".into()),
            }],
            calls_attempt: Some(1),
            ..arm(ours)
        },
        &Meta::actor(ACTOR),
    )
    .await?
    .or_stale()?;
    assert_eq!(written.attempt_no, 1);
    // The arm answers the prepared action's hash as it stored it (what the submit must carry).
    assert_eq!(written.prepared_hash.as_deref(), Some("hash-armed"));

    // The attempt starts clean: nothing of the claim's refs or error, the pending marker set,
    // submit_by = started_at + the window.
    let node = movements::nodes(&mut conn, m.id).await?.remove(0);
    assert_eq!((node.node_state, node.attempt_no), (NodeState::Submitting, 1));
    assert!(node.provider_refs.get("old_ref").is_none(), "{}", node.provider_refs);
    assert_eq!(node.provider_refs["__submit_attempt_pending"], true);
    assert_eq!(node.error_code, None);
    let started = node.started_at.expect("started_at");
    assert_eq!(written.submit_by.expect("submit_by") - started, chrono::Duration::seconds(60));

    // Recording the submit's answer needs the pending marker and the current attempt.
    let answer = |attempt: i32| NodePatch {
        guard: Guard { claim_token: Some(token), attempt_no: Some(attempt), submit_pending: true, ..Guard::default() },
        remove_refs: vec!["__submit_attempt_pending".into()],
        provider_ref_id: Some("venue-1".into()),
        ..NodePatch::default()
    };
    assert!(write(&pool, n, NodeState::Submitting, NodeState::Submitted, &answer(0)).await?.is_stale());
    assert_eq!(write(&pool, n, NodeState::Submitting, NodeState::Submitted, &answer(1)).await?, Cas::Applied(1));
    // The marker is gone: the same answer recorded twice matches nothing.
    assert!(write(&pool, n, NodeState::Submitted, NodeState::Observing, &answer(1)).await?.is_stale());
    Ok(())
}

/// The arm re-checks the request (EXECUTING) in the same statement: a movement cancelled
/// after the claim arms nothing.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_arm_matches_nothing_once_the_movement_is_no_longer_executing(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.arm", None).await?;
    let n = m.node("n");
    execute(&pool, m.id).await?;
    walk(&pool, n, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing]).await?;
    move_request(&pool, m.id, RequestState::Executing, RequestState::Cancelled).await?;
    let arm = NodePatch {
        begin_attempt: true,
        guard: Guard { dispatchable: true, ..Guard::default() },
        ..NodePatch::default()
    };
    assert!(write(&pool, n, NodeState::Preparing, NodeState::Submitting, &arm).await?.is_stale());
    assert_eq!(node_state(&pool, n).await?, (NodeState::Preparing, 0));
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_poll_updates_fields_without_audit_or_callback(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.poll", Some(HOOK)).await?;
    let n = m.node("n");
    walk(&pool, n, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing, NodeState::Submitting]).await?;
    walk(&pool, n, &[NodeState::Submitting, NodeState::Submitted]).await?;
    let audits = audit_rows(&pool, n, "node.transition").await?;
    let cbs = callbacks_of(&pool, m.id).await?.len();
    let hist = history(&pool, n).await?.len();

    let poll = NodePatch {
        observed: true,
        provider_state: Some("pending".into()),
        next_observe: Schedule::In(Duration::from_secs(30)),
        ..NodePatch::default()
    };
    let mut conn = pool.acquire().await?;
    assert_eq!(transition::poll_node(&mut conn, n, NodeState::Submitted, &poll).await?, Cas::Applied(0));
    assert!(transition::poll_node(&mut conn, n, NodeState::Observing, &poll).await?.is_stale());
    let node = movements::nodes(&mut conn, m.id).await?.remove(0);
    assert_eq!(node.node_state, NodeState::Submitted);
    assert_eq!((node.observe_count, node.provider_state.as_deref()), (1, Some("pending")));
    let (last, next) = (node.last_observed_at.expect("observed"), node.next_observe_at.expect("scheduled"));
    assert!(next - last > chrono::Duration::seconds(29), "{last} {next}");
    assert_eq!(audit_rows(&pool, n, "node.transition").await?, audits);
    assert_eq!(callbacks_of(&pool, m.id).await?.len(), cbs);
    assert_eq!(history(&pool, n).await?.len(), hist);
    Ok(())
}

/// Executor calls and artifacts ride on the transition: written before its event, in call
/// order, under the written attempt — and not at all when the write is stale.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn calls_and_artifacts_are_written_with_the_transition(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.calls", None).await?;
    let n = m.node("n");
    walk(&pool, n, &[NodeState::Blocked, NodeState::Ready]).await?;
    let action = qtg_core::PreparedAction::new("transfer", "json", "{\"to\":\"x\"}".into(), false);
    let patch = NodePatch {
        calls: vec![Call::ok("preflight", "pass", 3), Call::failed("prepare", "ok", "WARN", "slow\0venue", 5)],
        artifacts: vec![NewArtifact {
            kind: ArtifactKind::PreparedAction,
            payload: serde_json::to_value(&action).expect("json"),
            payload_hash: Some(action.payload_hash.clone()),
        }],
        ..NodePatch::default()
    };
    write(&pool, n, NodeState::Ready, NodeState::Preparing, &patch).await?.or_stale()?;
    assert!(write(&pool, n, NodeState::Ready, NodeState::Preparing, &patch).await?.is_stale());

    let hist = history(&pool, n).await?;
    let seen: Vec<_> = hist.iter().map(|e| (e["kind"].as_str(), e["method"].as_str(), e["to"].as_str())).collect();
    assert_eq!(
        seen,
        vec![
            (Some("transition"), None, Some("READY")),
            (Some("call"), Some("preflight"), None),
            (Some("call"), Some("prepare"), None),
            (Some("transition"), None, Some("PREPARING")),
        ]
    );
    assert_eq!(hist[2]["error_detail"], "slow\u{fffd}venue");
    let mut conn = pool.acquire().await?;
    let (prepared, signed) = artifacts::submission(&mut conn, n, 0).await?;
    let (stored, hash) = prepared.expect("the prepared action is stored");
    assert_eq!((stored.payload, hash), (action.payload, action.payload_hash));
    assert_eq!(signed, None);
    assert_eq!(artifacts::of_node(&mut conn, n).await?.len(), 1, "the stale repeat stored no second artifact");
    Ok(())
}

/// A hop without calls writes its one transition event by itself (migration 0038): with the
/// write's attempt, error and actor, the detail cut to 2,000 characters like a call's.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_transition_without_calls_records_its_event_with_the_error(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.plain", None).await?;
    let n = m.node("n");
    walk(&pool, n, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing]).await?;
    let detail = "d".repeat(3000);
    let failed = NodePatch::error("VENUE_DOWN", detail);
    write(&pool, n, NodeState::Preparing, NodeState::Failed, &failed).await?.or_stale()?;

    let hist = history(&pool, n).await?;
    let last = hist.last().expect("events");
    assert_eq!(
        (last["kind"].as_str(), last["from"].as_str(), last["to"].as_str()),
        (Some("transition"), Some("PREPARING"), Some("FAILED"))
    );
    assert_eq!((last["error_code"].as_str(), last["actor"].as_str()), (Some("VENUE_DOWN"), Some(ACTOR)));
    assert_eq!(last["error_detail"].as_str().map(str::len), Some(2000));
    assert_eq!(last["attempt_no"], json!(0));
    assert_eq!(hist.len(), 3, "one event per hop, no call events: {hist:?}");
    assert!(hist.iter().all(|e| e["kind"] == "transition"), "{hist:?}");
    Ok(())
}

/// Outside the one door, a node's events and artifacts are written from the node row itself
/// (migration 0039: no foreign key checks them after the insert). A node that is not there, or
/// a node of another movement, is `NoNode` and writes nothing; the node's own movement writes.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_event_or_artifact_for_a_missing_or_foreign_node_is_refused_and_writes_nothing(pool: PgPool) -> Result<()> {
    let own = one_node_movement(&pool, "t.own", None).await?;
    let other = movement(&pool, &Spec::new("t.own", "k-2")).await?;
    let n = own.node("n");
    let ghost = Uuid::from_u128(0x5157);
    // The writers refuse, not a key: neither table has one left.
    let keys: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_constraint
         WHERE contype = 'f' AND conrelid IN ('node_events'::regclass, 'artifacts'::regclass)",
    )
    .fetch_one(&pool)
    .await?;
    assert_eq!(keys, 0);
    let mut conn = pool.acquire().await?;
    let calls = [Call::ok("observe", "ok", 1), Call::ok("observe", "pending", 2)];

    for (movement, node) in [(own.id, ghost), (other.id, n)] {
        let refused = events::record_calls(&mut conn, movement, node, 0, &calls, ACTOR).await;
        let named = |x: Uuid, y: Uuid| x == node && y == movement;
        assert!(
            matches!(refused, Err(StoreError::NoNode { node: x, movement: y, what: "call events" }) if named(x, y)),
            "{refused:?}"
        );
        let one = events::CallEvent {
            request_id: movement,
            node_id: node,
            attempt_no: 0,
            method: "observe",
            outcome: "ok",
            error_code: None,
            error_detail: None,
            duration_ms: 1,
            actor: ACTOR,
        };
        let refused = events::record_call(&mut conn, &one).await;
        assert!(matches!(refused, Err(StoreError::NoNode { what: "call event", .. })), "{refused:?}");
        let refused = artifacts::insert(&mut conn, movement, node, 0, ArtifactKind::Proof, &json!({}), None).await;
        assert!(matches!(refused, Err(StoreError::NoNode { what: "artifact", .. })), "{refused:?}");
    }
    for table in [
        "SELECT count(*) FROM node_events WHERE request_node_id = $1",
        "SELECT count(*) FROM artifacts WHERE request_node_id = $1",
    ] {
        assert_eq!(count(&pool, table, n).await?, 0, "{table}");
        assert_eq!(count(&pool, table, ghost).await?, 0, "{table}");
    }

    events::record_calls(&mut conn, own.id, n, 0, &calls, ACTOR).await?;
    artifacts::insert(&mut conn, own.id, n, 0, ArtifactKind::Proof, &json!({"p": 1}), None).await?;
    let hist = history(&pool, n).await?;
    let seen: Vec<_> = hist.iter().map(|e| (e["method"].as_str(), e["outcome"].as_str())).collect();
    assert_eq!(seen, vec![(Some("observe"), Some("ok")), (Some("observe"), Some("pending"))]);
    assert_eq!(count(&pool, "SELECT count(*) FROM node_events WHERE request_id = $1", own.id).await?, 2);
    assert_eq!(artifacts::of_node(&mut conn, n).await?.len(), 1);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_request_write_records_the_approval_and_sequences_its_callbacks(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.request", Some(HOOK)).await?;
    let mut conn = pool.acquire().await?;
    let approve =
        RequestPatch { approval_status: Some("approved"), approved_by: Some("alice".into()), review_reason: None };
    let meta = Meta::actor("alice").with_reason("looks fine");
    let first = transition::transition_request(
        &mut conn,
        m.id,
        RequestState::PendingApproval,
        RequestState::Approved,
        &approve,
        &meta,
    )
    .await?;
    assert_eq!(first, Cas::Applied(()));
    let again = transition::transition_request(
        &mut conn,
        m.id,
        RequestState::PendingApproval,
        RequestState::Approved,
        &approve,
        &meta,
    )
    .await?;
    assert_eq!(again, Cas::Stale(Stale { entity: "movement", id: m.id, expected: "PENDING_APPROVAL".into() }));
    let row = movements::get(&mut conn, m.id).await?.expect("movement");
    assert_eq!((row.request_state, row.approval_status.as_str()), (RequestState::Approved, "approved"));
    assert_eq!(row.approved_by.as_deref(), Some("alice"));
    assert!(row.approved_at.is_some() && row.completed_at.is_none());

    move_request(&pool, m.id, RequestState::Approved, RequestState::Executing).await?;
    // A state that needs a person: its change and an attention event, in sequence.
    move_request(&pool, m.id, RequestState::Executing, RequestState::ManualIntervention).await?;
    let cbs = callbacks_of(&pool, m.id).await?;
    let seen: Vec<_> = cbs.iter().map(|c| (c.sequence, c.event_type.as_str())).collect();
    assert_eq!(
        seen,
        vec![
            (1, "request_state_changed"),
            (2, "request_state_changed"),
            (3, "request_state_changed"),
            (4, "request_attention"),
        ]
    );
    assert_eq!(cbs[0].payload["data"]["reason"], "looks fine");
    assert_eq!(cbs[3].payload["request_state"], "MANUAL_INTERVENTION");
    assert_eq!(audit_rows(&pool, m.id, "movement.transition").await?, 3);
    Ok(())
}

/// A node write may carry a movement event (a completion's `frontier_advanced`) and move
/// through a state (the successor a dispatcher claims at once: BLOCKED → READY → PREPARING):
/// both hops are recorded as two writes would record them — an audit row, a transition event
/// and a callback each, the movement event after the first hop — and the frontier is kept,
/// with or without a callback URL.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_node_write_records_its_hops_and_the_movement_event_in_order(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.frontier", Some(HOOK)).await?;
    let quiet = movement(&pool, &Spec::new("t.frontier", "k-quiet")).await?;
    let keys = vec!["n".to_string()];
    let event = transition::MovementEvent {
        event_type: "frontier_advanced",
        data: json!({"completed": "a", "frontier": keys}),
        frontier: Some(keys.clone()),
        traceparent: None,
    };
    let patch = NodePatch { movement_event: Some(event), ..Default::default() };
    let mut conn = pool.acquire().await?;
    for mv in [&m, &quiet] {
        let hops = (NodeState::Blocked, NodeState::Ready, NodeState::Preparing);
        transition::transition_node_via(&mut conn, mv.node("n"), hops, &patch, &Meta::actor(ACTOR))
            .await?
            .or_stale()?;
        assert_eq!(node_state(&pool, mv.node("n")).await?.0, NodeState::Preparing);
        assert_eq!(movements::get(&mut conn, mv.id).await?.expect("movement").current_frontier, json!(["n"]));
        assert_eq!(audit_rows(&pool, mv.node("n"), "node.transition").await?, 2);
        let events: Vec<(String, String)> = sqlx::query_as(
            "SELECT from_state, to_state FROM node_events WHERE request_node_id = $1 AND kind = 'transition'
             ORDER BY id",
        )
        .bind(mv.node("n"))
        .fetch_all(&pool)
        .await?;
        let hops = [("BLOCKED", "READY"), ("READY", "PREPARING")].map(|(f, t)| (f.to_string(), t.to_string()));
        assert_eq!(events, hops);
    }
    // Moving through a state is checked against the table, hop by hop, before anything is written.
    let skip = (NodeState::Preparing, NodeState::Ready, NodeState::Submitting);
    assert!(transition::transition_node_via(&mut conn, m.node("n"), skip, &patch, &Meta::actor(ACTOR)).await.is_err());
    let cbs = callbacks_of(&pool, m.id).await?;
    let seen: Vec<_> = cbs
        .iter()
        .map(|c| (c.sequence, c.event_type.as_str(), c.payload["data"]["to"].as_str().unwrap_or("-")))
        .collect();
    assert_eq!(
        seen,
        vec![(1, "node_state_changed", "READY"), (2, "frontier_advanced", "-"), (3, "node_state_changed", "PREPARING")]
    );
    assert_eq!(cbs[1].payload["data"]["frontier"], json!(["n"]));
    assert!(callbacks_of(&pool, quiet.id).await?.is_empty(), "no URL, no callback");
    Ok(())
}

/// A node write of the previous release calls migration 0036's 22-argument `qtg_node_written`
/// (kept by 0037 as a call of the new one): it still records one hop — its audit row, its
/// transition event and its callback — and no movement event.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_previous_releases_node_written_still_records_one_hop(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.previous", Some(HOOK)).await?;
    let n = m.node("n");
    sqlx::query("UPDATE movement_request_nodes SET node_state = 'READY' WHERE id = $1").bind(n).execute(&pool).await?;
    let hash: Option<String> = sqlx::query_scalar(
        "SELECT qtg_node_written($1, $2, 'n', 'BLOCKED', 'READY', 0, NULL, NULL, NULL, true, false, 'test', NULL,
             '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::int4[], NULL, '[]'::jsonb, NULL, NULL)",
    )
    .bind(n)
    .bind(m.id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(hash, None, "no attempt begun");
    assert_eq!(audit_rows(&pool, n, "node.transition").await?, 1);
    let events: Vec<(String, String)> = sqlx::query_as(
        "SELECT from_state, to_state FROM node_events WHERE request_node_id = $1 AND kind = 'transition'",
    )
    .bind(n)
    .fetch_all(&pool)
    .await?;
    assert_eq!(events, [("BLOCKED".to_string(), "READY".to_string())]);
    let cbs = callbacks_of(&pool, m.id).await?;
    let seen: Vec<_> = cbs.iter().map(|c| (c.sequence, c.event_type.as_str())).collect();
    assert_eq!(seen, vec![(1, "node_state_changed")]);
    Ok(())
}

/// The engine's `transitions_wake_the_workers` hears the dispatch and observe wake-ups; this
/// one hears the other two the node write sends: recovery's (UNKNOWN) and the callback
/// worker's (a callback was enqueued).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_node_entering_unknown_wakes_recovery_and_the_callback_worker(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.notify", Some(HOOK)).await?;
    let n = m.node("n");
    walk(&pool, n, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing, NodeState::Submitting]).await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen_all(["qtg_recover", "qtg_callback"]).await?;
    walk(&pool, n, &[NodeState::Submitting, NodeState::Unknown]).await?;
    let mut heard = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while heard.len() < 2 {
        let note = tokio::time::timeout_at(deadline, listener.recv()).await.expect("NOTIFY within 10 s")?;
        heard.insert(note.channel().to_string());
    }
    assert_eq!(heard.into_iter().collect::<Vec<_>>(), vec!["qtg_callback", "qtg_recover"]);
    Ok(())
}

/// Two parallel branches record at once on a movement without a callback URL (so the node
/// write does not touch the movement row): the second derivation waits for the first's lock
/// on the movement, and then reads what the first committed meanwhile. Read by the statement
/// that waited, the first branch would still be BLOCKED for it, and neither branch would see
/// both done (a fan-in never activated, a movement never completed).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_derivation_that_waited_for_the_movement_reads_what_the_holder_committed(pool: PgPool) -> Result<()> {
    install(&pool, "t.branches", &plan(vec![action("a"), action("b")], &[])).await?;
    let m = movement(&pool, &Spec::new("t.branches", "k-branches")).await?;
    let (a, b) = (m.node("a"), m.node("b"));
    let meta = Meta::actor(ACTOR);

    let mut first = pool.begin().await?;
    transition::transition_node(&mut first, a, NodeState::Blocked, NodeState::Ready, &NodePatch::default(), &meta)
        .await?
        .or_stale()?;
    context::request_snapshot_for_update(&mut first, m.id).await?;

    let mut second = pool.begin().await?;
    transition::transition_node(&mut second, b, NodeState::Blocked, NodeState::Ready, &NodePatch::default(), &meta)
        .await?
        .or_stale()?;
    let waiting = tokio::spawn(async move {
        let read = context::request_snapshot_for_update(&mut second, m.id).await;
        (second, read)
    });
    // The second derivation is waiting for the movement's lock before the first commits.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let blocked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await?;
        if blocked > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the second derivation never waited for the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.commit().await?;

    let (second, read) = waiting.await.expect("the waiting derivation");
    let (_, nodes) = read?;
    let states: Vec<_> = nodes.iter().map(|n| (n.node_key.as_str(), n.node_state)).collect();
    assert_eq!(states, vec![("a", NodeState::Ready), ("b", NodeState::Ready)], "what the first branch committed");
    second.commit().await?;
    Ok(())
}
