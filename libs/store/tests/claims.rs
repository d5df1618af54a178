//! Worker claims (`qtg_store::claims`) and the kill switch they obey (`qtg_store::controls`):
//! one winner per node, leases that expire by the database's clock, pauses that hold READY
//! nodes and refuse the arm.

mod common;

use std::time::Duration;

use common::*;
use qtg_core::{Lane, NodeState, PlanNode, RequestState};
use qtg_store::claims::{self, Pickup};
use qtg_store::events::{self, Call};
use qtg_store::transition::{Guard, Lease, NodePatch, Schedule};
use qtg_store::{controls, movements, PgPool, Result, StoreError};
use uuid::Uuid;

fn served() -> Vec<String> {
    vec![EXECUTOR.to_string()]
}

async fn dispatchable(pool: &PgPool) -> Result<Vec<Uuid>> {
    let mut conn = pool.acquire().await?;
    claims::candidates(&mut conn, Pickup::Dispatch, &served(), &[], 10).await
}

async fn held_by(conn: &mut qtg_store::PgConnection, node: Uuid) -> Result<Option<String>> {
    Ok(claims::node_now(conn, node).await?.expect("node").held_by)
}

fn claim_patch(token: Uuid, lease: Duration) -> NodePatch {
    NodePatch { lease: Some(Lease { token, expires_in: Some(lease) }), ..NodePatch::default() }
}

/// A READY node of an EXECUTING movement of template `key`.
async fn ready_node(pool: &PgPool, key: &str) -> Result<(Movement, Uuid)> {
    install(pool, key, &plan(vec![action("n")], &[])).await?;
    let m = ready_movement(pool, key, "k-1", "other").await?;
    let n = m.node("n");
    Ok((m, n))
}

/// A READY node of an EXECUTING one-node movement of template `key`, created in `lane`.
async fn ready_in(pool: &PgPool, template: &str, key: &str, lane: &str) -> Result<Uuid> {
    Ok(ready_movement(pool, template, key, lane).await?.node("n"))
}

/// An EXECUTING one-node movement of `template` (idempotency key `key`, in `lane`), its node READY.
async fn ready_movement(pool: &PgPool, template: &str, key: &str, lane: &str) -> Result<Movement> {
    let m = movement(pool, &Spec { lane, ..Spec::new(template, key) }).await?;
    execute(pool, m.id).await?;
    walk(pool, m.node("n"), &[NodeState::Blocked, NodeState::Ready]).await?;
    Ok(m)
}

/// What one dispatch listing read of the node table: entries of `mrn_dispatch_by_executor`,
/// sequential scans, and scans of any kind started (one per probe, walk or arm, however each is
/// planned).
struct Reads {
    index_entries: i64,
    seq_scans: i64,
    scans: i64,
}

