//! The audit trail (`qtg_store::audit`): outbox rows are promoted exactly once, in outbox
//! order, by one promoter at a time — and a row not yet committed is waited for, not skipped.

use qtg_store::audit::{self, AuditFilter, AuditRecord};
use qtg_store::{PgPool, Result};
use serde_json::json;
use uuid::Uuid;

async fn promote(pool: &PgPool) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let n = audit::promote(&mut tx, 100).await?;
    tx.commit().await?;
    Ok(n)
}

async fn events(pool: &PgPool, filter: &AuditFilter) -> Result<Vec<audit::AuditEvent>> {
    let mut conn = pool.acquire().await?;
    audit::list(&mut conn, filter, 100).await
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn outbox_rows_are_promoted_exactly_once_in_order(pool: PgPool) -> Result<()> {
    let movement = Uuid::new_v4();
    let mut conn = pool.acquire().await?;
    AuditRecord::new("alice", "template.approve", "template", "t.a").data(json!({"v": 1})).record(&mut conn).await?;
    AuditRecord::new("bob", "movement.cancel", "movement", movement).movement(movement).record(&mut conn).await?;
    audit::record(
        &mut conn,
        &AuditRecord { actor: "alice", action: "control.pause", ..AuditRecord::new("x", "x", "control", "global") },
    )
    .await?;
    drop(conn);

    assert_eq!(promote(&pool).await?, 3);
    assert_eq!(promote(&pool).await?, 0, "nothing is promoted twice");
    let all = events(&pool, &AuditFilter::default()).await?;
    let seen: Vec<_> = all.iter().map(|e| (e.actor.as_str(), e.action.as_str(), e.entity_id.as_str())).collect();
    assert_eq!(
        seen,
        vec![
            ("alice", "template.approve", "t.a"),
            ("bob", "movement.cancel", &*movement.to_string()),
            ("alice", "control.pause", "global")
        ]
    );
    assert_eq!(all[0].data, json!({"v": 1}));
    assert_eq!(all[1].movement_id, Some(movement));

    let by_alice = events(&pool, &AuditFilter { actor: Some("alice".into()), ..AuditFilter::default() }).await?;
    assert_eq!(by_alice.len(), 2);
    let of_movement = events(&pool, &AuditFilter { movement_id: Some(movement), ..AuditFilter::default() }).await?;
    assert_eq!(of_movement.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), vec!["movement.cancel"]);
    let after_first = events(&pool, &AuditFilter { after_id: Some(all[0].id), ..AuditFilter::default() }).await?;
    assert_eq!(after_first.len(), 2);
    let pauses = events(&pool, &AuditFilter { action: Some("control.pause".into()), ..AuditFilter::default() }).await?;
    assert_eq!(pauses.len(), 1);
    Ok(())
}

/// An outbox id handed out to a transaction that has not committed yet is a hole: the
/// promoter stops before it (rather than promote the row after it and skip it forever) and
/// takes both, in order, once it commits. (The hole is waited for `HOLE_GRACE_SECONDS`, far
/// longer than this test takes between its statements.)
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_promoter_waits_for_an_uncommitted_row_before_it(pool: PgPool) -> Result<()> {
    let mut slow = pool.begin().await?;
    AuditRecord::new("slow", "first", "control", "a").record(&mut slow).await?;
    let mut conn = pool.acquire().await?;
    AuditRecord::new("fast", "second", "control", "b").record(&mut conn).await?;
    drop(conn);
    assert_eq!(promote(&pool).await?, 0, "the row after the hole waits");
    slow.commit().await?;
    assert_eq!(promote(&pool).await?, 2);
    let order: Vec<_> = events(&pool, &AuditFilter::default()).await?.into_iter().map(|e| e.action).collect();
    assert_eq!(order, vec!["first", "second"]);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn one_promoter_at_a_time(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    AuditRecord::new("a", "one", "control", "x").record(&mut conn).await?;
    drop(conn);
    let mut first = pool.begin().await?;
    assert_eq!(audit::promote(&mut first, 100).await?, 1);
    let mut second = pool.begin().await?;
    assert_eq!(audit::promote(&mut second, 100).await?, 0, "the first promoter holds the lock");
    second.rollback().await?;
    first.commit().await?;
    assert_eq!(events(&pool, &AuditFilter::default()).await?.len(), 1);
    Ok(())
}
