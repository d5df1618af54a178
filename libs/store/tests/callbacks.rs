//! The callback outbox (`qtg_store::callbacks`): a claim is a leased, counted attempt; one
//! receiver's backlog never starves another; failures back off, then dead-letter; a dead
//! letter replays as the same event.

use qtg_store::callbacks::{self, CallbackFilter, CallbackRow};
use qtg_store::{PgPool, Result};
use serde_json::json;
use uuid::Uuid;

const A: &str = "https://a.example/hook";
const B: &str = "https://user:pw@B.example:8443/hook";

async fn enqueue(pool: &PgPool, event_type: &str, url: &str) -> Result<Uuid> {
    let mut conn = pool.acquire().await?;
    callbacks::enqueue_event(&mut conn, None, event_type, url, &json!({"chain": "1"})).await?;
    let newest = callbacks::list(&mut conn, &CallbackFilter::default(), None, 1).await?;
    Ok(newest[0].id)
}

async fn claim(pool: &PgPool, per_receiver: i64, lease: f64) -> Result<Vec<CallbackRow>> {
    let mut conn = pool.acquire().await?;
    callbacks::claim(&mut conn, 10, per_receiver, lease).await
}

async fn get(pool: &PgPool, id: Uuid) -> Result<CallbackRow> {
    let mut conn = pool.acquire().await?;
    let rows = callbacks::list(&mut conn, &CallbackFilter::default(), None, 100).await?;
    Ok(rows.into_iter().find(|r| r.id == id).expect("row"))
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_claim_leases_the_row_and_counts_the_attempt(pool: PgPool) -> Result<()> {
    let id = enqueue(&pool, "drift_detected", A).await?;
    let row = get(&pool, id).await?;
    assert_eq!((row.request_id, row.event_type.as_str(), row.sequence, row.attempts), (None, "drift_detected", 0, 0));
    assert_eq!(row.payload["event_type"], "drift_detected");
    assert_eq!(row.payload["event_id"], json!(row.event_id));
    assert_eq!(row.payload["data"], json!({"chain": "1"}));
    assert!(row.payload.get("movement_id").is_none(), "no movement, no movement_id: {}", row.payload);

    let claimed = claim(&pool, 10, 300.0).await?;
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].id, claimed[0].attempts), (id, 1));
    assert!(claimed[0].claim_token.is_some());
    assert!(claim(&pool, 10, 300.0).await?.is_empty(), "leased rows are not claimed twice");

    let mut conn = pool.acquire().await?;
    callbacks::record_sent(&mut conn, id).await?;
    let sent = get(&pool, id).await?;
    assert_eq!(sent.status, "sent");
    assert!(sent.sent_at.is_some());
    assert!(callbacks::exists(&mut conn, id).await?);
    assert!(!callbacks::exists(&mut conn, Uuid::new_v4()).await?);
    Ok(())
}

