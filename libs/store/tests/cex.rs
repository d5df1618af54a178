//! The CEX lane's key store (`qtg_store::cex`): a key is marked sent once, a void key never
//! reaches the venue, an older or late attempt is refused before any venue call, and the
//! nonce fence closes for good.

use chrono::{Duration, Utc};
use qtg_store::cex::{self, KeyStatus, Recorded};
use qtg_store::{PgPool, Result};
use serde_json::json;
use uuid::Uuid;

const VENUE: &str = "binance";

fn deadline() -> chrono::DateTime<Utc> {
    Utc::now() + Duration::hours(1)
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_key_is_marked_sent_once_and_never_sent_again(pool: PgPool) -> Result<()> {
    let node = Uuid::new_v4();
    let key = format!("{node}:1");
    assert_eq!(cex::record(&pool, &key, VENUE, node, 1, deadline()).await?, Recorded::Fresh);
    assert_eq!(cex::record(&pool, &key, VENUE, node, 1, deadline()).await?, Recorded::Fresh, "recorded, never sent");
    let request = json!({"amount": "10", "address": "addr"});
    assert!(cex::mark_sent(&pool, &key, &request).await?);
    assert!(!cex::mark_sent(&pool, &key, &json!({"amount": "11"})).await?, "sent once");
    match cex::record(&pool, &key, VENUE, node, 1, deadline()).await? {
        Recorded::AlreadySent(k) => {
            assert_eq!((k.status, k.request_node_id, k.attempt_no), (KeyStatus::Sent, node, 1));
            assert_eq!(k.request, Some(request), "what was sent is kept, not the later attempt's");
        }
        other => panic!("a repeated submit must look the key up: {other:?}"),
    }
    assert!(!cex::mark_sent(&pool, "never-recorded", &json!({})).await?);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn concurrent_senders_of_one_key_make_one_send(pool: PgPool) -> Result<()> {
    let node = Uuid::new_v4();
    let key = format!("{node}:1");
    cex::record(&pool, &key, VENUE, node, 1, deadline()).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (pool, key) = (pool.clone(), key.clone());
        tasks.spawn(async move { cex::mark_sent(&pool, &key, &json!({"sender": i})).await });
    }
    let mut sent = 0;
    while let Some(r) = tasks.join_next().await {
        sent += r.expect("task")? as u32;
    }
    assert_eq!(sent, 1);
    Ok(())
}

/// Recovery voids a key it found absent — atomically against a submit about to send it: a
/// key voided first is never sent; a key sent first is left alone and returned.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_void_key_is_never_sent_and_a_sent_key_is_never_voided_as_unsent(pool: PgPool) -> Result<()> {
    let node = Uuid::new_v4();
    let (unsent, sent, unknown) = (format!("{node}:1"), format!("{node}:2"), format!("{node}:3"));
    cex::record(&pool, &unsent, VENUE, node, 1, deadline()).await?;
    assert_eq!(cex::void_unsent(&pool, &unsent, VENUE, node, 1, "absent").await?, None);
    assert!(!cex::mark_sent(&pool, &unsent, &json!({})).await?, "void: nothing may be sent");
    assert_eq!(cex::record(&pool, &unsent, VENUE, node, 1, deadline()).await?, Recorded::Void(Some("absent".into())));

    cex::record(&pool, &sent, VENUE, node, 2, deadline()).await?;
    assert!(cex::mark_sent(&pool, &sent, &json!({"amount": "1"})).await?);
    let left = cex::void_unsent(&pool, &sent, VENUE, node, 2, "absent").await?.expect("a sent key is returned");
    assert_eq!((left.status, left.void_reason), (KeyStatus::Sent, None));
    // Past its deadline with no such withdrawal at the venue: voided once.
    assert!(cex::void_sent(&pool, &sent, "past submit_by, not in history").await?);
    assert!(!cex::void_sent(&pool, &sent, "again").await?);
    assert_eq!(cex::get(&pool, &sent).await?.map(|k| k.status), Some(KeyStatus::Void));

    // A key recovery never saw recorded is voided too (the submit may not have recorded it yet).
    assert_eq!(cex::void_unsent(&pool, &unknown, VENUE, node, 3, "absent").await?, None);
    assert_eq!(cex::get(&pool, &unknown).await?.map(|k| k.status), Some(KeyStatus::Void));
    assert_eq!(cex::record(&pool, &unknown, VENUE, node, 3, deadline()).await?, Recorded::Void(Some("absent".into())));
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_older_or_late_attempt_is_refused_before_any_venue_call(pool: PgPool) -> Result<()> {
    let node = Uuid::new_v4();
    assert_eq!(cex::record(&pool, &format!("{node}:2"), VENUE, node, 2, deadline()).await?, Recorded::Fresh);
    assert_eq!(
        cex::record(&pool, &format!("{node}:1"), VENUE, node, 1, deadline()).await?,
        Recorded::Superseded { newest: 2 }
    );
    assert_eq!(cex::get(&pool, &format!("{node}:1")).await?, None, "a refused attempt records nothing");

    let late = format!("{node}:3");
    let past = Utc::now() - Duration::hours(1);
    assert_eq!(cex::record(&pool, &late, VENUE, node, 3, past).await?, Recorded::Late);
    let k = cex::get(&pool, &late).await?.expect("voided");
    assert_eq!((k.status, k.void_reason.as_deref()), (KeyStatus::Void, Some("received after submit_by")));
    assert!(!cex::mark_sent(&pool, &late, &json!({})).await?);

    let refused = format!("{node}:4");
    cex::void(&pool, &refused, VENUE, node, 4, "venue refused").await?;
    assert_eq!(
        cex::record(&pool, &refused, VENUE, node, 4, deadline()).await?,
        Recorded::Void(Some("venue refused".into()))
    );
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn once_the_fence_is_asked_for_nothing_more_is_signed(pool: PgPool) -> Result<()> {
    let node = Uuid::new_v4();
    let key = format!("{node}:1");
    cex::record(&pool, &key, "kraken", node, 1, deadline()).await?;
    assert_eq!(cex::request_fence(&pool, &key).await?, None, "only a sent key is fenced");
    assert!(cex::mark_sent(&pool, &key, &json!({})).await?);
    let venue_time = Utc::now();
    assert!(cex::note_nonce(&pool, &key, venue_time, 1001).await?);
    cex::note_signature(&pool, &key, venue_time, 5000).await?;
    let fenced = cex::request_fence(&pool, &key).await?.expect("sent");
    assert_eq!((fenced.nonce, fenced.recv_window_ms, fenced.fenced_at), (Some(1001), Some(5000), None));
    assert!(!cex::note_nonce(&pool, &key, venue_time, 1002).await?, "fence asked for: nothing more is signed");
    let at = Utc::now();
    cex::note_fenced(&pool, &key, at).await?;
    cex::note_fenced(&pool, &key, at + Duration::hours(1)).await?;
    let k = cex::get(&pool, &key).await?.expect("key");
    assert_eq!(k.nonce, Some(1001));
    let first = k.fenced_at.expect("fenced");
    assert!((first - at).num_milliseconds().abs() < 1, "the first fence time is kept: {first} {at}");
    Ok(())
}
