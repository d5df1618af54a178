//! The API's guards through HTTP: authentication, roles, four-eyes, idempotent creation,
//! validation (clear 4xx, nothing changed) and the approval window.

use std::time::Duration;

use qtg_tests::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_door_guards_every_mutation() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("MG_APPROVAL_TTL_SECONDS", "2")]).await?;
    let keys = Keys::create(&api).await?;
    let viewer = api.key("auditor", "viewer").await?;

    // Authentication and roles.
    let (s, body) = api.call("GET", "/v3/movements", "not-a-key", None).await?;
    assert_eq!(s, 401);
    assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
    let (s, body) = api.call("POST", "/v3/template-proposals", &viewer, Some(json!({}))).await?;
    assert_eq!((s, body["error"]["code"].as_str()), (403, Some("FORBIDDEN")));
    let (s, _) =
        api.call("POST", "/v3/api-keys", &keys.operator, Some(json!({"principal": "x", "roles": ["admin"]}))).await?;
    assert_eq!(s, 403);

    // Proposals: validated DAGs only; the proposer cannot approve their own.
    let node = |k: &str| {
        json!({
            "node_key": k, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"
        })
    };
    for (bad, why) in [
        (
            json!({
                "template_key": "t", "nodes": [node("a"), node("b")],
                "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]
            }),
            "cycle",
        ),
        (json!({"template_key": "t", "nodes": [node("a"), node("a")]}), "duplicate"),
        (json!({"template_key": "t", "nodes": [node("a")], "edges": [{"from": "a", "to": "zz"}]}), "unknown"),
        (
            json!({
                "template_key": "t",
                "nodes": [{"node_key": "a", "node_kind": "action", "action_type": "t", "executor_key": "exec.nope"}]
            }),
            "not registered",
        ),
        (json!({"template_key": "t", "nodes": [node("a")], "surprise": 1}), "unknown field"),
    ] {
        let (s, body) = api.call("POST", "/v3/template-proposals", &keys.operator, Some(bad)).await?;
        assert_eq!(s, 400, "{why}: {body}");
        assert_eq!(body["error"]["code"], "VALIDATION_ERROR");
    }
    let admin2 = api.key("root2", "admin").await?;
    let p = api
        .ok(
            "POST",
            "/v3/template-proposals",
            &admin2,
            Some(json!({"template_key": "t.api", "nodes": [node("a")]})),
            201,
        )
        .await?;
    let pid = p["id"].as_str().unwrap();
    let (s, body) = api.call("POST", &format!("/v3/template-proposals/{pid}/approve"), &admin2, None).await?;
    assert_eq!((s, body["error"]["code"].as_str()), (403, Some("SELF_APPROVAL")));
    let v = api.ok("POST", &format!("/v3/template-proposals/{pid}/approve"), &api.admin_key, None, 200).await?;
    assert_eq!(v["version"], 1);
    let t = api.ok("GET", "/v3/templates/t.api", &viewer, None, 200).await?;
    assert_eq!(t["versions"][0]["compiled_plan_hash"], p["compiled_plan_hash"]);

    // Movements: validation, idempotency, four-eyes.
    let body = |amount: &str, idem: &str| {
        json!({
            "template_key": "t.api", "intent": {"asset": "USDC", "amount": amount}, "idempotency_key": idem
        })
    };
    for bad in [
        body("0", "k"),
        body("-5", "k"),
        body("1e3", "k"),
        json!({"template_key": "t.api", "intent": {"asset": "USDC", "amount": "1"}}),
    ] {
        let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(bad)).await?;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    }
    let (s, b) = api
        .call(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({
                "template_key": "t.api", "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": "k",
                "callback_url": "ftp://x"
            })),
        )
        .await?;
    assert_eq!(s, 400, "{b}");
    let (s, _) = api
        .call(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "t.none", "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": "k"})),
        )
        .await?;
    assert_eq!(s, 404);
    let first = api.ok("POST", "/v3/movements", &keys.requester, Some(body("10.5", "idem-1")), 201).await?;
    let again = api.ok("POST", "/v3/movements", &keys.requester, Some(body("10.5", "idem-1")), 200).await?;
    assert_eq!(first["id"], again["id"]);
    let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(body("11", "idem-1"))).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("IDEMPOTENCY_CONFLICT")));
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests").fetch_one(&db.pool).await?;
    assert_eq!(count, 1, "bad input and replays changed nothing");
    let id = first["id"].as_str().unwrap();
    assert_eq!(first["request_state"], "PENDING_APPROVAL");
    assert!(first["nodes"].as_array().unwrap().iter().all(|n| n["node_state"] == "BLOCKED"));
    let requester_approver = api.key("treasury-bot", "approver").await?; // same principal, other key
    let (s, b) = api.call("POST", &format!("/v3/movements/{id}/approve"), &requester_approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (403, Some("SELF_APPROVAL")));
    let (s, _) = api.call("POST", &format!("/v3/movements/{id}/approve"), &viewer, None).await?;
    assert_eq!(s, 403);

    // The approval window: 409 after expires_at even before any expiry worker ran.
    let expired = "SELECT now() > expires_at FROM movement_requests WHERE id = $1";
    wait_db(&db.pool, expired, id.parse()?, Duration::from_secs(10)).await?;
    let (s, b) = api.call("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("INVALID_STATE")), "{b}");

    // Reject; then approve is refused.
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body("3", "idem-2")), 201).await?;
    let id2 = m["id"].as_str().unwrap();
    let r = api
        .ok("POST", &format!("/v3/movements/{id2}/reject"), &keys.approver, Some(json!({"reason": "not today"})), 200)
        .await?;
    assert_eq!(r["request_state"], "REJECTED");
    let (s, _) = api.call("POST", &format!("/v3/movements/{id2}/approve"), &keys.approver, None).await?;
    assert_eq!(s, 409);

    // Lists page with a cursor; unknown ids are 404, bad queries 400.
    let page = api.ok("GET", "/v3/movements?limit=1", &viewer, None, 200).await?;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    let page2 = api.ok("GET", &format!("/v3/movements?limit=1&cursor={cursor}"), &viewer, None, 200).await?;
    assert_ne!(page2["items"][0]["id"], page["items"][0]["id"]);
    assert_eq!(api.call("GET", "/v3/movements?limit=0", &viewer, None).await?.0, 400);
    assert_eq!(api.call("GET", "/v3/movements?state=DONE", &viewer, None).await?.0, 400);
    assert_eq!(api.call("GET", "/v3/movements/00000000-0000-0000-0000-000000000000", &viewer, None).await?.0, 404);
    assert_eq!(api.call("GET", "/v3/movements/not-a-uuid", &viewer, None).await?.0, 404);

    // Revoked keys stop working; every mutation above left an audit row.
    let k = api
        .ok("POST", "/v3/api-keys", &api.admin_key, Some(json!({"principal": "temp", "roles": ["viewer"]})), 201)
        .await?;
    api.ok("DELETE", &format!("/v3/api-keys/{}", k["id"].as_str().unwrap()), &api.admin_key, None, 204).await?;
    assert_eq!(api.call("GET", "/v3/movements", k["secret"].as_str().unwrap(), None).await?.0, 401);
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT action FROM audit_outbox ORDER BY 1").fetch_all(&db.pool).await?;
    for a in [
        "api_key.create",
        "api_key.revoke",
        "movement.create",
        "movement.transition",
        "template_proposal.approve",
        "template_proposal.create",
    ] {
        assert!(actions.iter().any(|x| x == a), "missing audit action {a}: {actions:?}");
    }
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// 20 identical creates at once: one movement, one 201, the rest 200 with the same id; a
/// different body under the same key loses with 409 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identical_creates_make_one_movement() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.idem", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;
    let body = json!({"template_key": "t.idem", "idempotency_key": "same-20",
                      "intent": {"asset": "USDC", "amount": "42.00", "destination": "0xd"}});
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (http, url, key, body) =
            (api.http.clone(), format!("{}/v3/movements", api.base), keys.requester.clone(), body.clone());
        calls.spawn(async move {
            let resp = http.post(url).bearer_auth(key).json(&body).send().await?;
            anyhow::Ok((resp.status().as_u16(), resp.json::<serde_json::Value>().await?))
        });
    }
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    while let Some(a) = calls.join_next().await {
        let (status, m) = a??;
        assert!(status == 201 || status == 200, "{status}: {m}");
        created += usize::from(status == 201);
        ids.insert(m["id"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!((created, ids.len()), (1, 1));
    let mut other = body.clone();
    other["intent"]["amount"] = json!("43");
    let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(other)).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("IDEMPOTENCY_CONFLICT")));
    let (rows, nodes, audits): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM movement_requests), (SELECT count(*) FROM movement_request_nodes),
                (SELECT count(*) FROM audit_outbox WHERE action = 'movement.create')",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!((rows, nodes, audits), (1, 1, 1));
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// Side doors of the API: callback URLs that tunnel to private or metadata addresses, an
/// integer an executor cannot receive exactly, a secret counted in characters, and router
/// errors as JSON bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_doors_are_refused_with_json_errors() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // Private addresses allowed: metadata services stay refused unless named.
    let api = Api::start(&db.url, &[("MG_CALLBACK_ALLOW_PRIVATE", "true")]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.doors", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;
    let body = |idem: &str, extra: serde_json::Value| {
        let mut b =
            json!({"template_key": "t.doors", "idempotency_key": idem, "intent": {"asset": "USDC", "amount": "1"}});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    for (i, url) in [
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/latest",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://100.100.100.200/",
    ]
    .iter()
    .enumerate()
    {
        let (s, b) = api
            .call("POST", "/v3/movements", &keys.requester, Some(body(&format!("m-{i}"), json!({"callback_url": url}))))
            .await?;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{url}: {b}");
        assert!(b["error"]["message"].as_str().unwrap_or("").contains("metadata"), "{url}: {b}");
    }
    // A NAT64 form of a private address is private: allowed here, as MG_CALLBACK_ALLOW_PRIVATE says.
    api.ok(
        "POST",
        "/v3/movements",
        &keys.requester,
        Some(body("m-nat64", json!({"callback_url": "http://[64:ff9b::a00:1]/cb"}))),
        201,
    )
    .await?;
    // 8 characters of 2 bytes each are 8 characters, not 16.
    let (s, b) = api
        .call(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(body("m-secret", json!({"callback_url": "https://h.example/cb", "callback_secret": "éééééééé"}))),
        )
        .await?;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    // An amount in wei as a number cannot reach an executor exactly.
    let (s, b) = api
        .call(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(body("m-wei", json!({"input_params": {"value_wei": 9007199254740993_u64}}))),
        )
        .await?;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap_or("").contains("input_params.value_wei"), "{b}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests").fetch_one(&db.pool).await?;
    assert_eq!(count, 1, "refusals changed nothing");
    // Router refusals are JSON error bodies too.
    let (s, b) = api.call("DELETE", "/v3/movements", &keys.requester, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (405, Some("METHOD_NOT_ALLOWED")), "{b}");
    let (s, b) = api.call("GET", "/v3/nowhere", &keys.requester, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (404, Some("NOT_FOUND")), "{b}");
    let (s, b) = api.call("GET", "/v3/movements/not-a-uuid", &keys.requester, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (404, Some("NOT_FOUND")), "{b}");
    db.drop_db().await;
    Ok(())
}