/// Lists `limit` dispatch candidates in a transaction of its own and counts what it read. The
/// connection's own counters are read before and after: they may still hold its earlier
/// transactions' reads (PostgreSQL flushes them at most once a second).
async fn list_reading(pool: &PgPool, served: &[String], exclude: &[Uuid], limit: i64) -> Result<(Vec<Uuid>, Reads)> {
    const READS: &str = "SELECT pg_stat_get_xact_tuples_returned('mrn_dispatch_by_executor'::regclass),
        COALESCE(seq_scan, 0), COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0)
        FROM pg_stat_xact_user_tables WHERE relname = 'movement_request_nodes'";
    let mut tx = pool.begin().await?;
    let before: (i64, i64, i64) = sqlx::query_as(READS).fetch_one(&mut *tx).await?;
    let listed = claims::candidates(&mut tx, Pickup::Dispatch, served, exclude, limit).await?;
    let after: (i64, i64, i64) = sqlx::query_as(READS).fetch_one(&mut *tx).await?;
    tx.rollback().await?;
    let reads = Reads { index_entries: after.0 - before.0, seq_scans: after.1 - before.1, scans: after.2 - before.2 };
    Ok((listed, reads))
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn two_concurrent_claimers_of_one_node_make_one_winner(pool: PgPool) -> Result<()> {
    let (_, n) = ready_node(&pool, "t.claim").await?;
    assert_eq!(dispatchable(&pool).await?, vec![n]);
    let mut conn = pool.acquire().await?;
    let others = vec!["exec.other.else".to_string()];
    assert!(claims::candidates(&mut conn, Pickup::Dispatch, &others, &[], 10).await?.is_empty());
    assert!(claims::candidates(&mut conn, Pickup::Dispatch, &served(), &[n], 10).await?.is_empty());
    drop(conn);

    let served = served();
    let (mut tx1, mut tx2) = (pool.begin().await?, pool.begin().await?);
    // A claim that lost its SKIP LOCKED would wait for the other one forever: bounded, it fails.
    for tx in [&mut tx1, &mut tx2] {
        sqlx::query("SET LOCAL lock_timeout = '10s'").execute(&mut **tx).await?;
    }
    let (a, b) = tokio::join!(
        claims::claim_first(&mut tx1, Pickup::Dispatch, &served, n),
        claims::claim_first(&mut tx2, Pickup::Dispatch, &served, n),
    );
    let (a, b) = (a?, b?);
    assert_eq!(a.is_some() as u8 + b.is_some() as u8, 1, "exactly one claimer wins: {a:?} {b:?}");
    let (mut winner, loser) = if a.is_some() { (tx1, tx2) } else { (tx2, tx1) };
    loser.rollback().await?;
    let item = a.or(b).expect("a winner");
    assert_eq!((item.node_id, item.node_state, item.request_state), (n, NodeState::Ready, RequestState::Executing));
    assert_eq!((item.executor_key.as_str(), item.lane), (EXECUTOR, Lane::Other));

    let token = Uuid::new_v4();
    let claimed = qtg_store::transition::transition_node(
        &mut winner,
        n,
        NodeState::Ready,
        NodeState::Preparing,
        &claim_patch(token, Duration::from_secs(300)),
        &qtg_store::transition::Meta::actor(ACTOR),
    )
    .await?;
    assert!(!claimed.is_stale());
    winner.commit().await?;

    // Leased: nobody else takes it while the lease holds.
    assert!(dispatchable(&pool).await?.is_empty());
    let mut tx3 = pool.begin().await?;
    assert!(claims::claim_first(&mut tx3, Pickup::Dispatch, &served, n).await?.is_none());
    tx3.rollback().await?;
    let mut conn = pool.acquire().await?;
    let now = claims::node_now(&mut conn, n).await?.expect("node");
    assert_eq!((now.node_state, now.claim_token, now.held_by), (NodeState::Preparing, Some(token), None));
    Ok(())
}

/// A dispatcher that died while preparing: its lease (0 s here, so already over by the
/// database's clock) lets another claim the node; a live lease does not.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_expired_lease_is_claimed_again_and_a_live_one_is_not(pool: PgPool) -> Result<()> {
    let (m, dead) = ready_node(&pool, "t.lease").await?;
    let live_movement = movement(&pool, &Spec::new("t.lease", "k-2")).await?;
    execute(&pool, live_movement.id).await?;
    let live = live_movement.node("n");
    walk(&pool, live, &[NodeState::Blocked, NodeState::Ready]).await?;
    assert_eq!(dispatchable(&pool).await?.len(), 2);

    write(&pool, dead, NodeState::Ready, NodeState::Preparing, &claim_patch(Uuid::new_v4(), Duration::ZERO))
        .await?
        .or_stale()?;
    write(&pool, live, NodeState::Ready, NodeState::Preparing, &claim_patch(Uuid::new_v4(), Duration::from_secs(300)))
        .await?
        .or_stale()?;
    assert_eq!(dispatchable(&pool).await?, vec![dead]);

    let served = served();
    let mut tx = pool.begin().await?;
    let item = claims::claim_first(&mut tx, Pickup::Dispatch, &served, dead).await?.expect("the expired lease");
    assert_eq!((item.request_id, item.node_state), (m.id, NodeState::Preparing));
    tx.rollback().await?;
    let mut tx = pool.begin().await?;
    assert!(claims::claim_first(&mut tx, Pickup::Dispatch, &served, live).await?.is_none());
    tx.rollback().await?;
    Ok(())
}

