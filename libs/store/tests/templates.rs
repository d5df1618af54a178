//! Templates (`qtg_store::templates`): versions numbered per template, plans stored as they
//! were given, proposals reviewed once, retirement, and the proposal expiry of `expiry`.

mod common;

use common::*;
use qtg_core::{NodeKind, PlanNode};
use qtg_store::templates;
use qtg_store::{expiry, PgPool, Result, StoreError};
use serde_json::json;
use uuid::Uuid;

fn manual(key: &str) -> PlanNode {
    PlanNode {
        node_kind: NodeKind::Manual,
        action_type: "manual_approval".into(),
        signer_key: Some("signer.ops".into()),
        signing_required: true,
        config: json!({"note": "call treasury"}),
        timeout_policy: json!({"observe_seconds": 60}),
        ..action(key)
    }
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn versions_are_numbered_per_template_and_read_back_as_stored(pool: PgPool) -> Result<()> {
    let mut v1 = plan(vec![action("send"), manual("confirm")], &[("send", "confirm")]);
    v1.risk_controls = json!({"hard_cap": "100"});
    let v2 = plan(vec![action("send")], &[]);
    let (pv1, n1) = install(&pool, "t.a", &v1).await?;
    let (pv2, n2) = install(&pool, "t.a", &v2).await?;
    let (_, other) = install(&pool, "t.b", &v2).await?;
    assert_eq!((n1, n2, other), (1, 2, 1));

    let mut conn = pool.acquire().await?;
    let latest = templates::plan_version(&mut conn, "t.a", None).await?.expect("t.a");
    assert_eq!((latest.plan_version_id, latest.version, latest.retired_at), (pv2, 2, None));
    let first = templates::plan_version(&mut conn, "t.a", Some(1)).await?.expect("t.a v1");
    assert_eq!((first.plan_version_id, first.template_id), (pv1, latest.template_id));
    assert_eq!((first.compiled_plan_hash.as_str(), first.description.as_deref()), (PLAN_HASH, Some("fixture")));
    // Nodes come back in node_key order, edges and risk controls as given.
    let mut sorted = v1.clone();
    sorted.nodes.sort_by(|a, b| a.node_key.cmp(&b.node_key));
    assert_eq!(first.plan, sorted);
    assert_eq!(first.nodes.iter().map(|(_, n)| n.node_key.as_str()).collect::<Vec<_>>(), vec!["confirm", "send"]);
    assert!(templates::plan_version(&mut conn, "t.a", Some(3)).await?.is_none());
    assert!(templates::plan_version(&mut conn, "t.none", None).await?.is_none());
    assert_eq!(templates::template_versions(&mut conn, "t.a").await?, vec![2, 1]);

    let page = templates::list_templates(&mut conn, None, 1).await?;
    assert_eq!(page.iter().map(|t| (t.template_key.as_str(), t.latest_version)).collect::<Vec<_>>(), vec![("t.a", 2)]);
    let next = templates::list_templates(&mut conn, Some("t.a"), 10).await?;
    assert_eq!(next.iter().map(|t| t.template_key.as_str()).collect::<Vec<_>>(), vec!["t.b"]);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn a_proposal_is_reviewed_once(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let definition = serde_json::to_value(plan(vec![action("n")], &[])).expect("json");
    let id = Uuid::new_v4();
    let p =
        templates::insert_proposal(&mut conn, id, "t.p", Some("first"), &definition, PLAN_HASH, "ops", 3600.0).await?;
    assert_eq!((p.id, p.status.as_str(), p.expired, p.definition.clone()), (id, "pending", false, definition));

    let mut tx = pool.begin().await?;
    let locked = templates::get_proposal(&mut tx, id, true).await?.expect("proposal");
    assert_eq!(locked.status, "pending");
    let (pv, _) =
        templates::create_version(&mut tx, "t.p", None, &plan(vec![action("n")], &[]), PLAN_HASH, Some(id), "admin")
            .await?;
    templates::review_proposal(&mut tx, id, "approved", "admin", Some("fine"), Some(pv)).await?;
    tx.commit().await?;

    let again = templates::review_proposal(&mut conn, id, "rejected", "admin2", None, None).await;
    assert!(matches!(again, Err(StoreError::StaleState { expected, .. }) if expected == "pending"));
    let p = templates::get_proposal(&mut conn, id, false).await?.expect("proposal");
    assert_eq!((p.status.as_str(), p.reviewed_by.as_deref(), p.plan_version_id), ("approved", Some("admin"), Some(pv)));
    assert!(templates::get_proposal(&mut conn, Uuid::new_v4(), false).await?.is_none());
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn retirement_is_recorded_once_and_never_touches_newer_versions(pool: PgPool) -> Result<()> {
    for _ in 0..3 {
        install(&pool, "t.r", &plan(vec![action("n")], &[])).await?;
    }
    let mut conn = pool.acquire().await?;
    assert_eq!(templates::retire(&mut conn, "t.r", 1, "admin", "bad limits").await?, Some(true));
    assert_eq!(templates::retire(&mut conn, "t.r", 1, "admin", "again").await?, Some(false));
    assert_eq!(templates::retire(&mut conn, "t.r", 9, "admin", "no such").await?, None);
    assert_eq!(templates::retire(&mut conn, "t.none", 1, "admin", "no such").await?, None);
    // v3 approved: the older live one (v2) is retired; v1 was already.
    assert_eq!(templates::retire_older(&mut conn, "t.r", 3, "admin").await?, vec![2]);
    assert!(templates::retire_older(&mut conn, "t.r", 3, "admin").await?.is_empty());
    for (v, retired) in [(1, true), (2, true), (3, false)] {
        let pv = templates::plan_version(&mut conn, "t.r", Some(v)).await?.expect("version");
        assert_eq!(pv.retired_at.is_some(), retired, "version {v}");
    }
    Ok(())
}

/// A movement created on an older version is also held to the newest version's controls.
#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn current_risk_controls_are_the_newest_versions(pool: PgPool) -> Result<()> {
    let m = one_node_movement(&pool, "t.risk", None).await?;
    let mut tighter = plan(vec![action("n")], &[]);
    tighter.risk_controls = json!({"hard_cap": "5"});
    install(&pool, "t.risk", &tighter).await?;
    let mut conn = pool.acquire().await?;
    assert_eq!(templates::current_risk_controls(&mut conn, m.id).await?, Some((2, json!({"hard_cap": "5"}))));
    assert_eq!(templates::current_risk_controls(&mut conn, Uuid::new_v4()).await?, None);
    Ok(())
}

#[sqlx::test(migrator = "qtg_store::MIGRATOR")]
async fn proposals_past_their_window_expire_once_with_an_audit_row(pool: PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let definition = json!({"nodes": []});
    let (late, open) = (Uuid::new_v4(), Uuid::new_v4());
    templates::insert_proposal(&mut conn, late, "t.late", None, &definition, PLAN_HASH, "ops", -1.0).await?;
    templates::insert_proposal(&mut conn, open, "t.open", None, &definition, PLAN_HASH, "ops", 3600.0).await?;
    assert!(templates::get_proposal(&mut conn, late, false).await?.expect("proposal").expired);

    assert_eq!(expiry::expire_template_proposals(&mut conn, 10, "expiry").await?, vec![late]);
    assert!(expiry::expire_template_proposals(&mut conn, 10, "expiry").await?.is_empty());
    assert_eq!(templates::get_proposal(&mut conn, late, false).await?.expect("proposal").status, "expired");
    assert_eq!(templates::get_proposal(&mut conn, open, false).await?.expect("proposal").status, "pending");
    let audited: Vec<(String, String, serde_json::Value)> =
        sqlx::query_as("SELECT actor, entity_id, data FROM audit_outbox WHERE action = 'template_proposal.expire'")
            .fetch_all(&pool)
            .await?;
    assert_eq!(audited, vec![("expiry".to_string(), late.to_string(), json!({"template_key": "t.late"}))]);
    // An expired proposal can no longer be reviewed.
    assert!(templates::review_proposal(&mut conn, late, "approved", "admin", None, None).await.is_err());
    Ok(())
}
