//! The EVM lane's fence (`qtg_store::evm`): a nonce is live for one node at a time, a node
//! keeps its nonce until it is consumed, and a nonce a signature may exist for is never given
//! back; and the CCTP lane's claim on an attested V2 nonce (`qtg_store::cctp`).

mod common;

use common::*;
use qtg_core::NodeState;
use qtg_store::artifacts::{self, ArtifactKind};
use qtg_store::evm;
use qtg_store::{PgPool, Result};
use serde_json::json;
use uuid::Uuid;

const ADDRESS: &str = "0xAbCdEf0000000000000000000000000000000001";

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn concurrent_reservations_never_share_a_nonce(pool: PgPool) -> Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let pool = pool.clone();
        tasks.spawn(async move { evm::reserve(&pool, 1, ADDRESS, Uuid::new_v4(), 5).await });
    }
    let mut nonces = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let r = r.expect("task")?;
        assert_eq!((r.chain_id, r.address.as_str(), r.status.as_str()), (1, &*ADDRESS.to_lowercase(), "reserved"));
        nonces.push(r.nonce);
    }
    nonces.sort();
    assert_eq!(nonces, (5..13).collect::<Vec<_>>(), "distinct, from the chain's pending count up");
    // One node asking twice at once (a re-claim racing its predecessor) gets one reservation.
    let node = Uuid::new_v4();
    let (a, b) = tokio::join!(evm::reserve(&pool, 1, ADDRESS, node, 0), evm::reserve(&pool, 1, ADDRESS, node, 0));
    let (a, b) = (a?, b?);
    assert_eq!((a.id, a.nonce), (b.id, 13));
    // Another chain, or another address, has nonces of its own.
    assert_eq!(evm::reserve(&pool, 2, ADDRESS, Uuid::new_v4(), 0).await?.nonce, 0);
    assert_eq!(evm::reserve(&pool, 1, "0x0000000000000000000000000000000000000002", Uuid::new_v4(), 0).await?.nonce, 0);
    // The chain moved on past what was reserved here: never below its pending count.
    assert_eq!(evm::reserve(&pool, 1, ADDRESS, Uuid::new_v4(), 40).await?.nonce, 40);
    assert_eq!(evm::reserve(&pool, 1, ADDRESS, Uuid::new_v4(), 0).await?.nonce, 41);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_node_keeps_its_nonce_until_it_is_consumed(pool: PgPool) -> Result<()> {
    let node = Uuid::new_v4();
    let r = evm::reserve(&pool, 1, ADDRESS, node, 0).await?;
    assert_eq!(evm::reserve(&pool, 1, ADDRESS, node, 7).await?, r, "a re-claim reuses the reservation");
    assert!(evm::mark_broadcast(&pool, r.id, node, "0xAA").await?);
    assert!(evm::mark_broadcast(&pool, r.id, node, "0xaa").await?);
    assert!(evm::mark_broadcast(&pool, r.id, node, "0xbb").await?);
    assert!(!evm::mark_broadcast(&pool, r.id, Uuid::new_v4(), "0xcc").await?, "not the other node's");
    assert!(evm::mark_cancel(&pool, r.id, node, "0xCC").await?);
    assert!(!evm::release_unsent(&pool, r.id, node).await?, "something was broadcast with it");
    let again = evm::reserve(&pool, 1, ADDRESS, node, 0).await?;
    assert_eq!((again.id, again.status.as_str()), (r.id, "broadcast"));
    assert_eq!((again.tx_hashes, again.cancel_hashes), (vec!["0xaa".to_string(), "0xbb".into()], vec!["0xcc".into()]));

    evm::mark_consumed(&pool, r.id, "0xBB").await?;
    assert!(!evm::mark_broadcast(&pool, r.id, node, "0xdd").await?, "consumed: nothing more may be sent");
    assert!(!evm::mark_cancel(&pool, r.id, node, "0xdd").await?);
    let next = evm::reserve(&pool, 1, ADDRESS, node, 0).await?;
    assert_eq!((next.nonce, next.status.as_str()), (1, "reserved"));
    let history = evm::of_node(&pool, node, 1).await?;
    assert_eq!(
        history.iter().map(|r| (r.nonce, r.status.as_str())).collect::<Vec<_>>(),
        vec![(1, "reserved"), (0, "consumed")]
    );
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_released_nonce_is_the_next_one_handed_out(pool: PgPool) -> Result<()> {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let ra = evm::reserve(&pool, 1, ADDRESS, a, 0).await?;
    let rb = evm::reserve(&pool, 1, ADDRESS, b, 0).await?;
    assert_eq!((ra.nonce, rb.nonce), (0, 1));
    assert!(!evm::release_unsent(&pool, ra.id, b).await?, "only the holder gives it back");
    assert!(evm::release_unsent(&pool, ra.id, a).await?);
    assert!(!evm::release_unsent(&pool, ra.id, a).await?, "already given back");
    assert!(!evm::mark_broadcast(&pool, ra.id, a, "0x01").await?, "released: nothing may be sent with it");
    // Below the chain's pending count a gap is not reused.
    assert_eq!(evm::reserve(&pool, 1, ADDRESS, Uuid::new_v4(), 1).await?.nonce, 2);
    let c = Uuid::new_v4();
    let rc = evm::reserve(&pool, 1, ADDRESS, c, 0).await?;
    assert_eq!((rc.id, rc.nonce, rc.request_node_id, rc.tx_hashes.len()), (ra.id, 0, Some(c), 0));
    Ok(())
}

/// A nonce a signer may have signed for stays with the node; one it provably did not sign
/// for (no signature stored, or the signer's refusal of that attempt) is given back, audited.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_nonce_that_may_be_signed_for_is_never_given_back(pool: PgPool) -> Result<()> {
    install(&pool, "t.evm", &plan(vec![action("n")], &[])).await?;
    let signed = movement(&pool, &Spec::new("t.evm", "signed")).await?;
    let clean = movement(&pool, &Spec::new("t.evm", "clean")).await?;
    let (sn, cn) = (signed.node("n"), clean.node("n"));
    evm::reserve(&pool, 1, ADDRESS, sn, 0).await?;
    evm::reserve(&pool, 1, ADDRESS, cn, 0).await?;
    let mut conn = pool.acquire().await?;
    artifacts::insert(&mut conn, signed.id, sn, 1, ArtifactKind::PreparedAction, &json!({}), None).await?;
    artifacts::insert(&mut conn, signed.id, sn, 1, ArtifactKind::SignResult, &json!({}), None).await?;

    let mut tx = pool.begin().await?;
    assert!(evm::release_before_broadcast(&mut tx, sn, None, "SIGNER_DOWN", "dispatcher").await?.is_empty());
    let given = evm::release_before_broadcast(&mut tx, cn, None, "PREPARE_FAILED", "dispatcher").await?;
    assert_eq!(
        given.iter().map(|g| (g.nonce, g.request_node_id, g.request_id)).collect::<Vec<_>>(),
        vec![(1, Some(cn), Some(clean.id))]
    );
    // The signer refused attempt 1: no usable signature exists for it.
    let refused = evm::release_before_broadcast(&mut tx, sn, Some(1), "SIGNER_REFUSED", "dispatcher").await?;
    assert_eq!(refused.iter().map(|g| g.nonce).collect::<Vec<_>>(), vec![0]);
    tx.commit().await?;
    let audited: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT entity_id, data FROM audit_outbox WHERE action = 'evm.nonce.release' ORDER BY id")
            .fetch_all(&pool)
            .await?;
    assert_eq!(audited.len(), 2);
    assert_eq!((audited[0].0.as_str(), &audited[0].1["why"]), (&*cn.to_string(), &json!("PREPARE_FAILED")));
    assert_eq!(audited[1].1["nonce"], 0);
    Ok(())
}