/// The dispatch listing answers the oldest movements first, READY nodes and expired leases in
/// one order, and with a backlog it reads from the READY nodes' index about what it returns:
/// it used to join, test and sort every READY node for each listing of a few.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_dispatch_listing_takes_the_oldest_first_and_reads_only_what_it_returns(pool: PgPool) -> Result<()> {
    install(&pool, "t.fifo", &plan(vec![action("n")], &[])).await?;
    let mut created = Vec::new();
    for i in 0..240 {
        let m = movement(&pool, &Spec::new("t.fifo", &format!("k-{i}"))).await?;
        execute(&pool, m.id).await?;
        walk(&pool, m.node("n"), &[NodeState::Blocked, NodeState::Ready]).await?;
        created.push(m.node("n"));
    }
    // The third movement's node was claimed by a dispatcher that died (its lease expired); the
    // fifth one's claim is live; the first one this worker has just tried.
    let (expired, live, tried) = (created[2], created[4], created[0]);
    write(&pool, expired, NodeState::Ready, NodeState::Preparing, &claim_patch(Uuid::new_v4(), Duration::ZERO))
        .await?
        .or_stale()?;
    write(&pool, live, NodeState::Ready, NodeState::Preparing, &claim_patch(Uuid::new_v4(), Duration::from_secs(300)))
        .await?
        .or_stale()?;
    sqlx::query("ANALYZE movement_request_nodes, movement_requests, plan_nodes").execute(&pool).await?;

    let (listed, reads) = list_reading(&pool, &served(), &[tried], 10).await?;
    let (ready_read, node_seq_scans) = (reads.index_entries, reads.seq_scans);
    let oldest: Vec<Uuid> = created.iter().copied().filter(|n| ![live, tried].contains(n)).take(10).collect();
    assert_eq!(listed, oldest, "the oldest movements first, the expired lease in its place");
    assert!(listed.contains(&expired));
    assert_eq!(node_seq_scans, 0, "no scan of every node");
    assert!(ready_read <= 30, "{ready_read} READY index entries read for 10 candidates out of 238");
    Ok(())
}

/// A backlog the listing may not take — an executor paused, a lane paused, an executor this
/// dispatcher does not serve — older than the nodes it may take: the listing answers those
/// without reading the backlog, and once the pauses are lifted, the oldest of everything it
/// serves, across executors and lanes.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_paused_or_unserved_backlog_is_not_read_by_the_dispatch_listing(pool: PgPool) -> Result<()> {
    const PAUSED_EXECUTOR: &str = "exec.other.paused";
    let bound = |executor: &str| PlanNode { executor_key: executor.to_string(), ..action("n") };
    install(&pool, "t.take", &plan(vec![action("n")], &[])).await?;
    install(&pool, "t.paused", &plan(vec![bound(PAUSED_EXECUTOR)], &[])).await?;
    install(&pool, "t.unserved", &plan(vec![bound("exec.other.unserved")], &[])).await?;
    // The backlog, oldest: in turn a node of the paused executor, one of an executor not served
    // and one of the served executor in a paused lane.
    let mut backlog = Vec::new();
    for i in 0..80 {
        backlog.push(ready_in(&pool, "t.paused", &format!("p-{i}"), "other").await?);
        ready_in(&pool, "t.unserved", &format!("u-{i}"), "other").await?;
        backlog.push(ready_in(&pool, "t.take", &format!("l-{i}"), "cex").await?);
    }
    let mut takeable = Vec::new();
    for i in 0..15 {
        takeable.push(ready_in(&pool, "t.take", &format!("t-{i}"), "other").await?);
    }
    let mut conn = pool.acquire().await?;
    controls::pause(&mut conn, "executor", PAUSED_EXECUTOR, "venue down", "ops").await?;
    controls::pause(&mut conn, "lane", "cex", "lane down", "ops").await?;
    drop(conn);
    sqlx::query("ANALYZE movement_request_nodes, movement_requests, plan_nodes").execute(&pool).await?;
    let served = vec![EXECUTOR.to_string(), PAUSED_EXECUTOR.to_string()];

    let (listed, reads) = list_reading(&pool, &served, &[], 10).await?;
    let (ready_read, node_seq_scans) = (reads.index_entries, reads.seq_scans);
    assert_eq!(listed, takeable[..10], "the oldest nodes it may take, behind 240 it may not");
    assert_eq!(node_seq_scans, 0, "no scan of every node");
    assert!(ready_read <= 20, "{ready_read} READY index entries read for 10 candidates behind a backlog of 240");

    let mut conn = pool.acquire().await?;
    controls::resume(&mut conn, "executor", PAUSED_EXECUTOR).await?.expect("paused");
    controls::resume(&mut conn, "lane", "cex").await?.expect("paused");
    let listed = claims::candidates(&mut conn, Pickup::Dispatch, &served, &[], 10).await?;
    assert_eq!(listed, backlog[..10], "the oldest first across executors and lanes; none of the unserved one");
    Ok(())
}