/// Fairness: at most `per_receiver` rows of a host in flight, round-robin across hosts, alerts
/// first within a host.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn one_receivers_backlog_does_not_starve_another(pool: PgPool) -> Result<()> {
    let mut a_rows = Vec::new();
    for _ in 0..3 {
        a_rows.push(enqueue(&pool, "frontier_advanced", A).await?);
    }
    let a_alert = enqueue(&pool, "drift_detected", A).await?;
    let b_row = enqueue(&pool, "frontier_advanced", B).await?;
    let first = claim(&pool, 1, 300.0).await?;
    let mut ids: Vec<_> = first.iter().map(|r| r.id).collect();
    ids.sort();
    let mut expected = vec![a_alert, b_row];
    expected.sort();
    assert_eq!(ids, expected, "one per receiver, the alert first");
    assert!(claim(&pool, 1, 300.0).await?.is_empty(), "each receiver is at its bound");
    let more = claim(&pool, 2, 300.0).await?;
    assert_eq!(more.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a_rows[0]], "oldest first");
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_failure_backs_off_then_dead_letters_and_only_the_claim_holder_records_it(pool: PgPool) -> Result<()> {
    let id = enqueue(&pool, "drift_detected", A).await?;
    let token = claim(&pool, 10, 300.0).await?[0].claim_token.expect("token");
    let mut conn = pool.acquire().await?;
    assert_eq!(callbacks::record_failed(&mut conn, id, Uuid::new_v4(), 5, "500", None).await?, None);
    // The receiver's Retry-After (60 s) wins over the 2 s backoff of attempt 1: long enough
    // that "not due yet" below holds however slow this machine is.
    let failed = callbacks::record_failed(&mut conn, id, token, 5, "500", Some(60.0)).await?;
    assert_eq!(failed.as_deref(), Some("pending"));
    assert_eq!(callbacks::record_failed(&mut conn, id, token, 5, "500", None).await?, None, "the claim is spent");
    let row = get(&pool, id).await?;
    assert_eq!((row.last_error.as_deref(), row.attempts), (Some("500"), 1));
    assert!(row.next_attempt_at > row.created_at + chrono::Duration::seconds(59), "backs off by its Retry-After");
    assert!(claim(&pool, 10, 300.0).await?.is_empty(), "not due before its backoff");

    let last = enqueue(&pool, "drift_detected", A).await?;
    let token = claim(&pool, 10, 300.0).await?[0].claim_token.expect("token");
    assert_eq!(callbacks::record_failed(&mut conn, last, token, 1, "410", None).await?.as_deref(), Some("dlq"));
    let dlq =
        callbacks::list(&mut conn, &CallbackFilter { status: Some("dlq"), ..Default::default() }, None, 10).await?;
    assert_eq!(dlq.iter().map(|r| r.id).collect::<Vec<_>>(), vec![last]);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_dead_letter_replays_as_the_same_event_with_a_fresh_nonce(pool: PgPool) -> Result<()> {
    let id = enqueue(&pool, "drift_detected", A).await?;
    let mut conn = pool.acquire().await?;
    assert!(callbacks::replay(&mut conn, id).await?.is_none(), "only a dead letter replays");
    let token = claim(&pool, 10, 300.0).await?[0].claim_token.expect("token");
    callbacks::record_failed(&mut conn, id, token, 1, "gone", None).await?;
    let old = get(&pool, id).await?;
    let new = callbacks::replay(&mut conn, id).await?.expect("replayed");
    assert_ne!(new.id, id);
    assert_eq!((new.event_id, &new.payload, new.replay_of), (old.event_id, &old.payload, Some(id)));
    assert_eq!((new.status.as_str(), new.attempts), ("pending", 0));
    assert_ne!(new.callback_nonce, old.callback_nonce);
    assert_eq!(get(&pool, id).await?.status, "dlq", "the dead letter stays");
    // Replayed once: a second replay of it would deliver the event again for nothing.
    assert!(callbacks::replay(&mut conn, id).await?.is_none(), "a dead letter replays once");
    assert_eq!(callbacks::replayed_as(&mut conn, id).await?, Some(new.id));
    let open = CallbackFilter { status: Some("dlq"), replayed: Some(false), ..Default::default() };
    assert!(callbacks::list(&mut conn, &open, None, 10).await?.is_empty(), "a replayed dead letter is not open");
    assert_eq!(claim(&pool, 10, 300.0).await?.iter().map(|r| r.id).collect::<Vec<_>>(), vec![new.id]);
    Ok(())
}

/// Two operators replay the same dead letter at once: one replay, whichever commits first.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn concurrent_replays_of_a_dead_letter_make_one(pool: PgPool) -> Result<()> {
    let id = enqueue(&pool, "drift_detected", A).await?;
    let token = claim(&pool, 10, 300.0).await?[0].claim_token.expect("token");
    callbacks::record_failed(&mut *pool.acquire().await?, id, token, 1, "gone", None).await?;
    let mut first = pool.begin().await?;
    assert!(callbacks::replay(&mut first, id).await?.is_some());
    let second = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut tx = pool.begin().await?;
            let row = callbacks::replay(&mut tx, id).await?;
            tx.commit().await?;
            Ok::<_, qtg_store::StoreError>(row)
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    first.commit().await?;
    assert!(second.await.expect("joined")?.is_none(), "the second replay waits, then sees the first");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_callback_outbox WHERE replay_of = $1")
        .bind(id)
        .fetch_one(&pool)
        .await?;
    assert_eq!(n, 1);
    Ok(())
}

/// A sender that died holding the claim: its lease (0 s) is over, the row is claimed again,
/// and once every attempt is used it dead-letters without an outcome ever being recorded.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_row_whose_sender_never_answers_dead_letters_on_schedule(pool: PgPool) -> Result<()> {
    let id = enqueue(&pool, "drift_detected", A).await?;
    let mut conn = pool.acquire().await?;
    for attempt in 1..=5 {
        let claimed = claim(&pool, 10, 0.0).await?;
        assert_eq!(claimed.iter().map(|r| (r.id, r.attempts)).collect::<Vec<_>>(), vec![(id, attempt)]);
        let expected = if attempt < 5 { 0 } else { 1 };
        assert_eq!(callbacks::dead_letter_abandoned(&mut conn).await?, expected, "after attempt {attempt}");
    }
    let row = get(&pool, id).await?;
    assert_eq!(row.status, "dlq");
    assert!(row.last_error.as_deref().is_some_and(|e| e.contains("no outcome recorded")), "{:?}", row.last_error);
    assert!(claim(&pool, 10, 0.0).await?.is_empty());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_list_filters_by_status_and_pages_by_its_cursor(pool: PgPool) -> Result<()> {
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(enqueue(&pool, "drift_detected", A).await?);
    }
    let mut conn = pool.acquire().await?;
    callbacks::record_sent(&mut conn, ids[0]).await?;
    let page =
        callbacks::list(&mut conn, &CallbackFilter { status: Some("pending"), ..Default::default() }, None, 1).await?;
    assert_eq!(page.iter().map(|r| r.id).collect::<Vec<_>>(), vec![ids[2]]);
    let after = page.last().map(|r| (r.created_at, r.id));
    let rest = callbacks::list(&mut conn, &CallbackFilter { status: Some("pending"), ..Default::default() }, after, 10)
        .await?;
    assert_eq!(rest.iter().map(|r| r.id).collect::<Vec<_>>(), vec![ids[1]]);
    // Shown with the URL's credentials masked.
    let shown = serde_json::to_value(get(&pool, enqueue(&pool, "drift_detected", B).await?).await?).expect("json");
    assert!(!shown["callback_url"].as_str().unwrap_or_default().contains("pw"), "{shown}");
    Ok(())
}
