//! notification_dispatcher's store (`qtg_store::notify`): the outbox written by the triggers
//! in the transaction of each event (and rolled back with it), once per event; routing with
//! the approver rule, quiet hours and digests; a channel leased by one holder at a time and
//! within its rate; outcomes recorded by the lease, retried with backoff, dead-lettered,
//! audited.

mod common;

use common::*;
use qtg_core::RequestState;
use qtg_store::notify::{self, NewChannel, NewRoute};
use qtg_store::{PgPool, Result};
use serde_json::json;
use uuid::Uuid;

async fn channel(pool: &PgPool, name: &str, rate: i32) -> Result<Uuid> {
    let mut conn = pool.acquire().await?;
    let c = notify::create_channel(
        &mut conn,
        &NewChannel {
            id: Uuid::new_v4(),
            name,
            kind: "slack",
            config: &json!({"url_host": "hooks.example"}),
            secret: Some("https://hooks.example/T/B/secret"),
            rate_per_minute: rate,
            created_by: "admin",
        },
    )
    .await?
    .expect("a new name");
    assert!(c.secret_set);
    Ok(c.id)
}

async fn route(
    pool: &PgPool,
    channel_id: Uuid,
    kinds: &[&str],
    quiet: Option<(i32, i32)>,
    digest: Option<i32>,
) -> Result<()> {
    let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
    let mut conn = pool.acquire().await?;
    notify::create_route(
        &mut conn,
        &NewRoute {
            id: Uuid::new_v4(),
            channel_id,
            event_kinds: &kinds,
            templates: &[],
            min_severity: "info",
            approver: None,
            approver_role: None,
            quiet,
            digest_minutes: digest,
            created_by: "admin",
        },
    )
    .await?
    .expect("the channel exists");
    Ok(())
}