/// Many executors with READY nodes: the listing walks the ones that hold the oldest nodes, not
/// every one (each walk is a statement and reads up to the limit).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_dispatch_listing_walks_only_the_executors_that_hold_the_oldest_nodes(pool: PgPool) -> Result<()> {
    let keys: Vec<String> = (0..30).map(|i| format!("exec.other.k{i:02}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let node = PlanNode { executor_key: key.clone(), ..action("n") };
        install(&pool, &format!("t.k{i:02}"), &plan(vec![node], &[])).await?;
    }
    // The oldest nodes are those of the last keys: the walks go by age, not by key.
    let mut created = Vec::new();
    for i in (0..30).rev() {
        for j in 0..3 {
            created.push(ready_in(&pool, &format!("t.k{i:02}"), &format!("{i}-{j}"), "other").await?);
        }
    }
    sqlx::query("ANALYZE movement_request_nodes, movement_requests, plan_nodes").execute(&pool).await?;
    let (listed, reads) = list_reading(&pool, &keys, &[], 10).await?;
    assert_eq!(listed, created[..10], "the oldest first across executors");
    // 31 probes find the 30 keys and two arms read the expired leases and keyless nodes; the 4
    // keys that hold the oldest 10 are walked, not all 30 (63 scans).
    let scans = reads.scans;
    assert!(scans <= 45, "{scans} scans of the node table to list 10 of 90 READY nodes of 30 executors");
    Ok(())
}

/// The listing walks READY nodes by their executor key: a node inserted without it (the
/// previous release's workers during an upgrade) gets it from its plan node (migration 0042's
/// trigger), and a READY node that has none (written before the key existed, made READY since)
/// is listed all the same (`mrn_dispatch_keyless`).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_node_written_without_its_executor_key_gets_it_from_its_plan_node(pool: PgPool) -> Result<()> {
    let (_, n) = ready_node(&pool, "t.keyless").await?;
    let key: Option<String> = sqlx::query_scalar(
        "INSERT INTO movement_request_nodes (id, request_id, plan_node_id, node_key, node_kind, lane, node_state)
         SELECT qtg_uuid7(), request_id, plan_node_id, 'n2', node_kind, lane, 'BLOCKED'
         FROM movement_request_nodes WHERE id = $1 RETURNING executor_key",
    )
    .bind(n)
    .fetch_one(&pool)
    .await?;
    assert_eq!(key.as_deref(), Some(EXECUTOR), "an insert that does not name the key");

    // A row from before the key, made READY since.
    sqlx::query("UPDATE movement_request_nodes SET executor_key = NULL WHERE id = $1").bind(n).execute(&pool).await?;
    let key: Option<String> = sqlx::query_scalar("SELECT executor_key FROM movement_request_nodes WHERE id = $1")
        .bind(n)
        .fetch_one(&pool)
        .await?;
    assert_eq!(key, None, "the trigger fills an insert only");
    assert_eq!(dispatchable(&pool).await?, vec![n]);
    Ok(())
}

