//! What the treasury side stores: capital transfer requests (`qtg_store::capital`), balance
//! snapshots (`qtg_store::balances`) and the venues' own transfer history
//! (`qtg_store::venue_transfers`).

mod common;

use chrono::{Duration, Utc};
use common::*;
use qtg_core::{NodeState, RequestState};
use qtg_store::capital::{self, NewTransfer};
use qtg_store::transition::NodePatch;
use qtg_store::venue_transfers::{self, NewTransfer as VenueRow};
use qtg_store::{balances, cex, PgPool, Result};
use serde_json::json;
use uuid::Uuid;

fn transfer<'a>(key: &'a str, amount: &'a str) -> NewTransfer<'a> {
    NewTransfer {
        requested_by: "treasury",
        idempotency_key: key,
        body_hash: "b1",
        source: "binance:main",
        destination: "0xdest",
        asset: "USDC",
        amount,
        reason: "rebalance",
        template_key: "t.cap",
        template_version: None,
        callback_url: None,
    }
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_capital_transfer_is_created_once_and_moves_by_compare_and_set(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let (t, fresh) = capital::insert(&mut conn, &transfer("k1", "1000.50")).await?;
    assert!(fresh);
    assert_eq!((t.state.as_str(), t.amount.as_str(), t.movement_id, t.closed_at), ("PENDING", "1000.50", None, None));
    let (again, fresh) = capital::insert(&mut conn, &NewTransfer { body_hash: "b2", ..transfer("k1", "5") }).await?;
    assert!(!fresh);
    assert_eq!((again.id, again.body_hash.as_str(), again.amount.as_str()), (t.id, "b1", "1000.50"));
    assert!(capital::insert(&mut conn, &transfer("k0", "0")).await.is_err(), "amount must be positive");

    let m = one_node_movement(&pool, "t.cap", None).await?;
    assert!(capital::set_state(&mut conn, t.id, "PENDING", "MOVEMENT_CREATED", Some(m.id), None).await?);
    assert!(!capital::set_state(&mut conn, t.id, "PENDING", "FAILED", None, Some("late")).await?, "stale");
    let now = capital::get(&mut conn, t.id).await?.expect("transfer");
    assert_eq!((now.state.as_str(), now.movement_id), ("MOVEMENT_CREATED", Some(m.id)));
    assert_eq!(now.movement_state.as_deref(), Some("PENDING_APPROVAL"));
    assert!(capital::set_state(&mut conn, t.id, "MOVEMENT_CREATED", "COMPLETED", None, Some("done")).await?);
    let done = capital::get(&mut conn, t.id).await?.expect("transfer");
    assert_eq!((done.movement_id, done.outcome.as_deref()), (Some(m.id), Some("done")), "kept through the move");
    assert!(done.closed_at.is_some());
    assert!(capital::get(&mut conn, Uuid::new_v4()).await?.is_none());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_follow_up_takes_stale_open_requests_and_finished_movements(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let (open, _) = capital::insert(&mut conn, &transfer("open", "1")).await?;
    let (closed, _) = capital::insert(&mut conn, &transfer("closed", "1")).await?;
    let (followed, _) = capital::insert(&mut conn, &transfer("followed", "1")).await?;
    assert!(capital::set_state(&mut conn, closed.id, "PENDING", "FAILED", None, Some("refused")).await?);
    let m = one_node_movement(&pool, "t.cap", None).await?;
    capital::set_state(&mut conn, followed.id, "PENDING", "MOVEMENT_CREATED", Some(m.id), None).await?;

    // Nothing is stale within the hour, and the movement is still pending.
    assert!(capital::due(&mut conn, 3600.0, 10).await?.is_empty());
    let mut stale = capital::due(&mut conn, -1.0, 10).await?;
    stale.sort();
    let mut expected = vec![open.id, followed.id];
    expected.sort();
    assert_eq!(stale, expected, "open requests only");

    // Its movement completed: due at once, whatever the threshold.
    move_request(&pool, m.id, RequestState::PendingApproval, RequestState::Approved).await?;
    move_request(&pool, m.id, RequestState::Approved, RequestState::Completed).await?;
    assert_eq!(capital::due(&mut conn, 3600.0, 10).await?, vec![followed.id]);
    let mut tx1 = pool.begin().await?;
    let locked = capital::lock_due(&mut tx1, followed.id, 3600.0).await?.expect("due");
    assert_eq!(locked.movement_state.as_deref(), Some("COMPLETED"));
    let mut tx2 = pool.begin().await?;
    assert!(capital::lock_due(&mut tx2, followed.id, 3600.0).await?.is_none(), "another replica holds it");
    assert!(capital::lock_due(&mut tx2, open.id, 3600.0).await?.is_none(), "not due");
    tx2.rollback().await?;
    tx1.rollback().await?;
    capital::touch(&mut conn, open.id).await?;
    let listed = capital::list(&mut conn, Some("PENDING"), None, 10).await?;
    assert_eq!(listed.iter().map(|t| t.id).collect::<Vec<_>>(), vec![open.id]);
    let page = capital::list(&mut conn, None, None, 2).await?;
    let last = page.last().expect("page");
    let rest = capital::list(&mut conn, None, Some((last.created_at, last.id)), 10).await?;
    assert_eq!(page.len() + rest.len(), 3);
    assert_eq!(rest.last().map(|t| t.id), Some(open.id), "oldest last");
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_settlement_is_read_from_the_completed_nodes(pool: PgPool) -> Result<()> {
    install(&pool, "t.settle", &plan(vec![action("a"), action("b")], &[])).await?;
    let m = movement(&pool, &Spec::new("t.settle", "k")).await?;
    let mut conn = pool.acquire().await?;
    let (t, _) = capital::insert(&mut conn, &transfer("k", "100")).await?;
    assert_eq!(capital::record_settlement(&mut conn, t.id, m.id).await?, None, "no node completed");
    let refs = |v: serde_json::Value| NodePatch {
        merge_refs: v.as_object().cloned().unwrap_or_default(),
        ..NodePatch::default()
    };
    walk(&pool, m.node("a"), &[NodeState::Blocked, NodeState::Ready]).await?;
    write(
        &pool,
        m.node("a"),
        NodeState::Ready,
        NodeState::Completed,
        &refs(json!({"fee_model": "gross",
        "withdrawal_fee": "1", "debit": "101"})),
    )
    .await?
    .or_stale()?;
    walk(&pool, m.node("b"), &[NodeState::Blocked, NodeState::Ready]).await?;
    write(
        &pool,
        m.node("b"),
        NodeState::Ready,
        NodeState::Completed,
        &refs(json!({"fee_model": "net",
        "deposit_amount": "99.9"})),
    )
    .await?
    .or_stale()?;
    let expected = json!({"fee_model": "gross", "fee_priced": "1", "debit": "101", "arrived": "99.9"});
    assert_eq!(capital::record_settlement(&mut conn, t.id, m.id).await?, Some(expected.clone()));
    assert_eq!(capital::get(&mut conn, t.id).await?.expect("transfer").settlement, Some(expected));
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn balances_answer_the_latest_snapshot_and_whether_a_source_covers(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    assert_eq!(
        balances::append(&mut conn, "binance", &[("main", "USDC", "50", "0"), ("main", "ETH", "2", "1")], "worker")
            .await?,
        2
    );
    balances::append(&mut conn, "binance", &[("main", "USDC", "150.25", "0.5")], "fresh").await?;
    balances::append(&mut conn, "kraken", &[("main", "usdc", "10", "0")], "worker").await?;

    let latest = balances::latest(&mut conn, 3600.0, None, Some("usdc")).await?;
    let seen: Vec<_> =
        latest.iter().map(|s| (s.venue_key.as_str(), s.free.as_str(), s.source.as_str(), s.stale)).collect();
    assert_eq!(seen, vec![("binance", "150.25", "fresh", false), ("kraken", "10", "worker", false)]);
    assert!(balances::latest(&mut conn, -1.0, Some("kraken"), None).await?.iter().all(|s| s.stale));
    let history = balances::history(&mut conn, 3600.0, "binance", "usdc", None, 10).await?;
    assert_eq!(history.iter().map(|s| s.free.as_str()).collect::<Vec<_>>(), vec!["50", "150.25"]);

    let (free, covers, _) =
        balances::source_covers(&mut conn, "BINANCE", "usdc", "150.25", 3600.0).await?.expect("known");
    assert_eq!((free.as_str(), covers), ("150.25", true));
    let (_, covers, _) = balances::source_covers(&mut conn, "binance", "USDC", "150.26", 3600.0).await?.expect("known");
    assert!(!covers);
    assert_eq!(balances::source_covers(&mut conn, "okx", "USDC", "1", 3600.0).await?, None, "unknown, not zero");
    // Only a fresh-enough snapshot counts.
    assert_eq!(balances::source_covers(&mut conn, "binance", "USDC", "1", -1.0).await?, None);

    assert_eq!(balances::delete_older_than(&mut conn, 3600.0, false).await?, 0);
    assert_eq!(balances::delete_older_than(&mut conn, -1.0, true).await?, 0, "not rolled up yet: kept");
    assert_eq!(balances::delete_older_than(&mut conn, -1.0, false).await?, 4);
    assert!(balances::latest(&mut conn, 3600.0, None, None).await?.is_empty());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_balance_that_is_not_a_finite_non_negative_decimal_is_refused_whole(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    for bad in ["NaN", "-1", "ten", "Infinity"] {
        let mut tx = pool.begin().await?;
        let res =
            balances::append(&mut tx, "binance", &[("main", "USDC", "5", "0"), ("main", "ETH", bad, "0")], "worker")
                .await;
        assert!(res.is_err(), "{bad} was stored");
        tx.rollback().await?;
    }
    assert!(balances::latest(&mut conn, 3600.0, None, None).await?.is_empty(), "nothing of the venue was stored");
    Ok(())
}

fn venue_row<'a>(venue_ref: &'a str, direction: &'a str, client_id: Option<&'a str>) -> VenueRow<'a> {
    VenueRow {
        account: "main",
        direction,
        venue_ref,
        asset: "USDC",
        network: Some("ETH"),
        amount: "100",
        fee: None,
        address: "0xdest",
        address_tag: None,
        tx_id: None,
        client_id,
        status: "pending",
        occurred_at: Some(Utc::now()),
    }
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn venue_history_is_upserted_once_and_only_what_changed_is_rewritten(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let rows = [venue_row("w1", "withdrawal", None), venue_row("d1", "deposit", None)];
    assert_eq!(venue_transfers::upsert(&mut conn, "binance", &rows).await?, 2);
    assert_eq!(venue_transfers::upsert(&mut conn, "binance", &rows).await?, 0, "re-reading changes nothing");
    let done =
        VenueRow { status: "done", tx_id: Some("0xtx"), fee: Some("1.5"), ..venue_row("w1", "withdrawal", None) };
    assert_eq!(venue_transfers::upsert(&mut conn, "binance", &[done]).await?, 1);
    // A later read without the tx id or fee does not erase them.
    let vague = VenueRow { status: "done", ..venue_row("w1", "withdrawal", None) };
    assert_eq!(venue_transfers::upsert(&mut conn, "binance", &[vague]).await?, 0);
    let listed = venue_transfers::list(&mut conn, Some("binance"), Some("withdrawal"), false, None, 10).await?;
    assert_eq!(listed.len(), 1);
    let w = &listed[0];
    assert_eq!((w.status.as_str(), w.tx_id.as_deref(), w.fee.as_deref()), ("done", Some("0xtx"), Some("1.5")));
    assert_eq!(venue_transfers::upsert(&mut conn, "kraken", &[venue_row("w1", "withdrawal", None)]).await?, 1);

    assert_eq!(venue_transfers::cursor(&mut conn, "binance").await?, None);
    let t1 = Utc::now();
    venue_transfers::advance_cursor(&mut conn, "binance", t1).await?;
    venue_transfers::advance_cursor(&mut conn, "binance", t1 - Duration::hours(1)).await?;
    let at = venue_transfers::cursor(&mut conn, "binance").await?.expect("cursor");
    assert!((at - t1).num_milliseconds().abs() < 1, "never moved back: {at} {t1}");
    Ok(())
}

/// A withdrawal is explained by qtg's client id — unless qtg voided that key — and a
/// withdrawal nothing explains is alerted once.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_unexplained_withdrawal_is_alerted_once(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.vt", None).await?;
    let n = m.node("n");
    let (ours, voided) = (format!("{n}:1"), format!("{n}:2"));
    cex::void(&pool, &voided, "binance", n, 2, "absent").await?;
    let mut conn = pool.acquire().await?;
    let rows = [
        venue_row("w-ours", "withdrawal", Some(&ours)),
        venue_row("w-voided", "withdrawal", Some(&voided)),
        venue_row("w-foreign", "withdrawal", Some("someone-else")),
    ];
    venue_transfers::upsert(&mut conn, "binance", &rows).await?;
    assert_eq!(venue_transfers::link(&mut conn, 3600.0).await?, 1);
    assert_eq!(venue_transfers::link(&mut conn, 3600.0).await?, 0, "linked once");
    let all = venue_transfers::list(&mut conn, None, None, false, None, 10).await?;
    let linked = all.iter().find(|t| t.venue_ref == "w-ours").expect("row");
    assert_eq!(
        (linked.request_node_id, linked.movement_id, linked.linked_by.as_deref()),
        (Some(n), Some(m.id), Some("client_id"))
    );

    let mut unexplained: Vec<_> =
        venue_transfers::list(&mut conn, None, None, true, None, 10).await?.into_iter().map(|t| t.venue_ref).collect();
    unexplained.sort();
    assert_eq!(unexplained, vec!["w-foreign", "w-voided"]);
    assert!(venue_transfers::unexplained_due(&mut conn, 3600.0, 10).await?.is_empty(), "within the grace");
    let due = venue_transfers::unexplained_due(&mut conn, -1.0, 10).await?;
    assert_eq!(due.len(), 2);
    assert!(venue_transfers::mark_alerted(&mut conn, due[0].id).await?);
    assert!(!venue_transfers::mark_alerted(&mut conn, due[0].id).await?, "alerted once");
    assert!(!venue_transfers::mark_alerted(&mut conn, linked.id).await?, "explained: never alerted");
    assert_eq!(venue_transfers::unexplained_due(&mut conn, -1.0, 10).await?.len(), 1);
    Ok(())
}

/// balance_history_rollup's exactly-once: a granularity's progress row is held by one
/// transaction; another skips it (and rolls nothing), then finds the buckets done.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_granularity_is_rolled_by_one_holder_at_a_time(pool: PgPool) -> Result<()> {
    use balances::Granularity;
    sqlx::query(
        "INSERT INTO balance_snapshots (venue_key, account, asset, free, source, as_of)
         VALUES ('v', 'a', 'USDC', 10, 'worker', date_trunc('hour', now(), 'UTC') - interval '5 hours 30 minutes'),
                ('v', 'a', 'USDC', 12, 'worker', date_trunc('hour', now(), 'UTC') - interval '5 hours 10 minutes')",
    )
    .execute(&pool)
    .await?;
    let mut first = pool.begin().await?;
    let from = balances::lock_progress(&mut first, Granularity::Hour).await?.expect("free");
    assert_eq!(from, None, "nothing rolled yet");
    let mut second = pool.begin().await?;
    assert_eq!(balances::lock_progress(&mut second, Granularity::Hour).await?, None, "held: skipped");
    let rolled = balances::roll_hours(&mut first, from, 120.0).await?;
    assert_eq!(rolled.buckets, 1);
    first.commit().await?;
    let from = balances::lock_progress(&mut second, Granularity::Hour).await?.expect("free now");
    assert_eq!(from, rolled.until);
    assert_eq!(balances::roll_hours(&mut second, from, 120.0).await?.buckets, 0, "done once");
    // Even from the start again, a written bucket is left as it is.
    assert_eq!(balances::roll_hours(&mut second, None, 120.0).await?.buckets, 0);
    second.commit().await?;
    let mut conn = pool.acquire().await?;
    let r = balances::rollups(&mut conn, Granularity::Hour, "v", "usdc", None, 10).await?;
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].free_first.as_str(), r[0].free_last.as_str(), r[0].samples), ("10", "12", 2));
    assert_eq!(balances::delete_older_than(&mut conn, 60.0, true).await?, 2, "rolled: the retention may delete them");
    Ok(())
}