async fn kinds(pool: &PgPool) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar("SELECT kind FROM notifications ORDER BY created_at, kind").fetch_all(pool).await?)
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn events_write_their_notification_in_their_own_transaction_once(pool: PgPool) -> Result<()> {
    install(&pool, "t.n", &plan(vec![action("n")], &[])).await?;
    movement(&pool, &Spec::new("t.n", "untold")).await?;
    assert!(kinds(&pool).await?.is_empty(), "no route: nobody to tell, no outbox");
    let chat = channel(&pool, "chat", 30).await?;
    route(&pool, chat, &[], None, None).await?;
    let m = movement(&pool, &Spec::new("t.n", "k-1")).await?;
    assert_eq!(kinds(&pool).await?, ["approval_needed"], "created waiting for approval");
    // A rolled-back state change writes nothing.
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ('global', '', 'x', 'ops')")
        .execute(&mut *tx)
        .await?;
    tx.rollback().await?;
    assert_eq!(kinds(&pool).await?, ["approval_needed"]);
    sqlx::query("INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ('lane', 'cex', 'x', 'ops')")
        .execute(&pool)
        .await?;
    execute(&pool, m.id).await?;
    move_request(&pool, m.id, RequestState::Executing, RequestState::ManualIntervention).await?;
    let mut all = kinds(&pool).await?;
    all.sort();
    assert_eq!(all, ["approval_needed", "executor_paused", "movement_manual_intervention"]);
    // The same event written twice is one notification.
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT qtg_notify('approval_needed:' || $1, 'approval_needed', 'info', $1, 't.n', 's', '{}')")
        .bind(m.id)
        .execute(&mut *conn)
        .await?;
    assert_eq!(count(&pool, "SELECT count(*) FROM notifications WHERE movement_id = $1", m.id).await?, 2);
    // A node UNKNOWN past its grace and a stale worker, found by the scan, once each.
    sqlx::query("UPDATE movement_request_nodes SET node_state = 'UNKNOWN', updated_at = now() - interval '10 minutes'")
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO worker_heartbeats (worker, network_class, instance_id, last_beat_at)
         VALUES ('node_dispatcher', 'default', 'i-1', now() - interval '5 minutes')",
    )
    .execute(&pool)
    .await?;
    // Two nodes UNKNOWN (one per movement), one stale worker.
    assert_eq!(notify::scan_conditions(&mut conn, 300.0, 60.0, 3600.0).await?, 3);
    assert_eq!(notify::scan_conditions(&mut conn, 300.0, 60.0, 3600.0).await?, 0, "once per condition");
    // Retention: finished notifications go after it, with their deliveries; pending ones stay.
    // An approval_needed notification waits until its approver routes are judged.
    assert_eq!(notify::route(&mut conn, 100, 3, &[], &[]).await?.0, 5);
    let (evaluated, candidates) = notify::approver_candidates(&mut conn, 100).await?;
    assert_eq!((evaluated.len(), candidates.len()), (1, 0), "no route names an approver");
    assert_eq!(notify::route(&mut conn, 100, 3, &evaluated, &[]).await?.0, 1);
    sqlx::query("UPDATE notifications SET created_at = now() - interval '40 days'").execute(&pool).await?;
    // The approval is no longer wanted (the movement went on): routed to nobody.
    let undelivered = count(
        &pool,
        "SELECT count(*) FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id
          WHERE n.movement_id = $1 AND n.kind = 'approval_needed'",
        m.id,
    )
    .await?;
    assert_eq!(undelivered, 0);
    assert_eq!(notify::delete_older_than(&mut conn, 30.0 * 86_400.0).await?, 1, "pending deliveries keep the others");
    sqlx::query("UPDATE notification_deliveries SET status = 'sent'").execute(&pool).await?;
    assert_eq!(notify::delete_older_than(&mut conn, 30.0 * 86_400.0).await?, 5);
    assert_eq!(count(&pool, "SELECT count(*) FROM notifications WHERE $1 IS NOT NULL", m.id).await?, 0);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn routes_hold_quiet_hours_and_digests_and_a_channel_sends_one_message_at_a_time(pool: PgPool) -> Result<()> {
    let chat = channel(&pool, "chat", 30).await?;
    let quiet = channel(&pool, "quiet", 30).await?;
    let digest = channel(&pool, "digest", 30).await?;
    route(&pool, chat, &[], None, None).await?;
    // A second route to the same channel: still one delivery per notification.
    route(&pool, chat, &["executor_paused"], None, None).await?;
    // Quiet from this minute to the one before it (a day less a minute, wrapping midnight).
    let minute: i32 =
        sqlx::query_scalar("SELECT floor(extract(epoch FROM now() - date_trunc('day', now(), 'UTC')) / 60)::int")
            .fetch_one(&pool)
            .await?;
    route(&pool, quiet, &[], Some((minute, (minute + 1439) % 1440)), None).await?;
    route(&pool, digest, &[], None, Some(60)).await?;
    sqlx::query("INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ('global', '', 'x', 'ops')")
        .execute(&pool)
        .await?;
    let mut conn = pool.acquire().await?;
    assert_eq!(notify::route(&mut conn, 100, 3, &[], &[]).await?, (1, 3), "one notification, a delivery per channel");
    assert_eq!(notify::route(&mut conn, 100, 3, &[], &[]).await?, (0, 0), "routed once");
    let due: Vec<(String, bool)> = sqlx::query_as(
        "SELECT c.name, d.next_attempt_at <= now() FROM notification_deliveries d
           JOIN notification_channels c ON c.id = d.channel_id ORDER BY c.name",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(due, [("chat".into(), true), ("digest".into(), false), ("quiet".into(), false)]);

    // The chat channel is leased by one holder; another finds nothing to lease.
    let leased = notify::lease_channels(&mut conn, 10, 30.0).await?;
    assert_eq!(leased.iter().map(|l| l.channel_id).collect::<Vec<_>>(), [chat]);
    assert_eq!(leased[0].secret.as_deref(), Some("https://hooks.example/T/B/secret"));
    assert!(notify::lease_channels(&mut conn, 10, 30.0).await?.is_empty(), "one message in flight per channel");
    let token = leased[0].token;
    let taken = notify::take(&mut conn, chat, token, 25, 30.0).await?;
    assert_eq!((taken.len(), taken[0].kind.as_str(), taken[0].attempts), (1, "executor_paused", 1));
    // A failure: backoff, audited, the lease released.
    let ids = [taken[0].id];
    let out = notify::record(&mut conn, chat, token, &ids, Some("HTTP 500"), None).await?;
    assert_eq!(out, [(taken[0].id, "pending".to_string())]);
    let (delay, lease): (f64, Option<Uuid>) = sqlx::query_as(
        "SELECT extract(epoch FROM d.next_attempt_at - now())::float8, c.lease_token
           FROM notification_deliveries d JOIN notification_channels c ON c.id = d.channel_id WHERE d.id = $1",
    )
    .bind(taken[0].id)
    .fetch_one(&pool)
    .await?;
    assert!((1.0..=2.5).contains(&delay), "2^1 s backoff: {delay}");
    assert_eq!(lease, None);
    let stale = notify::record(&mut conn, chat, token, &ids, None, None).await?;
    assert!(stale.is_empty(), "a lease already recorded records nothing again");
    // Due again: the next attempts fail until the last dead-letters it.
    for attempt in 2..=3 {
        sqlx::query("UPDATE notification_deliveries SET next_attempt_at = now() WHERE id = $1")
            .bind(taken[0].id)
            .execute(&pool)
            .await?;
        let l = notify::lease_channels(&mut conn, 10, 30.0).await?;
        let t = notify::take(&mut conn, chat, l[0].token, 25, 30.0).await?;
        assert_eq!(t[0].attempts, attempt);
        let out = notify::record(&mut conn, chat, l[0].token, &ids, Some("HTTP 500"), Some(1.0)).await?;
        assert_eq!(out[0].1, if attempt == 3 { "dlq" } else { "pending" });
    }
    let audited: Vec<String> =
        sqlx::query_scalar("SELECT action FROM audit_outbox WHERE entity_type = 'notification' ORDER BY id")
            .fetch_all(&pool)
            .await?;
    assert_eq!(audited, ["notification.failed", "notification.failed", "notification.dead_lettered"]);

    // A channel at its rate is not leased within the minute.
    let slow = channel(&pool, "slow", 1).await?;
    route(&pool, slow, &["executor_paused"], None, None).await?;
    sqlx::query("INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ('lane', 'evm', 'x', 'ops')")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ('lane', 'cex', 'x', 'ops')")
        .execute(&pool)
        .await?;
    notify::route(&mut conn, 100, 3, &[], &[]).await?;
    let l = notify::lease_channels(&mut conn, 10, 30.0).await?;
    let mine = l.iter().find(|l| l.channel_id == slow).expect("slow leased");
    let t = notify::take(&mut conn, slow, mine.token, 1, 30.0).await?;
    notify::record(&mut conn, slow, mine.token, &[t[0].id], None, None).await?;
    for other in l.iter().filter(|l| l.channel_id != slow) {
        notify::release(&mut conn, other.channel_id, other.token).await?;
    }
    let again = notify::lease_channels(&mut conn, 10, 30.0).await?;
    assert!(again.iter().all(|l| l.channel_id != slow), "1 message a minute: the second waits");
    Ok(())
}