/// Migrations 0042–0045 on a database that already has nodes (an upgrade): the READY nodes get
/// their executor key and are listed from the new index; a node that becomes READY later
/// without one (an operator's retry of a FAILED node) is listed from the keyless one.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_upgrade_gives_the_unfinished_nodes_their_executor_key(pool: PgPool) -> Result<()> {
    install(&pool, "t.upgrade", &plan(vec![action("n")], &[])).await?;
    let ready = ready_in(&pool, "t.upgrade", "r", "other").await?;
    let failed = ready_in(&pool, "t.upgrade", "f", "other").await?;
    walk(&pool, failed, &[NodeState::Ready, NodeState::Preparing, NodeState::Failed]).await?;
    // The schema and the nodes as the release before 0042 left them.
    sqlx::raw_sql(
        "DROP TRIGGER mrn_executor_key ON movement_request_nodes;
         DROP FUNCTION qtg_node_executor_key();
         ALTER TABLE movement_request_nodes DROP COLUMN executor_key;
         CREATE INDEX mrn_dispatch ON movement_request_nodes (created_at, id)
             WHERE node_state = 'READY' AND node_kind <> 'manual';
         DELETE FROM _sqlx_migrations WHERE version >= 42;",
    )
    .execute(&pool)
    .await?;
    qtg_store::MIGRATOR.run(&pool).await.map_err(|e| StoreError::Migrate(e.to_string()))?;

    let key = |node: Uuid| {
        sqlx::query_scalar::<_, Option<String>>("SELECT executor_key FROM movement_request_nodes WHERE id = $1")
            .bind(node)
            .fetch_one(&pool)
    };
    assert_eq!(key(ready).await?.as_deref(), Some(EXECUTOR), "a READY node is filled");
    assert_eq!(key(failed).await?, None, "a finished one is left as it was");
    let old_index: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('mrn_dispatch')::text").fetch_one(&pool).await?;
    assert_eq!(old_index, None, "0045 dropped the index 0043 and 0044 replace");
    assert_eq!(dispatchable(&pool).await?, vec![ready]);

    write(&pool, failed, NodeState::Failed, NodeState::Ready, &NodePatch::default()).await?.or_stale()?;
    assert_eq!(key(failed).await?, None);
    assert_eq!(dispatchable(&pool).await?, vec![ready, failed], "READY without a key, and listed");
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_pause_holds_ready_nodes_until_every_holding_scope_is_resumed(pool: PgPool) -> Result<()> {
    let (m, n) = ready_node(&pool, "t.pause").await?;
    let mut conn = pool.acquire().await?;
    let (p, new) = controls::pause(&mut conn, "global", "", "incident", "ops").await?;
    assert!(new);
    assert_eq!((p.scope.as_str(), p.target.as_str(), p.paused_by.as_str()), ("global", "", "ops"));
    let (p, new) = controls::pause(&mut conn, "global", "", "incident 2", "ops2").await?;
    assert!(!new, "a second pause of the same scope updates the first");
    assert_eq!((p.reason.as_str(), p.paused_by.as_str()), ("incident 2", "ops"));
    controls::pause(&mut conn, "executor", EXECUTOR, "bad venue", "ops").await?;
    controls::pause(&mut conn, "lane", "other", "lane down", "ops").await?;
    let scopes: Vec<_> = controls::list(&mut conn).await?.into_iter().map(|p| p.scope).collect();
    assert_eq!(scopes, vec!["global", "lane", "executor"]);

    assert!(dispatchable(&pool).await?.is_empty());
    assert_eq!(held_by(&mut conn, n).await?.as_deref(), Some("global:"));
    let hold = movements::nodes(&mut conn, m.id).await?.remove(0).dispatch_hold.expect("held");
    assert_eq!((hold.scope.as_str(), hold.reason.as_str()), ("global", "incident 2"));

    assert_eq!(controls::resume(&mut conn, "global", "").await?.map(|p| p.scope).as_deref(), Some("global"));
    assert_eq!(controls::resume(&mut conn, "global", "").await?, None);
    assert_eq!(held_by(&mut conn, n).await?.as_deref(), Some("lane:other"));
    assert!(dispatchable(&pool).await?.is_empty());
    controls::resume(&mut conn, "lane", "other").await?.expect("lane paused");
    assert_eq!(held_by(&mut conn, n).await?.as_deref(), Some(&*format!("executor:{EXECUTOR}")));
    assert!(dispatchable(&pool).await?.is_empty());
    controls::resume(&mut conn, "executor", EXECUTOR).await?.expect("executor paused");
    assert_eq!(held_by(&mut conn, n).await?, None);
    assert_eq!(dispatchable(&pool).await?, vec![n]);
    assert!(controls::list(&mut conn).await?.is_empty());
    Ok(())
}

