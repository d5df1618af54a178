//! The operator console (`/console`, served by the API) driven in headless Chromium like a
//! person would: sign in with a key, see a movement appear, approve it with a second key and
//! watch it complete live, open a stuck node's diagnosis, cancel a movement with a reason; a
//! viewer's key sees no action button. A screenshot of each screen is written to
//! `target/tmp/console-screenshots/`.

use std::time::Duration;

use qtg_tests::webdriver::Browser;
use qtg_tests::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

fn sim(key: &str, script: Value) -> Value {
    json!({"node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
           "config": {"sim": script}})
}

async fn create(api: &Api, key: &str, template: &str, idem: &str) -> anyhow::Result<String> {
    let body = json!({"template_key": template, "idempotency_key": idem,
        "intent": {"asset": "USDC", "amount": "125.00", "source": "venue-a", "destination": "0xdest"}});
    let m = api.ok("POST", "/v3/movements", key, Some(body), 201).await?;
    Ok(m["id"].as_str().unwrap_or_default().to_string())
}

async fn sign_in(b: &Browser, base: &str, key: &str) -> anyhow::Result<()> {
    b.goto(&format!("{base}/console#/movements")).await?;
    b.wait("#key, #movement-list", T).await?;
    if b.count("header#top:not([hidden])").await? > 0 {
        b.click("#signout").await?;
    }
    b.fill("#key", key).await?;
    b.click("#signin").await?;
    b.wait("#movement-list", T).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_signs_in_approves_watches_diagnoses_and_cancels_in_the_browser() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.3")]).await?;
    let keys = Keys::create(&api).await?;
    let viewer = api.key("auditor", "viewer").await?;
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "console.live",
            "nodes": [sim("prepare", json!({})), sim("send", json!({"observe_polls": 6, "retry_after_seconds": 1.0}))],
            "edges": [{"from": "prepare", "to": "send"}]
        }),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "console.stuck", "nodes": [sim("u", json!({"submit": "unknown", "recover": "unknown"}))]
        }),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "console.refused", "nodes": [sim("r", json!({"preflight": "fail"}))]}),
    )
    .await?;
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let b = Browser::start().await?;

    // Sign in with the requester's key; the console shows who it is.
    b.goto(&format!("{}/console", api.base)).await?;
    b.wait("#key", T).await?;
    b.screenshot(&shots, "01-sign-in").await?;
    b.fill("#key", "not-a-key").await?;
    b.click("#signin").await?;
    b.wait_text("[role=alert]", "not valid", T).await?;
    sign_in(&b, &api.base, &keys.requester).await?;
    b.wait_text("#who", "treasury-bot (requester)", T).await?;

    // A movement created elsewhere appears in the list (live refresh).
    let live = create(&api, &keys.requester, "console.live", "console-1").await?;
    b.wait_text("#movement-list", &live[..8], T).await?;
    b.wait_text("#movement-list", "PENDING_APPROVAL", T).await?;
    b.screenshot(&shots, "02-movements").await?;
    let href: Value = b.eval("return location.href + ' ' + document.cookie;", json!([])).await?;
    assert!(!href.as_str().unwrap_or_default().contains(&keys.requester), "the key is never in the URL: {href}");
    // The requester created it: no approve button for its own movement.
    b.goto(&format!("{}/console#/movements/{live}", api.base)).await?;
    b.wait_text("h1", "PENDING_APPROVAL", T).await?;
    assert_eq!(b.count("button[data-action=approve]").await?, 0, "{}", b.page_text().await?);

    // A second key approves it, with a reason, and watches it complete.
    sign_in(&b, &api.base, &keys.approver).await?;
    b.goto(&format!("{}/console#/movements/{live}", api.base)).await?;
    b.click("button[data-action=approve]").await?;
    b.fill("#f-reason", "matches the treasury plan").await?;
    b.click("#action-submit").await?;
    // The page follows it without a reload: EXECUTING (six observations a second apart), then COMPLETED.
    b.wait_text("h1", "EXECUTING", T).await?;
    b.wait_text("h1", "COMPLETED", Duration::from_secs(60)).await?;
    b.wait_text(".dag", "COMPLETED", T).await?;
    b.screenshot(&shots, "03-movement").await?;
    let m = api.ok("GET", &format!("/v3/movements/{live}"), &keys.requester, None, 200).await?;
    assert_eq!((m["approved_by"].as_str(), m["request_state"].as_str()), (Some("alice"), Some("COMPLETED")));

    // The operator opens a stuck node: its diagnosis, history and markers.
    let stuck = create(&api, &keys.requester, "console.stuck", "console-2").await?;
    api.ok("POST", &format!("/v3/movements/{stuck}/approve"), &keys.approver, None, 200).await?;
    wait_until("the stuck node is UNKNOWN", T, || async {
        let m = api.ok("GET", &format!("/v3/movements/{stuck}"), &keys.requester, None, 200).await?;
        Ok(node(&m, "u")["node_state"] == "UNKNOWN")
    })
    .await?;
    sign_in(&b, &api.base, &keys.operator).await?;
    b.goto(&format!("{}/console#/movements/{stuck}", api.base)).await?;
    b.click("a[data-node=u]").await?;
    b.wait_text("#diagnosis", "Diagnosis: C", T).await?;
    b.wait_text("main", "State history and calls", T).await?;
    // UNKNOWN is recovery's to decide: the console offers no retry the API would refuse.
    assert_eq!(b.count("button[data-action]").await?, 0, "{}", b.page_text().await?);
    b.screenshot(&shots, "04-node-diagnosis").await?;

    // A FAILED node is retried from its page, with a reason (it fails again: its preflight refuses).
    let refused = create(&api, &keys.requester, "console.refused", "console-5").await?;
    api.ok("POST", &format!("/v3/movements/{refused}/approve"), &keys.approver, None, 200).await?;
    wait_state(&api, &keys.requester, &refused, &["FAILED"], T).await?;
    b.goto(&format!("{}/console#/movements/{refused}/nodes/r", api.base)).await?;
    b.click("button[data-action=retry]").await?;
    b.fill("#f-reason", "venue fixed the limit").await?;
    b.click("#action-submit").await?;
    let retried = wait_until("the operator's retry in the node's history", T, || async {
        let n = api.ok("GET", &format!("/v3/movements/{refused}/nodes/r"), &viewer, None, 200).await?;
        let events = n["events"].as_array().cloned().unwrap_or_default();
        Ok(events.iter().any(|e| e["from"] == "FAILED" && e["to"] == "READY" && e["actor"] == "ops"))
    })
    .await;
    if let Err(e) = retried {
        anyhow::bail!("{e}; the page says: {}", b.page_text().await?);
    }

    // The operator cancels a pending movement, with a reason.
    let pending = create(&api, &keys.requester, "console.live", "console-3").await?;
    b.goto(&format!("{}/console#/movements/{pending}", api.base)).await?;
    b.click("button[data-action=cancel]").await?;
    b.click("#action-submit").await?;
    b.wait_text("#action-error", "Reason is required", T).await?;
    b.fill("#f-reason", "duplicate of console-1").await?;
    b.click("#action-submit").await?;
    b.wait_text("h1", "CANCELLED", T).await?;
    wait_until("the cancel's reason in the audit trail", T, || async {
        let audit =
            api.ok("GET", &format!("/v3/audit-events?movement_id={pending}"), &keys.operator, None, 200).await?;
        Ok(audit.to_string().contains("duplicate of console-1"))
    })
    .await?;

    // The list's filters, in the page and in the API.
    b.goto(&format!("{}/console#/movements?state=CANCELLED&template_key=console.live", api.base)).await?;
    b.wait_text("#movement-list", &pending[..8], T).await?;
    let shown = b.page_text().await?;
    assert!(!shown.contains(&live[..8]) && !shown.contains(&stuck[..8]), "{shown}");
    let ids = |v: Value| -> Vec<String> {
        v["items"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str().map(str::to_string)).collect()
    };
    let q = |query: &str| format!("/v3/movements?{query}");
    assert_eq!(ids(api.ok("GET", &q("template_key=console.stuck"), &viewer, None, 200).await?), vec![stuck.clone()]);
    assert_eq!(
        ids(api.ok("GET", &q("created_by=treasury-bot&state=CANCELLED"), &viewer, None, 200).await?),
        vec![pending.clone()]
    );
    assert!(ids(api.ok("GET", &q("created_by=someone-else"), &viewer, None, 200).await?).is_empty());
    assert!(ids(api.ok("GET", &q("since=2999-01-01T00:00:00Z"), &viewer, None, 200).await?).is_empty());
    assert_eq!(ids(api.ok("GET", &q("since=2000-01-01T00:00:00Z"), &viewer, None, 200).await?).len(), 4);
    let (status, err) = api.call("GET", &q("since=yesterday"), &viewer, None).await?;
    assert_eq!((status, err["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{err}");

    // The other screens; the balances screen leads with a withdrawal no movement explains.
    sqlx::query(
        "INSERT INTO venue_transfers (venue_key, account, direction, venue_ref, asset, amount, address, status)
         VALUES ('sim_a', 'sim_a', 'withdrawal', 'web-1', 'USDT', 77, \
             '0xb0b0000000000000000000000000000000000b0b', '6')",
    )
    .execute(&db.pool)
    .await?;
    for (route, name, needle) in [
        ("callbacks", "05-callbacks-dlq", "Callbacks DLQ"),
        ("workers", "06-workers", "node_dispatcher"),
        ("health", "07-executors-signers", "exec.sim.transfer"),
        ("controls", "08-pauses", "Kill-switch pauses"),
        ("balances", "09-balances", "1 withdrawal(s) no movement explains"),
    ] {
        b.goto(&format!("{}/console#/{route}", api.base)).await?;
        b.wait_text("main", needle, T).await?;
        b.screenshot(&shots, name).await?;
    }

    // A viewer sees everything and no action button.
    let waiting = create(&api, &keys.requester, "console.live", "console-4").await?;
    sign_in(&b, &api.base, &viewer).await?;
    b.goto(&format!("{}/console#/movements/{waiting}", api.base)).await?;
    b.wait_text("h1", "PENDING_APPROVAL", T).await?;
    b.wait(".dag", T).await?;
    assert_eq!(b.count("button[data-action]").await?, 0, "{}", b.page_text().await?);
    b.goto(&format!("{}/console#/movements/{stuck}/nodes/u", api.base)).await?;
    b.wait_text("main", "State history and calls", T).await?;
    assert_eq!(b.count("button[data-action]").await?, 0, "{}", b.page_text().await?);
    b.screenshot(&shots, "10-viewer").await?;
    b.close().await;

    // No key in the API's log.
    let log = api.proc.log();
    for k in [&keys.requester, &keys.approver, &keys.operator, &viewer] {
        assert!(!log.contains(k.as_str()), "a key reached the log");
    }
    eprintln!("console screenshots: {}", shots.display());
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn the_console_is_served_with_a_strict_policy_and_needs_no_key_to_load() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/app.js", "javascript"),
        ("/console/app.css", "css"),
    ] {
        let r = api.http.get(format!("{}{path}", api.base)).send().await?;
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        assert!(h["content-type"].to_str()?.contains(kind), "{path}: {:?}", h["content-type"]);
        let csp = h["content-security-policy"].to_str()?;
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    // The page loads nothing from elsewhere.
    let html = api.http.get(format!("{}/console", api.base)).send().await?.text().await?;
    assert!(!html.contains("http://") && !html.contains("https://"), "{html}");
    // GET /v3/me answers who a key is, and 401 without one.
    let keys = Keys::create(&api).await?;
    let me = api.ok("GET", "/v3/me", &keys.approver, None, 200).await?;
    assert_eq!(me, json!({"principal": "alice", "role": "approver", "roles": ["viewer", "requester", "approver"]}));
    let (status, _) = api.call("GET", "/v3/me", "", None).await?;
    assert_eq!(status, 401);
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// What the approver is shown cannot be reordered: the approve dialog lists each intent field
/// on its own, each value isolated and laid out left to right, a hidden character spelled out
/// (a value stored before the API refused them), the raw value one click away. And a route is
/// data: a hash that is not a movement id or node key makes the console fetch nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_approver_sees_each_value_as_stored_and_routes_are_data() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    install_template(&api, &keys, json!({"template_key": "console.shown", "nodes": [sim("a", json!({}))]})).await?;
    let id = create(&api, &keys.requester, "console.shown", "shown-1").await?;
    sqlx::query(
        "UPDATE movement_requests SET intent = jsonb_set(intent, '{destination}', to_jsonb($2::text)) \
         WHERE id = $1::uuid",
    )
    .bind(&id)
    .bind("0xabc\u{202E}fed")
    .execute(&db.pool)
    .await?;
    let b = Browser::start().await?;
    sign_in(&b, &api.base, &keys.approver).await?;
    b.goto(&format!("{}/console#/movements/{id}", api.base)).await?;
    b.click("button[data-action=approve]").await?;
    let shown = b.wait_text("#approve-what", "U+202E", T).await?;
    assert!(shown.contains("0xabc⟨U+202E⟩fed") && !shown.contains('\u{202E}'), "{shown}");
    let layout: Value = b
        .eval(
            "return [...document.querySelectorAll('#approve-what dd bdi.val')].map(e => [e.dir, \
             getComputedStyle(e).unicodeBidi, getComputedStyle(e).direction]);",
            json!([]),
        )
        .await?;
    let rows = layout.as_array().cloned().unwrap_or_default();
    assert!(rows.len() >= 4, "amount, asset, from, to: {layout}");
    assert!(rows.iter().all(|r| *r == json!(["ltr", "isolate-override", "ltr"])), "{layout}");
    // The raw value, one click away.
    let raw: Value = b
        .eval(
            "const e = [...document.querySelectorAll('#approve-what dd bdi.val')].find(e => \
             e.textContent.includes('U+202E')); e.click(); return e.textContent;",
            json!([]),
        )
        .await?;
    assert_eq!(raw, json!("\"0xabc\\u202efed\""), "the JSON of the stored value");
    b.click("#action-cancel").await?;

    // Routes: an id that is not one, a node key with a path in it. Nothing is fetched.
    for (route, says) in [
        ("#/movements/..%2F..%2Fapi-keys", "not a valid movement id"),
        (&format!("#/movements/{id}/nodes/a%2F..%2F..%2Fdiagnosis"), "not a valid node key"),
        (&format!("#/movements/{id}%3Flimit=1"), "not a valid movement id"),
    ] {
        b.eval("performance.clearResourceTimings(); return null;", json!([])).await?;
        b.goto(&format!("{}/console{route}", api.base)).await?;
        b.wait_text("main", says, T).await?;
        let fetched: Value = b
            .eval(
                "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/v3/') \
                 && !n.endsWith('/v3/me'));",
                json!([]),
            )
            .await?;
        assert_eq!(fetched, json!([]), "{route}: {fetched}");
    }
    b.close().await;
    db.drop_db().await;
    Ok(())
}
