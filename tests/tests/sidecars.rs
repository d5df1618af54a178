//! Sidecar workers as separate replicas: approval expiry (two replicas, each movement expired
//! once with one `request_expired`), template-proposal expiry, and audit promotion (three
//! replicas, every event exactly once and in order), read back through `/v3/audit-events`.

use std::time::{Duration, Instant};

use qtg_tests::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiry_and_audit_promotion_are_exactly_once_under_replicas() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api =
        Api::start(&db.url, &[("MG_APPROVAL_TTL_SECONDS", "1"), ("MG_TEMPLATE_PROPOSAL_TTL_SECONDS", "1")]).await?;
    let keys = Keys::create(&api).await?;
    let node =
        json!({"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"});
    // Proposals live 1 s here: approve the template at once, leave a second one to expire.
    install_template(&api, &keys, json!({"template_key": "t.exp", "nodes": [node.clone()]})).await?;
    let stale = api
        .ok(
            "POST",
            "/v3/template-proposals",
            &keys.operator,
            Some(json!({"template_key": "t.stale", "nodes": [node]})),
            201,
        )
        .await?;
    let mut ids = Vec::new();
    for i in 0..12 {
        let body = json!({
            "template_key": "t.exp", "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": format!("e-{i}"),
            "callback_url": "http://callbacks.invalid/cb"
        });
        let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
        ids.push(m["id"].as_str().unwrap().to_string());
    }
    // Every movement and the proposal past its window, by the database's clock.
    let last: uuid::Uuid = ids.last().unwrap().parse()?;
    wait_db(&db.pool, "SELECT now() > expires_at FROM movement_requests WHERE id = $1", last, Duration::from_secs(10))
        .await?;
    let proposal: uuid::Uuid = stale["id"].as_str().unwrap().parse()?;
    wait_db(
        &db.pool,
        "SELECT now() > expires_at FROM template_proposals WHERE id = $1",
        proposal,
        Duration::from_secs(10),
    )
    .await?;

    let fast = [
        ("MG_EXPIRATION_CHECK_INTERVAL_SECONDS", "0.2"),
        ("MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", "0.2"),
        ("MG_AUDIT_PROMOTE_INTERVAL_SECONDS", "0.2"),
    ];
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(Proc::spawn("qtg-expiry", &db.url, &fast).await?);
    }
    for _ in 0..3 {
        workers.push(Proc::spawn("qtg-audit", &db.url, &fast).await?);
    }

    for id in &ids {
        let m = wait_state(&api, &keys.requester, id, &["EXPIRED"], Duration::from_secs(30)).await?;
        assert_eq!(m["approval_status"], "rejected");
    }
    let per_movement: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT (SELECT count(*) FROM movement_callback_outbox c WHERE c.request_id = r.id AND c.event_type = \
         'request_expired'),
                (SELECT count(*) FROM audit_outbox a WHERE a.movement_id = r.id AND a.action = 'movement.transition' \
                    AND a.data->>'to' = 'EXPIRED')
         FROM movement_requests r",
    )
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(per_movement.len(), 12);
    assert!(
        per_movement.iter().all(|p| *p == (1, 1)),
        "each movement expired once with one request_expired: {per_movement:?}"
    );
    let (s, _) = api.call("POST", &format!("/v3/movements/{}/approve", ids[0]), &keys.approver, None).await?;
    assert_eq!(s, 409, "an expired movement cannot be approved");

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = api
            .ok("GET", &format!("/v3/template-proposals/{}", stale["id"].as_str().unwrap()), &keys.operator, None, 200)
            .await?;
        if p["status"] == "expired" {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "proposal never expired: {p}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // More events while three promoters run.
    for i in 0..30 {
        api.key(&format!("viewer-{i}"), "viewer").await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (outbox, events): (i64, i64) =
            sqlx::query_as("SELECT (SELECT count(*) FROM audit_outbox), (SELECT count(*) FROM audit_events)")
                .fetch_one(&db.pool)
                .await?;
        if outbox == events {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "promotion stalled at {events}/{outbox}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let order: Vec<i64> =
        sqlx::query_scalar("SELECT outbox_id FROM audit_events ORDER BY id").fetch_all(&db.pool).await?;
    let mut sorted = order.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(order, sorted, "each event once, in outbox order");

    // The read side: filters and cursor paging.
    let page = api.ok("GET", "/v3/audit-events?action=api_key.create&limit=10", &keys.operator, None, 200).await?;
    assert_eq!(page["items"].as_array().unwrap().len(), 10);
    let next = page["next_cursor"].as_str().unwrap();
    let page2 = api
        .ok("GET", &format!("/v3/audit-events?action=api_key.create&limit=10&cursor={next}"), &keys.operator, None, 200)
        .await?;
    assert!(page2["items"][0]["id"].as_i64() > page["items"][9]["id"].as_i64());
    let mine = api.ok("GET", &format!("/v3/audit-events?movement_id={}", ids[0]), &keys.operator, None, 200).await?;
    assert!(mine["items"].as_array().unwrap().iter().all(|e| e["movement_id"] == ids[0].as_str()));
    assert_eq!(api.call("GET", "/v3/audit-events?since=yesterday", &keys.operator, None).await?.0, 400);

    for w in &mut workers {
        w.signal("TERM");
        assert_eq!(w.wait_exit(Duration::from_secs(20)).await?, Some(0), "{}", w.log());
    }
    drop(api);
    db.drop_db().await;
    Ok(())
}