/// A node claimed before the pause committed: the arm (the write that lets a submit reach the
/// venue) re-checks the pause in its statement and matches nothing.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_pause_committed_after_the_claim_refuses_the_arm(pool: PgPool) -> Result<()> {
    let (_, n) = ready_node(&pool, "t.pause.arm").await?;
    let token = Uuid::new_v4();
    write(&pool, n, NodeState::Ready, NodeState::Preparing, &claim_patch(token, Duration::from_secs(300)))
        .await?
        .or_stale()?;
    let mut conn = pool.acquire().await?;
    controls::pause(&mut conn, "executor", EXECUTOR, "stop", "ops").await?;
    let arm = NodePatch {
        begin_attempt: true,
        guard: Guard { claim_token: Some(token), attempt_no: Some(0), dispatchable: true, ..Guard::default() },
        ..NodePatch::default()
    };
    assert!(write(&pool, n, NodeState::Preparing, NodeState::Submitting, &arm).await?.is_stale());
    assert_eq!(node_state(&pool, n).await?, (NodeState::Preparing, 0));
    controls::resume(&mut conn, "executor", EXECUTOR).await?.expect("paused");
    assert_eq!(write(&pool, n, NodeState::Preparing, NodeState::Submitting, &arm).await?.applied(), Some(1));
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_operator_lock_is_busy_while_another_holds_the_row(pool: PgPool) -> Result<()> {
    let (m, _) = ready_node(&pool, "t.nowait").await?;
    let mut tx1 = pool.begin().await?;
    assert_eq!(claims::lock_request_nowait(&mut tx1, m.id).await?, Some(RequestState::Executing));
    let mut tx2 = pool.begin().await?;
    assert!(matches!(claims::lock_request_nowait(&mut tx2, m.id).await, Err(StoreError::Busy(_))));
    // The failed NOWAIT left tx2 usable (its savepoint was rolled back).
    assert_eq!(claims::lock_request_nowait(&mut tx2, Uuid::new_v4()).await?, None);
    let nodes = claims::lock_nodes_nowait(&mut tx1, m.id).await?;
    assert_eq!(nodes.len(), 1);
    assert!(matches!(claims::lock_nodes_nowait(&mut tx2, m.id).await, Err(StoreError::Busy(_))));
    tx1.rollback().await?;
    assert_eq!(claims::lock_request_nowait(&mut tx2, m.id).await?, Some(RequestState::Executing));
    tx2.rollback().await?;
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn hold_back_keeps_a_node_from_dispatch_and_records_why(pool: PgPool) -> Result<()> {
    let (_, n) = ready_node(&pool, "t.hold").await?;
    let mut conn = pool.acquire().await?;
    let why = Call::failed("claim", "error", "DB_ERROR", "connection reset", 0);
    assert!(claims::hold_back(&mut conn, n, 300.0, &why, "dispatcher").await?);
    assert!(!claims::hold_back(&mut conn, Uuid::new_v4(), 300.0, &why, "dispatcher").await?);
    assert!(dispatchable(&pool).await?.is_empty());
    let last = events::history(&mut conn, n, 1, true).await?.remove(0);
    assert_eq!((last["method"].as_str(), last["error_code"].as_str()), (Some("claim"), Some("DB_ERROR")));
    assert_eq!(last["actor"], "dispatcher");
    assert_eq!(node_state(&pool, n).await?.0, NodeState::Ready);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn observe_takes_due_nodes_and_says_when_the_next_is_due(pool: PgPool) -> Result<()> {
    let (_, n) = ready_node(&pool, "t.observe").await?;
    walk(&pool, n, &[NodeState::Ready, NodeState::Preparing, NodeState::Submitting]).await?;
    let later = NodePatch { next_observe: Schedule::In(Duration::from_secs(3600)), ..NodePatch::default() };
    write(&pool, n, NodeState::Submitting, NodeState::Submitted, &later).await?.or_stale()?;
    let mut conn = pool.acquire().await?;
    assert!(claims::candidates(&mut conn, Pickup::Observe, &served(), &[], 10).await?.is_empty());
    let due = claims::next_due_in(&mut conn, Pickup::Observe, &[]).await?.expect("scheduled");
    assert!((3500.0..=3600.0).contains(&due), "{due}");
    let now = NodePatch { next_observe: Schedule::In(Duration::ZERO), ..NodePatch::default() };
    qtg_store::transition::poll_node(&mut conn, n, NodeState::Submitted, &now).await?.or_stale()?;
    assert_eq!(claims::candidates(&mut conn, Pickup::Observe, &served(), &[], 10).await?, vec![n]);
    assert_eq!(claims::next_due_in(&mut conn, Pickup::Observe, &[]).await?, None);
    assert_eq!(claims::next_due_in(&mut conn, Pickup::Dispatch, &[]).await?, None);
    Ok(())
}

/// Recovery takes an UNKNOWN node of its lane once the grace has passed (a negative grace:
/// already passed), but never one handed to a person (an observation timeout).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn recovery_takes_unknown_nodes_of_its_lane_not_those_handed_to_a_person(pool: PgPool) -> Result<()> {
    install(&pool, "t.recover", &plan(vec![action("n")], &[])).await?;
    let mut nodes = Vec::new();
    for (key, code) in [("k-open", None), ("k-person", Some("OBSERVATION_TIMEOUT"))] {
        let m = movement(&pool, &Spec { lane: "cex", ..Spec::new("t.recover", key) }).await?;
        execute(&pool, m.id).await?;
        let n = m.node("n");
        walk(&pool, n, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing]).await?;
        let arm = NodePatch { begin_attempt: true, submit_window: Duration::from_secs(60), ..NodePatch::default() };
        write(&pool, n, NodeState::Preparing, NodeState::Submitting, &arm).await?.or_stale()?;
        let unknown = match code {
            Some(code) => NodePatch::error(code, "no answer"),
            None => NodePatch::default(),
        };
        write(&pool, n, NodeState::Submitting, NodeState::Unknown, &unknown).await?.or_stale()?;
        nodes.push(n);
    }
    let mut conn = pool.acquire().await?;
    let recover = |lane| Pickup::Recover { lane, grace_seconds: -1.0, skew_seconds: 0.0 };
    assert_eq!(claims::candidates(&mut conn, recover(Lane::Cex), &served(), &[], 10).await?, vec![nodes[0]]);
    assert!(claims::candidates(&mut conn, recover(Lane::Other), &served(), &[], 10).await?.is_empty());
    let waiting = Pickup::Recover { lane: Lane::Cex, grace_seconds: 3600.0, skew_seconds: 0.0 };
    assert!(claims::candidates(&mut conn, waiting, &served(), &[], 10).await?.is_empty());
    let due = claims::next_due_in(&mut conn, waiting, &[(Lane::Cex, 3600.0)]).await?.expect("within the grace");
    assert!((3500.0..=3600.0).contains(&due), "{due}");
    drop(conn);

    let mut tx = pool.begin().await?;
    let item = claims::claim_first(&mut tx, recover(Lane::Cex), &served(), nodes[0]).await?.expect("claimable");
    assert_eq!((item.node_state, item.attempt_no, item.lane), (NodeState::Unknown, 1, Lane::Cex));
    tx.rollback().await?;

    // The armed attempt's submit_by, by the database's clock (60 s window).
    let mut conn = pool.acquire().await?;
    assert_eq!(claims::past_submit_by(&mut conn, nodes[0], 0.0).await?, (EXECUTOR.to_string(), false));
    assert_eq!(claims::past_submit_by(&mut conn, nodes[0], -120.0).await?, (EXECUTOR.to_string(), true));
    Ok(())
}