/// Four-eyes that one person cannot satisfy alone by minting a second spelling of themselves,
/// and a bootstrap key that says what it is and can expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_have_one_spelling_and_the_bootstrap_key_expires() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS", "3")]).await?;
    let admin = api.admin_key.clone();
    api.key("treasury-bot", "requester").await?;
    for (principal, code, status) in [
        ("Treasury-Bot", "CONFLICT", 409),
        ("treasury-bot ", "VALIDATION_ERROR", 400),
        (" treasury-bot", "VALIDATION_ERROR", 400),
        ("treasury\u{7}bot", "VALIDATION_ERROR", 400),
    ] {
        let body = json!({"principal": principal, "roles": ["approver"]});
        let (s, b) = api.call("POST", "/v3/api-keys", &admin, Some(body)).await?;
        assert_eq!((s, b["error"]["code"].as_str()), (status, Some(code)), "{principal:?}: {b}");
    }
    let keys = api.ok("GET", "/v3/api-keys", &admin, None, 200).await?;
    let boot = keys["items"].as_array().unwrap().iter().find(|k| k["principal"] == "bootstrap-admin").cloned().unwrap();
    assert_eq!(boot["bootstrap"], true, "{boot}");
    assert!(boot["expires_at"].is_string(), "{boot}");
    let past = "SELECT bool_and(expires_at < now()) FROM api_keys WHERE bootstrap AND $1 IS NOT NULL";
    wait_db(&db.pool, past, uuid::Uuid::new_v4(), Duration::from_secs(10)).await?;
    let (s, b) = api.call("GET", "/v3/api-keys", &admin, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (401, Some("UNAUTHENTICATED")), "an expired bootstrap key: {b}");
    db.drop_db().await;
    Ok(())
}

