//! API keys (`qtg_store::api_keys`): one key per hash, only live keys authenticate, the
//! admin list pages by its cursor, and key requests are decided once.

use qtg_store::api_keys::{self, NewKey};
use qtg_store::{PgPool, Result};
use uuid::Uuid;

fn hash(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn key<'a>(principal: &'a str, roles: &'a [String], key_hash: &'a str, ttl: Option<f64>) -> NewKey<'a> {
    NewKey {
        id: Uuid::new_v4(),
        principal,
        roles,
        key_hash,
        created_by: Some("admin"),
        ttl_seconds: ttl,
        bootstrap: false,
    }
}

fn roles(r: &[&str]) -> Vec<String> {
    r.iter().map(|s| s.to_string()).collect()
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_hash_is_inserted_once_and_finds_its_key(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let (r, h) = (roles(&["viewer", "operator"]), hash(1));
    let first = key("alice", &r, &h, None);
    assert!(api_keys::insert(&mut conn, &first).await?);
    assert!(!api_keys::insert(&mut conn, &key("mallory", &roles(&["admin"]), &h, None)).await?);
    let found = api_keys::find_by_hash(&pool, &h).await?.expect("live key");
    assert_eq!((found.id, found.principal.as_str(), found.roles), (first.id, "alice", r));
    assert!(api_keys::find_by_hash(&pool, &hash(2)).await?.is_none());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn revoked_and_expired_keys_do_not_authenticate(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let r = roles(&["requester"]);
    let (live, expired, revoked) = (hash(1), hash(2), hash(3));
    assert!(api_keys::insert(&mut conn, &key("live", &r, &live, Some(3600.0))).await?);
    assert!(api_keys::insert(&mut conn, &key("expired", &r, &expired, Some(-1.0))).await?);
    let to_revoke = key("revoked", &r, &revoked, None);
    assert!(api_keys::insert(&mut conn, &to_revoke).await?);
    assert!(api_keys::revoke(&mut conn, to_revoke.id).await?);
    assert!(!api_keys::revoke(&mut conn, to_revoke.id).await?, "already revoked");
    assert!(!api_keys::revoke(&mut conn, Uuid::new_v4()).await?);

    assert_eq!(api_keys::find_by_hash(&pool, &live).await?.map(|k| k.principal).as_deref(), Some("live"));
    assert!(api_keys::find_by_hash(&pool, &expired).await?.is_none());
    assert!(api_keys::find_by_hash(&pool, &revoked).await?.is_none());
    // The admin list still shows them, with why they no longer work.
    let listed = api_keys::list(&mut conn, None, 10).await?;
    let of = |p: &str| listed.iter().find(|k| k.principal == p).expect("listed").clone();
    assert!(of("revoked").revoked_at.is_some() && of("live").revoked_at.is_none());
    assert!(of("expired").expires_at.is_some() && of("revoked").expires_at.is_none());
    Ok(())
}

/// Keys created in one transaction share `created_at`: the `(created_at, id)` cursor still
/// pages through each key exactly once, newest first.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn the_list_pages_through_every_key_once_by_its_cursor(pool: PgPool) -> Result<()> {
    let r = roles(&["viewer"]);
    let hashes: Vec<String> = (1..=5).map(hash).collect();
    let mut tx = pool.begin().await?;
    let mut ids = Vec::new();
    for (i, h) in hashes.iter().enumerate() {
        let k = NewKey { bootstrap: i == 0, ..key("same-instant", &r, h, None) };
        assert!(api_keys::insert(&mut tx, &k).await?);
        ids.push(k.id);
    }
    tx.commit().await?;
    let later = hash(6);
    let newest = key("later", &r, &later, None);
    let mut conn = pool.acquire().await?;
    assert!(api_keys::insert(&mut conn, &newest).await?);

    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = api_keys::list(&mut conn, after, 2).await?;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().map(|k| (k.created_at, k.id));
        seen.extend(page);
    }
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert_eq!(seen[0].id, newest.id, "newest first");
    let mut expected = ids.clone();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen[1..].iter().map(|k| k.id).collect::<Vec<_>>(), expected, "ties by id, descending");
    assert_eq!(seen.iter().filter(|k| k.bootstrap).count(), 1);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_key_request_is_decided_once_and_reserves_its_principal(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let r = roles(&["approver"]);
    let req = api_keys::insert_request(&mut conn, Uuid::new_v4(), "bob", &r, "admin1").await?;
    assert_eq!((req.status.as_str(), req.principal.as_str(), req.requested_by.as_str()), ("pending", "bob", "admin1"));
    let rejected = api_keys::insert_request(&mut conn, Uuid::new_v4(), "carol", &r, "admin1").await?;
    let h = hash(7);
    assert!(api_keys::insert(&mut conn, &key("dave", &r, &h, None)).await?);

    let mut tx = pool.begin().await?;
    let locked = api_keys::request_for_update(&mut tx, req.id).await?.expect("request");
    assert_eq!(locked.id, req.id);
    let bob_hash = hash(8);
    let k = key("bob", &r, &bob_hash, None);
    assert!(api_keys::insert(&mut tx, &k).await?);
    let decided = api_keys::decide_request(&mut tx, req.id, "approved", "admin2", Some(k.id)).await?;
    assert_eq!(
        (decided.status.as_str(), decided.decided_by.as_deref(), decided.key_id),
        ("approved", Some("admin2"), Some(k.id))
    );
    tx.commit().await?;
    // Decided: a second decision finds no pending request — a compare-and-set miss, not a
    // missing row.
    let again = api_keys::decide_request(&mut conn, req.id, "rejected", "admin3", None).await;
    assert!(matches!(again, Err(qtg_store::StoreError::StaleState { .. })), "{again:?}");
    assert_eq!(api_keys::request_for_update(&mut conn, req.id).await?.expect("request").status, "approved");
    api_keys::decide_request(&mut conn, rejected.id, "rejected", "admin2", None).await?;
    assert!(api_keys::request_for_update(&mut conn, Uuid::new_v4()).await?.is_none());

    let mut tx = pool.begin().await?;
    let mut principals = api_keys::principals_locked(&mut tx).await?;
    principals.sort();
    assert_eq!(principals, vec!["bob", "dave"], "a rejected request reserves nothing");
    tx.rollback().await?;
    Ok(())
}