/// A refusal excuses only the attempt it answered: a node whose signer refused its last attempt
/// but was handed an earlier one (a signature may exist for that) keeps its nonce; with only the
/// refused attempt's prepared action, the reaper may take it.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_refusal_excuses_only_the_attempt_it_answered(pool: PgPool) -> Result<()> {
    install(&pool, "t.refused", &plan(vec![action("n")], &[])).await?;
    let twice = movement(&pool, &Spec::new("t.refused", "twice")).await?;
    let once = movement(&pool, &Spec::new("t.refused", "once")).await?;
    let (twice_n, once_n) = (twice.node("n"), once.node("n"));
    let mut conn = pool.acquire().await?;
    for n in [twice_n, once_n] {
        evm::reserve(&pool, 1, ADDRESS, n, 0).await?;
        sqlx::query(
            "UPDATE movement_request_nodes SET node_state = 'FAILED', error_code = 'SIGNER_REFUSED' WHERE id = $1",
        )
        .bind(n)
        .execute(&mut *conn)
        .await?;
    }
    artifacts::insert(&mut conn, twice.id, twice_n, 1, ArtifactKind::PreparedAction, &json!({}), None).await?;
    artifacts::insert(&mut conn, twice.id, twice_n, 2, ArtifactKind::PreparedAction, &json!({}), None).await?;
    artifacts::insert(&mut conn, once.id, once_n, 2, ArtifactKind::PreparedAction, &json!({}), None).await?;
    let mut tx = pool.begin().await?;
    let reclaimed = evm::reclaim(&mut tx, -1.0, "reaper", 10).await?;
    tx.commit().await?;
    assert_eq!(reclaimed.iter().map(|g| g.request_node_id).collect::<Vec<_>>(), vec![Some(once_n)]);
    assert_eq!(evm::of_node(&pool, twice_n, 1).await?[0].status, "reserved", "attempt 1 may be signed");
    Ok(())
}

