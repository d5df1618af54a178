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

    // Routes: an id that is not one, a node key with a path in it. Nothing is fetched (but who the
    // key is and the navigation's counts, which no route names).
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
                 && !n.endsWith('/v3/me') && !n.endsWith('/v3/attention'));",
                json!([]),
            )
            .await?;
        assert_eq!(fetched, json!([]), "{route}: {fetched}");
    }
    b.close().await;
    db.drop_db().await;
    Ok(())
}

/// An operator's day, screen by screen: the attention view with its counts in the navigation
/// (an attention case — a manual step — resolved from the console), the approval queue with
/// m-of-n progress and four-eyes explained, a search, a template proposal reviewed with its diff
/// and approved by a second key, a capital transfer closed, a bulk dead-letter replay with one
/// reason, balances with totals and a history chart, API keys, the audit search, workers, and
/// nothing of the signed-in screens before sign-in. A screenshot of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operators_day_on_every_screen() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.3")]).await?;
    let keys = Keys::create(&api).await?;
    let bob = api.key("bob", "approver").await?;
    let admin = api.key("root-2", "admin").await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "day.two", "nodes": [sim("a", json!({}))], "risk_controls": {"approvals_required": 2}}),
    )
    .await?;
    let manual =
        json!({"node_key": "wire", "node_kind": "manual", "action_type": "manual_bank_wire", "executor_key": "manual"});
    install_template(&api, &keys, json!({"template_key": "day.manual", "nodes": [manual]})).await?;
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let b = Browser::start().await?;

    // Before sign-in: the form only, no navigation, no sign-out.
    b.goto(&format!("{}/console", api.base)).await?;
    b.wait("#key", T).await?;
    let shown: Value = b
        .eval("return [getComputedStyle(document.getElementById('top')).display, document.body.innerText];", json!([]))
        .await?;
    assert_eq!(shown[0], "none", "the header is not shown before sign-in");
    assert!(!shown[1].as_str().unwrap_or_default().contains("Sign out"), "{shown}");

    // A manual step waits: the attention view counts it, the operator completes it there.
    let wire = create(&api, &keys.requester, "day.manual", "day-1").await?;
    api.ok("POST", &format!("/v3/movements/{wire}/approve"), &keys.approver, None, 200).await?;
    wait_state(&api, &keys.requester, &wire, &["WAITING_MANUAL_ACTION"], T).await?;
    sign_in(&b, &api.base, &keys.operator).await?;
    b.goto(&format!("{}/console#/attention", api.base)).await?;
    b.wait_text("#attn-waiting", &wire[..8], T).await?;
    b.wait_text("a[data-count=attention] .count", "1", T).await?;
    b.screenshot(&shots, "11-attention").await?;
    b.click(&format!("#attn-waiting a[href='#/movements/{wire}']")).await?;
    b.click("a[data-node=wire]").await?;
    b.click("button[data-action=complete-manually]").await?;
    b.fill("#f-reason", "wire sent from the bank portal").await?;
    b.fill("#f-reference", "BANK-REF-77").await?;
    b.click("#action-submit").await?;
    wait_state(&api, &keys.requester, &wire, &["COMPLETED"], T).await?;
    b.goto(&format!("{}/console#/attention", api.base)).await?;
    b.wait_text("[data-tile=attn-waiting]", "0", T).await?;
    assert_eq!(b.count("#attn-waiting").await?, 0, "a resolved case leaves the list");

    // The approval queue: m-of-n progress; the creator is told why they cannot approve.
    let two = create(&api, &keys.requester, "day.two", "day-2").await?;
    api.ok("POST", &format!("/v3/movements/{two}/approve"), &keys.approver, Some(json!({"reason": "one"})), 200)
        .await?;
    sign_in(&b, &api.base, &bob).await?;
    b.goto(&format!("{}/console#/approvals", api.base)).await?;
    b.wait_text("#my-approvals", "1 of 2", T).await?;
    b.wait_text("a[data-count=approvals] .count", "1", T).await?;
    b.screenshot(&shots, "12-approvals").await?;
    sign_in(&b, &api.base, &keys.approver).await?;
    b.goto(&format!("{}/console#/movements/{two}", api.base)).await?;
    b.wait_text("#approval-progress", "You have approved it", T).await?;
    assert_eq!(b.count("button[data-action=approve]").await?, 0, "no second approval by the same person");
    sign_in(&b, &api.base, &keys.requester).await?;
    b.goto(&format!("{}/console#/movements/{two}", api.base)).await?;
    b.wait_text("#approval-progress", "four-eyes", T).await?;

    // Search: by idempotency key, and by an amount range that leaves it out.
    b.goto(&format!("{}/console#/movements", api.base)).await?;
    b.fill("#flt-idempotency-key", "day-2").await?;
    b.click("#search").await?;
    b.wait_text("#movement-list", &two[..8], T).await?;
    assert!(!b.page_text().await?.contains(&wire[..8]));
    b.screenshot(&shots, "13-search").await?;
    b.goto(&format!("{}/console#/movements?amount_min=1000", api.base)).await?;
    b.wait_text("#movement-list", "No movements", T).await?;

    // A proposal, reviewed with its diff: the proposer (an admin) may not approve it; a second
    // admin does, from the console.
    let changed = json!({"template_key": "day.two", "description": "a second step",
        "nodes": [sim("a", json!({})), sim("b", json!({}))], "edges": [{"from": "a", "to": "b"}],
        "risk_controls": {"approvals_required": 2}});
    let proposal = api.ok("POST", "/v3/template-proposals", &admin, Some(changed), 201).await?;
    let pid = proposal["id"].as_str().unwrap_or_default().to_string();
    let root = api.key("root-3", "admin").await?;
    sign_in(&b, &api.base, &admin).await?;
    b.goto(&format!("{}/console#/proposals/{pid}", api.base)).await?;
    b.wait_text("#proposal-diff", "node added", T).await?;
    b.wait_text("#proposal-diff", "a → b", T).await?;
    b.wait_text("#review-why", "another admin", T).await?;
    assert_eq!(b.count("button[data-action=approve-proposal]").await?, 0);
    sign_in(&b, &api.base, &root).await?;
    b.goto(&format!("{}/console#/templates", api.base)).await?;
    b.click(&format!("a[href='#/proposals/{pid}']")).await?;
    b.wait_text("#proposal-diff", "node added", T).await?;
    b.screenshot(&shots, "14-proposal-diff").await?;
    b.click("button[data-action=approve-proposal]").await?;
    b.fill("#f-reason", "second step reviewed").await?;
    b.click("#action-submit").await?;
    b.wait_text("h1", "APPROVED", T).await?;
    let t = api.ok("GET", "/v3/templates/day.two", &keys.requester, None, 200).await?;
    assert_eq!(t["latest_version"], 2, "{t}");
    b.goto(&format!("{}/console#/templates/day.two", api.base)).await?;
    b.wait("section[data-version='2'] .dag", T).await?;
    b.screenshot(&shots, "15-template").await?;

    // A capital transfer that needs a person, closed from the console.
    let transfer: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO capital_transfer_requests (id, requested_by, idempotency_key, body_hash, source, destination,
             asset, amount, reason, template_key, state, outcome)
         VALUES (gen_random_uuid(), 'treasury-bot', 'ct-1', 'h', 'sim_a', 'sim_b', 'USDT', 1500, 'rebalance',
             'day.two', 'NEEDS_ATTENTION', 'its movement ended in MANUAL_INTERVENTION') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await?;
    sign_in(&b, &api.base, &keys.operator).await?;
    b.goto(&format!("{}/console#/transfers?state=NEEDS_ATTENTION", api.base)).await?;
    b.click(&format!("a[href='#/transfers/{transfer}']")).await?;
    b.wait_text("h1", "NEEDS_ATTENTION", T).await?;
    b.screenshot(&shots, "16-capital-transfer").await?;
    b.click("button[data-action=close]").await?;
    b.fill("#f-reason", "settled by hand with the venue").await?;
    b.click("#action-submit").await?;
    b.wait_text("h1", "FAILED", T).await?;

    // Two dead letters, replayed together with one reason.
    for seq in [900, 901] {
        sqlx::query(
            "INSERT INTO movement_callback_outbox (id, request_id, event_id, event_type, sequence, payload,
                callback_url, status, attempts, callback_timestamp, callback_nonce, last_error)
             VALUES (gen_random_uuid(), $1::uuid, gen_random_uuid(), 'node_state_changed', $2,
                '{\"probe\": \"payload-shown\"}'::jsonb, 'http://127.0.0.1:9/gone', 'dlq', 5, 0,
                gen_random_uuid()::text, 'connection refused')",
        )
        .bind(&wire)
        .bind(seq as i64)
        .execute(&db.pool)
        .await?;
    }
    b.goto(&format!("{}/console#/callbacks", api.base)).await?;
    b.wait_text("#dlq-list", "connection refused", T).await?;
    b.click("#dlq-list details summary").await?;
    b.wait_text("#dlq-list", "payload-shown", T).await?;
    b.click("#dlq-select-all").await?;
    b.wait_text("#replay-selected", "(2)", T).await?;
    b.screenshot(&shots, "17-dlq").await?;
    b.click("#replay-selected").await?;
    b.fill("#f-reason", "receiver fixed").await?;
    b.click("#action-submit").await?;
    b.wait_text("#replay-result", "Replayed 2 of 2", T).await?;
    b.wait_text("#dlq-list", "No dead-lettered callbacks", T).await?;

    // Balances: totals per asset, exact, and the history as a chart.
    sqlx::query(
        "INSERT INTO balance_snapshots (venue_key, account, asset, free, locked, source, as_of)
         SELECT v, v, 'USDT', f, 0, 'worker', now() - make_interval(mins => m)
         FROM (VALUES ('sim_a', 100.1, 50), ('sim_a', 120.2, 20), ('sim_a', 90.3, 1), ('sim_b', 0.2, 1)) AS s(v, f, m)",
    )
    .execute(&db.pool)
    .await?;
    b.goto(&format!("{}/console#/balances", api.base)).await?;
    b.wait_text("main", "Totals per asset", T).await?;
    b.wait_text("main", "90.5", T).await?;
    b.click("button[data-action=read-now]").await?;
    b.wait_text("#read-at", "Venues read now at", T).await?;
    b.click("a[data-history='sim_a/USDT']").await?;
    b.wait("#balance-history svg polyline", T).await?;
    b.screenshot(&shots, "18-balances").await?;
    // The last 7 days from the hourly rollups (as balance_history_rollup writes them).
    sqlx::query(
        "INSERT INTO balance_history (granularity, venue_key, account, asset, bucket_start, free_first, free_last,
             free_min, free_max, locked_first, locked_last, locked_min, locked_max, samples, first_at, last_at)
         SELECT 'hour', 'sim_a', 'sim_a', 'USDT', date_trunc('hour', now()) - make_interval(hours => h),
                100 + h, 101 + h, 99 + h, 102 + h, 0, 0, 0, 0, 120, now() - make_interval(hours => h),
                now() - make_interval(hours => h)
           FROM generate_series(3, 150, 3) AS h",
    )
    .execute(&db.pool)
    .await?;
    b.click("a[data-range='7d']").await?;
    b.wait_text("#balance-history", "last 7 days, hourly", T).await?;
    b.wait("#balance-history svg polyline", T).await?;
    b.screenshot(&shots, "18b-balances-hourly").await?;

    // API keys: a key created (its secret shown once) and revoked.
    sign_in(&b, &api.base, &admin).await?;
    b.goto(&format!("{}/console#/keys", api.base)).await?;
    b.click("button[data-action=create-key]").await?;
    b.fill("#f-principal", "reporting-bot").await?;
    b.click("#action-submit").await?;
    let secret = b.wait_text("#new-secret", "qtg_", T).await?;
    b.click("#action-cancel").await?;
    let (status, _) = api.call("GET", "/v3/me", secret.trim(), None).await?;
    assert_eq!(status, 200, "the key shown works");
    b.screenshot(&shots, "19-api-keys").await?;
    b.wait_text("main", "reporting-bot", T).await?;
    b.click("button[data-action=revoke-reporting-bot]").await?;
    b.click("#action-submit").await?;
    wait_until("the key is refused", T, || async {
        Ok(api.call("GET", "/v3/me", secret.trim(), None).await?.0 == 401)
    })
    .await?;

    // The audit search finds the console's actions; a time it cannot read is said under the form.
    b.goto(&format!("{}/console#/audit", api.base)).await?;
    b.fill("#aud-action", "callback.replay").await?;
    b.fill("#aud-since", "2000-01-01").await?;
    b.click("#audit-search").await?;
    b.wait_text("#audit-list", "receiver fixed", T).await?;
    b.fill("#aud-since", "yesterday").await?;
    b.click("#audit-search").await?;
    b.wait_text("#audit-list", "RFC 3339", T).await?;
    assert_eq!(b.count("#aud-action").await?, 1, "the form stays");
    b.goto(&format!("{}/console#/audit?action=callback.replay", api.base)).await?;
    b.wait_text("#audit-list", "receiver fixed", T).await?;
    b.screenshot(&shots, "20-audit").await?;
    b.goto(&format!("{}/console#/workers", api.base)).await?;
    b.wait_text("main", "Heartbeat", T).await?;
    b.wait_text("main", "UTC", T).await?;

    // An admin retires the template's current version from its page.
    b.goto(&format!("{}/console#/templates/day.two", api.base)).await?;
    b.click("button[data-action=retire-v2]").await?;
    b.fill("#f-reason", "replaced by the wire process").await?;
    b.click("#action-submit").await?;
    b.wait_text("section[data-version='2'] h2", "RETIRED", T).await?;
    let (status, err) = api
        .call(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "day.two", "idempotency_key": "day-9",
                "intent": {"asset": "USDC", "amount": "1", "source": "venue-a", "destination": "0xdest"}})),
        )
        .await?;
    assert!(status >= 400, "a retired template takes no new movement: {status} {err}");
    b.close().await;
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// With MG_API_KEY_CREATION_APPROVALS=2 the console's "Create key" makes a request: its admin is
/// told another admin decides, and a second admin approves it there and sees the secret once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_admins_make_a_key_in_the_console() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let bob = api.key("bob", "admin").await?;
    drop(api);
    let api = Api::start(&db.url, &[("MG_API_KEY_CREATION_APPROVALS", "2")]).await?;
    let b = Browser::start().await?;
    sign_in(&b, &api.base, &api.admin_key).await?;
    b.goto(&format!("{}/console#/keys", api.base)).await?;
    b.click("button[data-action=create-key]").await?;
    b.fill("#f-principal", "reporting-bot").await?;
    b.click("#action-submit").await?;
    b.wait_text("main", "yours: another admin decides", T).await?;
    assert_eq!(b.count("#new-secret").await?, 0, "no secret before a second admin approves");
    sign_in(&b, &api.base, &bob).await?;
    b.goto(&format!("{}/console#/keys", api.base)).await?;
    b.wait_text("main", "reporting-bot", T).await?;
    b.click("button[data-action=approve]").await?;
    b.click("#action-submit").await?;
    let secret = b.wait_text("#new-secret", "qtg_", T).await?;
    b.screenshot(&std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"), "21-key-request")
        .await?;
    b.click("#action-cancel").await?;
    let me = api.ok("GET", "/v3/me", secret.trim(), None, 200).await?;
    assert_eq!(me["principal"], "reporting-bot");
    b.close().await;
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// The approval policy and the address book in the console: an entry proposed by one admin and
/// activated by another; a policy drafted, simulated against past movements, proposed, and
/// approved by a second admin; a movement then shows the rule that decided it and the book's
/// name beside its destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn policy_and_address_book_in_the_console() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let root2 = api.key("root-2", "admin").await?;
    install_template(&api, &keys, json!({"template_key": "pol.c", "nodes": [sim("a", json!({}))]})).await?;
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let movement = |idem: &str, to: &str| {
        json!({"template_key": "pol.c", "idempotency_key": idem,
               "intent": {"asset": "USDC", "amount": "10", "source": "venue-a", "destination": to}})
    };
    api.ok("POST", "/v3/movements", &keys.requester, Some(movement("c-1", "0xc01d")), 201).await?;
    let outside = api.ok("POST", "/v3/movements", &keys.requester, Some(movement("c-2", "0xnowhere")), 201).await?;
    let b = Browser::start().await?;

    // The book: one admin proposes, another activates.
    sign_in(&b, &api.base, &api.admin_key).await?;
    b.goto(&format!("{}/console#/book", api.base)).await?;
    b.click("button[data-action=propose-entry]").await?;
    b.fill("#f-name", "custody-cold").await?;
    b.fill("#f-address", "0xC01D").await?;
    // The lane the movements pay on (their template's executor is exec.sim.…).
    b.eval("document.querySelector('#f-lane').value = 'sim'; return true;", json!([])).await?;
    b.fill("#f-tags", "custody").await?;
    b.click("#action-submit").await?;
    b.wait_text("main", "yours: another admin decides", T).await?;
    sign_in(&b, &api.base, &root2).await?;
    b.goto(&format!("{}/console#/book", api.base)).await?;
    b.click("button[data-action=activate-custody-cold]").await?;
    b.wait_text("#action-help", "0xC01D", T).await?;
    b.fill("#f-reason", "our cold wallet, checked on the custody portal").await?;
    b.click("#action-submit").await?;
    b.wait_text("main", "Activated by", T).await?;
    b.wait("button[data-action=remove-custody-cold]", T).await?;
    b.screenshot(&shots, "22-address-book").await?;

    // A policy: drafted, simulated, proposed by one admin, approved by another.
    let doc = json!({"rules": [
        {"name": "outside-book", "when": {"destinations": {"in_book": false}},
         "action": {"type": "block", "reason": "not in the book"}},
        {"name": "any", "action": {"type": "approve", "groups": [{"min": 1, "role": "approver"}]}}]});
    sign_in(&b, &api.base, &api.admin_key).await?;
    b.goto(&format!("{}/console#/policies", api.base)).await?;
    b.wait_text("#policy-current", "No policy is in force", T).await?;
    b.fill("#policy-doc", &doc.to_string()).await?;
    b.click("#policy-simulate").await?;
    let sim = b.wait_text("#simulation", "1 of 2 movement(s) would change", T).await?;
    assert!(sim.contains(&outside["id"].as_str().unwrap_or_default()[..8]) && sim.contains("blocked"), "{sim}");
    b.screenshot(&shots, "23-policy-simulation").await?;
    b.click("#policy-propose").await?;
    b.wait_text("#policy-why", "You proposed it", T).await?;
    assert_eq!(b.count("button[data-action=approve-policy]").await?, 0);
    sign_in(&b, &api.base, &root2).await?;
    b.goto(&format!("{}/console#/policies/1", api.base)).await?;
    b.wait_text("#policy-diff", "rule added", T).await?;
    b.click("button[data-action=approve-policy]").await?;
    b.fill("#f-reason", "book-only, reviewed").await?;
    b.click("#action-submit").await?;
    b.wait_text("h1", "IN FORCE", T).await?;
    b.screenshot(&shots, "24-policy-version").await?;

    // A movement under it: the deciding rule, and the book's name beside the destination.
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(movement("c-3", "0xc01d")), 201).await?;
    b.goto(&format!("{}/console#/movements/{}", api.base, m["id"].as_str().unwrap_or_default())).await?;
    b.wait_text("#policy-decision", "rule", T).await?;
    b.wait_text("#policy-decision", "any", T).await?;
    b.wait_text("main", "custody-cold", T).await?;
    b.screenshot(&shots, "25-movement-policy").await?;
    let (status, _) = api.call("POST", "/v3/movements", &keys.requester, Some(movement("c-4", "0xnowhere"))).await?;
    assert_eq!(status, 422, "outside the book is blocked now");
    b.close().await;
    drop(api);
    db.drop_db().await;
    Ok(())
}