/// With MG_API_KEY_CREATION_APPROVALS=2 one admin cannot mint a key alone: a create is a
/// request, its requester cannot approve it, a second admin can, and the audit shows each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_needs_a_second_admin_when_configured() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let bob = api.key("bob", "admin").await?;
    drop(api);
    let api = Api::start(&db.url, &[("MG_API_KEY_CREATION_APPROVALS", "2")]).await?;
    let admin = api.admin_key.clone();
    let body = json!({"principal": "mallory-2", "roles": ["approver"]});
    let (s, request) = api.call("POST", "/v3/api-keys", &admin, Some(body)).await?;
    assert_eq!(s, 202, "{request}");
    assert_eq!(request["status"], "pending");
    assert!(request.get("secret").is_none(), "{request}");
    let id = request["id"].as_str().unwrap().to_string();
    let keys: i64 =
        sqlx::query_scalar("SELECT count(*) FROM api_keys WHERE principal = 'mallory-2'").fetch_one(&db.pool).await?;
    assert_eq!(keys, 0, "no key before a second admin approves");
    let (s, b) = api.call("POST", &format!("/v3/api-key-requests/{id}/approve"), &admin, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (403, Some("SELF_APPROVAL")), "{b}");
    let decided = api.ok("POST", &format!("/v3/api-key-requests/{id}/approve"), &bob, None, 201).await?;
    assert_eq!(decided["request"]["status"], "approved");
    let secret = decided["key"]["secret"].as_str().unwrap().to_string();
    // The new key works, and the request cannot be decided twice.
    api.ok("GET", "/v3/movements", &secret, None, 200).await?;
    let (s, _) = api.call("POST", &format!("/v3/api-key-requests/{id}/reject"), &bob, None).await?;
    assert_eq!(s, 409);
    let audit: Vec<String> =
        sqlx::query_scalar("SELECT action FROM audit_outbox WHERE action LIKE 'api_key.%' ORDER BY created_at, id")
            .fetch_all(&db.pool)
            .await?;
    assert!(audit.ends_with(&["api_key.request".to_string(), "api_key.approve".to_string()]), "{audit:?}");
    db.drop_db().await;
    Ok(())
}
