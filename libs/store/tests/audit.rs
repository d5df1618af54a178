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

/// A callback row of no movement (as a drift alert's), `status` and sent or created `days` ago.
async fn callback(pool: &PgPool, status: &str, days: f64, replay_of: Option<Uuid>) -> Result<Uuid> {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO movement_callback_outbox (id, event_id, event_type, sequence, payload, callback_url, status,
             callback_timestamp, callback_nonce, replay_of, sent_at, created_at)
         VALUES ($1, gen_random_uuid(), 'drift_detected', 1, '{}', 'https://hooks.example.com/q', $2, 0,
             gen_random_uuid()::text, $3, CASE WHEN $2 = 'sent' THEN now() - make_interval(days => $4::int) END,
             now() - make_interval(days => $4::int))",
    )
    .bind(id)
    .bind(status)
    .bind(replay_of)
    .bind(days as i32)
    .execute(pool)
    .await?;
    Ok(id)
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_outboxes_keep_what_lives_nowhere_else(pool: PgPool) -> Result<()> {
    use qtg_store::retention::{prune_outboxes, Pruned};
    let ninety_days = std::time::Duration::from_secs(90 * 86_400);
    let mut conn = pool.acquire().await?;
    for actor in ["a", "b", "c"] {
        AuditRecord::new(actor, "control.pause", "control", "global").record(&mut conn).await?;
    }
    drop(conn);
    assert_eq!(promote(&pool).await?, 3);
    // Two promoted 100 days ago, one yesterday; one more never promoted, made 100 days ago.
    sqlx::query("UPDATE audit_outbox SET promoted_at = now() - interval '100 days' WHERE actor IN ('a', 'b')")
        .execute(&pool)
        .await?;
    sqlx::query("UPDATE audit_outbox SET promoted_at = now() - interval '1 day' WHERE actor = 'c'")
        .execute(&pool)
        .await?;
    let mut conn = pool.acquire().await?;
    AuditRecord::new("d", "control.pause", "control", "global").record(&mut conn).await?;
    drop(conn);
    sqlx::query("UPDATE audit_outbox SET created_at = now() - interval '100 days' WHERE actor = 'd'")
        .execute(&pool)
        .await?;

    let old = callback(&pool, "sent", 100.0, None).await?;
    let replayed = callback(&pool, "sent", 100.0, None).await?;
    let replay = callback(&pool, "pending", 1.0, Some(replayed)).await?;
    let dead = callback(&pool, "dlq", 100.0, None).await?;
    let recent = callback(&pool, "sent", 1.0, None).await?;

    let mut conn = pool.acquire().await?;
    assert_eq!(prune_outboxes(&mut conn, ninety_days, 1).await?, Pruned { audit: 1, callbacks: 1 });
    assert_eq!(prune_outboxes(&mut conn, ninety_days, 1).await?, Pruned { audit: 1, callbacks: 0 });
    assert_eq!(prune_outboxes(&mut conn, ninety_days, 10).await?, Pruned::default(), "nothing more is due");
    drop(conn);

    let actors: Vec<String> = sqlx::query_scalar("SELECT actor FROM audit_outbox ORDER BY id").fetch_all(&pool).await?;
    assert_eq!(actors, ["c", "d"], "the recent and the unpromoted rows stay");
    let left: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM movement_callback_outbox ORDER BY created_at, id").fetch_all(&pool).await?;
    assert!(!left.contains(&old), "an old acknowledged callback goes");
    for kept in [replayed, replay, dead, recent] {
        assert!(left.contains(&kept), "a replayed, pending, dead-lettered or recent callback stays");
    }
    // The trail itself is whole, and promotion goes on after the deletions.
    assert_eq!(events(&pool, &AuditFilter::default()).await?.len(), 3);
    assert_eq!(promote(&pool).await?, 1, "the unpromoted row is promoted as before");
    assert_eq!(events(&pool, &AuditFilter::default()).await?.len(), 4);
    Ok(())
}