/// The reaper takes old reservations of nodes not in flight with nothing broadcast and no
/// signature possible (age -1 s: every reservation is old enough).
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_reaper_never_takes_the_nonce_of_a_node_in_flight(pool: PgPool) -> Result<()> {
    install(&pool, "t.reap", &plan(vec![action("n")], &[])).await?;
    let idle = movement(&pool, &Spec::new("t.reap", "idle")).await?;
    let busy = movement(&pool, &Spec::new("t.reap", "busy")).await?;
    let signed = movement(&pool, &Spec::new("t.reap", "signed")).await?;
    let (idle_n, busy_n, signed_n) = (idle.node("n"), busy.node("n"), signed.node("n"));
    walk(&pool, busy_n, &[NodeState::Blocked, NodeState::Ready, NodeState::Preparing]).await?;
    for n in [idle_n, busy_n, signed_n] {
        evm::reserve(&pool, 1, ADDRESS, n, 0).await?;
    }
    let mut conn = pool.acquire().await?;
    artifacts::insert(&mut conn, signed.id, signed_n, 0, ArtifactKind::SignResult, &json!({}), None).await?;

    let mut tx = pool.begin().await?;
    assert!(evm::reclaim(&mut tx, 3600.0, "reaper", 10).await?.is_empty(), "nothing old enough");
    let reclaimed = evm::reclaim(&mut tx, -1.0, "reaper", 10).await?;
    assert_eq!(reclaimed.iter().map(|g| g.request_node_id).collect::<Vec<_>>(), vec![Some(idle_n)]);
    tx.commit().await?;
    assert_eq!(evm::of_node(&pool, idle_n, 1).await?[0].status, "released");
    assert_eq!(evm::of_node(&pool, busy_n, 1).await?[0].status, "reserved");
    assert_eq!(evm::of_node(&pool, signed_n, 1).await?[0].status, "reserved");
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_outbox WHERE action = 'evm.nonce.reclaim'")
        .fetch_one(&pool)
        .await?;
    assert_eq!(audited, 1);
    Ok(())
}

/// An attested CCTP V2 nonce belongs to the first movement that claims it: claiming again is
/// idempotent, another movement is answered the owner, and the same nonce of another source
/// domain is a nonce of its own.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn an_attested_cctp_nonce_belongs_to_the_first_movement_that_claims_it(pool: PgPool) -> Result<()> {
    use qtg_store::cctp::claim_nonce;
    let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
    let nonce = format!("0x{}", "ab".repeat(32));
    assert_eq!(claim_nonce(&pool, 0, &nonce, first).await?, first);
    assert_eq!(claim_nonce(&pool, 0, &nonce, first).await?, first, "idempotent");
    assert_eq!(claim_nonce(&pool, 0, &nonce, second).await?, first, "another movement is told the owner");
    assert_eq!(claim_nonce(&pool, 6, &nonce, second).await?, second, "another source domain");
    Ok(())
}
