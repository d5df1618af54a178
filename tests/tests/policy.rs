//! Approval policy as code and the address book, black-box (docs/architecture.md §15): tiered
//! approver groups filled by distinct people, a block rule, a time-window rule, a destination
//! outside the book refused, a policy change its proposer cannot approve alone, a simulation
//! that reports exactly the movements whose outcome changes, and the deciding rule recorded.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

fn sim(key: &str) -> Value {
    json!({"node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
           "config": {"sim": {}}})
}

fn intent(amount: &str, to: &str) -> Value {
    json!({"asset": "USDC", "amount": amount, "source": "venue-a", "destination": to})
}

async fn create(
    api: &Api,
    key: &str,
    template: &str,
    idem: &str,
    amount: &str,
    to: &str,
) -> anyhow::Result<(u16, Value)> {
    let body = json!({"template_key": template, "idempotency_key": idem, "intent": intent(amount, to)});
    api.call("POST", "/v3/movements", key, Some(body)).await
}

/// Proposes `document` as the bootstrap admin and has `second` approve it; answers its version.
async fn enact(api: &Api, second: &str, document: Value) -> anyhow::Result<i64> {
    let v = api.ok("POST", "/v3/policies", &api.admin_key, Some(json!({"document": document})), 201).await?;
    let version = v["version"].as_i64().unwrap_or_default();
    let (status, err) = api.call("POST", &format!("/v3/policies/{version}/approve"), &api.admin_key, None).await?;
    assert_eq!((status, err["error"]["code"].as_str()), (403, Some("SELF_APPROVAL")), "{err}");
    let done = api
        .ok("POST", &format!("/v3/policies/{version}/approve"), second, Some(json!({"reason": "reviewed"})), 200)
        .await?;
    assert_eq!(done["status"], "approved", "{done}");
    Ok(version)
}

fn tiered() -> Value {
    json!({
        "groups": {"finance": ["alice", "bob"], "risk": ["carol"]},
        "rules": [
            {"name": "sanctioned", "when": {"destinations": {"addresses": ["0xbad"]}},
             "action": {"type": "block", "reason": "sanctioned address"}},
            {"name": "small", "when": {"amount_below": "1000"},
             "action": {"type": "approve", "groups": [{"min": 1, "role": "approver"}]}},
            {"name": "large", "when": {"amount_at_least": "1000"},
             "action": {"type": "approve", "groups": [{"min": 2, "group": "finance"}, {"min": 1, "group": "risk"}]}}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiered_approver_groups_a_block_and_the_deciding_rule() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.3")]).await?;
    let keys = Keys::create(&api).await?;
    let (bob, carol, erin) =
        (api.key("bob", "approver").await?, api.key("carol", "approver").await?, api.key("erin", "approver").await?);
    let root2 = api.key("root-2", "admin").await?;
    install_template(&api, &keys, json!({"template_key": "pol.t", "nodes": [sim("a")]})).await?;
    let (status, _) = api.call("GET", "/v3/policies/current", &keys.requester, None).await?;
    assert_eq!(status, 404, "no policy in force yet");
    let (status, err) = api.call("POST", "/v3/policies", &keys.operator, Some(json!({"document": tiered()}))).await?;
    assert_eq!(status, 403, "only an admin proposes: {err}");
    let (status, err) = api
        .call(
            "POST",
            "/v3/policies",
            &api.admin_key,
            Some(json!({"document": {"rules": [{"name": "x",
            "action": {"type": "approve", "groups": [{"min": 2, "group": "nope"}]}}]}})),
        )
        .await?;
    assert_eq!((status, err["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{err}");
    let version = enact(&api, &root2, tiered()).await?;
    let current = api.ok("GET", "/v3/policies/current", &keys.requester, None, 200).await?;
    assert_eq!(current["version"].as_i64(), Some(version));

    // Under 1000: one approver.
    let (status, small) = create(&api, &keys.requester, "pol.t", "p-1", "999.99", "0xabc").await?;
    assert_eq!(status, 201, "{small}");
    assert_eq!((small["policy_version"].as_i64(), small["policy_rule"].as_str()), (Some(version), Some("small")));
    let id = small["id"].as_str().unwrap_or_default().to_string();
    let m = api.ok("POST", &format!("/v3/movements/{id}/approve"), &erin, None, 200).await?;
    assert_eq!(m["request_state"], "APPROVED", "{m}");

    // 1000 and above: two of finance and one of risk, each a different person.
    let (_, large) = create(&api, &keys.requester, "pol.t", "p-2", "1000", "0xabc").await?;
    let id = large["id"].as_str().unwrap_or_default().to_string();
    assert_eq!((large["policy_rule"].as_str(), large["approvals_required"].as_i64()), (Some("large"), Some(3)));
    api.ok("POST", &format!("/v3/movements/{id}/approve"), &carol, None, 200).await?;
    let (status, err) = api.call("POST", &format!("/v3/movements/{id}/approve"), &erin, None).await?;
    assert_eq!((status, err["error"]["code"].as_str()), (403, Some("POLICY_NOT_APPROVER")), "{err}");
    assert!(err["error"]["message"].as_str().unwrap_or_default().contains("finance (0 of 2)"), "{err}");
    let m = api.ok("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None, 200).await?;
    assert_eq!(m["request_state"], "PENDING_APPROVAL");
    let finance = &m["policy"]["progress"]["groups"][0];
    assert_eq!(
        (finance["group"].as_str(), finance["approved_by"].as_array().map(Vec::len)),
        (Some("finance"), Some(1)),
        "{m}"
    );
    let m = api.ok("POST", &format!("/v3/movements/{id}/approve"), &bob, None, 200).await?;
    assert_eq!(m["request_state"], "APPROVED", "{m}");
    wait_state(&api, &keys.requester, &id, &["COMPLETED"], T).await?;

    // A block refuses before anything exists.
    let (status, err) = create(&api, &keys.requester, "pol.t", "p-3", "5", "0xBAD").await?;
    assert_eq!((status, err["error"]["code"].as_str()), (422, Some("POLICY_BLOCKED")), "{err}");
    assert!(err["error"]["message"].as_str().unwrap_or_default().contains("sanctioned"), "{err}");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests WHERE idempotency_key = 'p-3'")
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(n, 0);

    // The deciding rule is on the movement and in its audit trail.
    wait_until("the creation audited with its rule", T, || async {
        let a = api
            .ok("GET", &format!("/v3/audit-events?movement_id={id}&action=movement.create"), &keys.requester, None, 200)
            .await?;
        Ok(a["items"][0]["data"]["policy_rule"] == "large" && a["items"][0]["data"]["policy_version"] == version)
    })
    .await?;
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_time_window_the_address_book_and_a_change_of_policy_by_two_admins() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("MG_POLICY_CHANGE_APPROVALS", "2")]).await?;
    let keys = Keys::create(&api).await?;
    let (root2, root3) = (api.key("root-2", "admin").await?, api.key("root-3", "admin").await?);
    install_template(&api, &keys, json!({"template_key": "pol.t", "nodes": [sim("a")]})).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "pol.book", "nodes": [sim("a")], "risk_controls": {"require_address_book": true}}),
    )
    .await?;

    // The book: proposed by one admin, activated by another; one with a cool-down waits.
    let entry = json!({"name": "custody-cold", "lane": "sim", "address": "0xC01D", "tags": ["custody"]});
    let e = api.ok("POST", "/v3/address-book", &api.admin_key, Some(entry), 201).await?;
    let eid = e["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(e["status"], "pending");
    let (status, _) = api.call("POST", &format!("/v3/address-book/{eid}/approve"), &api.admin_key, None).await?;
    assert_eq!(status, 403, "its proposer does not activate it");
    let e = api.ok("POST", &format!("/v3/address-book/{eid}/approve"), &root2, None, 200).await?;
    assert_eq!((e["status"].as_str(), e["usable"].as_bool()), (Some("active"), Some(true)), "{e}");
    let slow = json!({"name": "new-exchange", "lane": "sim", "address": "0xE1E1", "cool_down_seconds": 3600});
    let s = api.ok("POST", "/v3/address-book", &root2, Some(slow), 201).await?;
    let s = api
        .ok("POST", &format!("/v3/address-book/{}/approve", s["id"].as_str().unwrap_or_default()), &root3, None, 200)
        .await?;
    assert_eq!(s["usable"], false, "cooling down: {s}");
    let (status, err) = api
        .call("POST", "/v3/address-book", &root2, Some(json!({"name": "x\u{200B}y", "lane": "sim", "address": "0x1"})))
        .await?;
    assert_eq!(status, 400, "a name with a hidden character: {err}");

    // A template that requires the book.
    let (status, err) = create(&api, &keys.requester, "pol.book", "b-1", "5", "0xnot-in-book").await?;
    assert_eq!((status, err["error"]["code"].as_str()), (422, Some("ADDRESS_NOT_IN_BOOK")), "{err}");
    let (status, err) = create(&api, &keys.requester, "pol.book", "b-2", "5", "0xE1E1").await?;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (422, Some("ADDRESS_NOT_IN_BOOK")),
        "still cooling down: {err}"
    );
    let (status, m) = create(&api, &keys.requester, "pol.book", "b-3", "5", "0xc01d").await?;
    assert_eq!(status, 201, "{m}");

    // A policy whose office-hours window holds now, destinations in the book only; a change
    // needs two admins other than its proposer.
    let hour = chrono::Utc::now().format("%H").to_string().parse::<u32>()?;
    let window =
        |from: u32, to: u32| json!({"from": format!("{:02}:00", from % 24), "to": format!("{:02}:00", to % 24)});
    let doc = |hours: Value| {
        json!({"rules": [
            {"name": "outside-book", "when": {"destinations": {"in_book": false}}, "action": {"type": "block",
                "reason": "not in the book"}},
            {"name": "office", "when": {"hours": hours}, "action": {"type": "approve", "groups": [{"min": 1,
                "role": "approver"}]}}
        ]})
    };
    let v = api
        .ok("POST", "/v3/policies", &api.admin_key, Some(json!({"document": doc(window(hour + 22, hour + 2))})), 201)
        .await?;
    let version = v["version"].as_i64().unwrap_or_default();
    let one = api.ok("POST", &format!("/v3/policies/{version}/approve"), &root2, None, 200).await?;
    assert_eq!(one["status"], "pending", "one of two approvals: {one}");
    let (status, _) = create(&api, &keys.requester, "pol.t", "w-0", "5", "0xnowhere").await?;
    assert_eq!(status, 201, "not in force before its second approval");
    let two = api.ok("POST", &format!("/v3/policies/{version}/approve"), &root3, None, 200).await?;
    assert_eq!(two["status"], "approved", "{two}");
    let (status, err) = create(&api, &keys.requester, "pol.t", "w-1", "5", "0xnowhere").await?;
    assert_eq!((status, err["error"]["code"].as_str()), (422, Some("POLICY_BLOCKED")), "{err}");
    let (status, m) = create(&api, &keys.requester, "pol.t", "w-2", "5", "0xC01D").await?;
    assert_eq!((status, m["policy_rule"].as_str()), (201, Some("office")), "{m}");
    // Outside the window: the default blocks.
    let v =
        api.ok("POST", "/v3/policies", &root2, Some(json!({"document": doc(window(hour + 3, hour + 5))})), 201).await?;
    let later = v["version"].as_i64().unwrap_or_default();
    api.ok("POST", &format!("/v3/policies/{later}/approve"), &api.admin_key, None, 200).await?;
    api.ok("POST", &format!("/v3/policies/{later}/approve"), &root3, None, 200).await?;
    let (status, err) = create(&api, &keys.requester, "pol.t", "w-3", "5", "0xC01D").await?;
    assert_eq!((status, err["error"]["code"].as_str()), (422, Some("POLICY_BLOCKED")), "{err}");
    assert!(err["error"]["message"].as_str().unwrap_or_default().contains("\"default\""), "{err}");
    // Every version is kept.
    let all = api.ok("GET", "/v3/policies", &keys.requester, None, 200).await?;
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2));
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_simulation_reports_exactly_the_movements_whose_outcome_changes() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let root2 = api.key("root-2", "admin").await?;
    install_template(&api, &keys, json!({"template_key": "pol.t", "nodes": [sim("a")]})).await?;
    // One movement from before any policy, then three under the tiered one.
    let (_, legacy) = create(&api, &keys.requester, "pol.t", "s-0", "10", "0xabc").await?;
    enact(&api, &root2, tiered()).await?;
    let (_, small) = create(&api, &keys.requester, "pol.t", "s-1", "10", "0xabc").await?;
    let (_, mid) = create(&api, &keys.requester, "pol.t", "s-2", "5000", "0xabc").await?;
    let (_, big) = create(&api, &keys.requester, "pol.t", "s-3", "50000", "0xdef").await?;
    // The candidate: the same, but 10000 and above blocked.
    let mut candidate = tiered();
    candidate["rules"].as_array_mut().unwrap().insert(
        1,
        json!({"name": "cap", "when": {"amount_at_least": "10000"}, "action": {"type": "block",
            "reason": "over the cap"}}),
    );
    let sim = api
        .ok("POST", "/v3/policies/simulate", &keys.operator, Some(json!({"document": candidate, "days": 1})), 200)
        .await?;
    assert_eq!(sim["evaluated"].as_u64(), Some(4), "{sim}");
    let changed: Vec<&str> =
        sim["changed"].as_array().unwrap().iter().filter_map(|c| c["movement_id"].as_str()).collect();
    assert_eq!(changed, vec![big["id"].as_str().unwrap_or_default()], "{sim}");
    let c = &sim["changed"][0];
    assert_eq!(
        (c["before"]["rule"].as_str(), c["after"]["rule"].as_str(), c["after"]["outcome"].as_str()),
        (Some("large"), Some("cap"), Some("blocked")),
        "{sim}"
    );
    // Nothing changed by simulating.
    let m = api
        .ok("GET", &format!("/v3/movements/{}", big["id"].as_str().unwrap_or_default()), &keys.requester, None, 200)
        .await?;
    assert_eq!((m["request_state"].as_str(), m["policy_rule"].as_str()), (Some("PENDING_APPROVAL"), Some("large")));
    assert!(legacy["policy_version"].is_null() && small["policy_rule"] == "small" && mid["policy_rule"] == "large");
    let (status, _) =
        api.call("POST", "/v3/policies/simulate", &keys.requester, Some(json!({"document": tiered()}))).await?;
    assert_eq!(status, 403, "simulating is an operator's");
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// The template's own m-of-n keeps working under a policy (every seat filled, any other
/// approver counts towards it); a removed book entry stops the approval of a movement a
/// `require_address_book` template made to it; a newer version supersedes an older one
/// scheduled for later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn template_approvals_book_removal_and_supersession_under_a_policy() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let (bob, root2) = (api.key("bob", "approver").await?, api.key("root-2", "admin").await?);
    install_template(
        &api,
        &keys,
        json!({"template_key": "pol.two", "nodes": [sim("a")], "risk_controls": {"approvals_required": 2}}),
    )
    .await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "pol.book", "nodes": [sim("a")], "risk_controls": {"require_address_book": true}}),
    )
    .await?;
    let any =
        json!({"rules": [{"name": "any", "action": {"type": "approve", "groups": [{"min": 1, "role": "approver"}]}}]});
    let first = enact(&api, &root2, any.clone()).await?;

    // One seat, two approvals the template asks for: the second approver is taken.
    let (_, m) = create(&api, &keys.requester, "pol.two", "t-1", "5", "0xabc").await?;
    let id = m["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(m["approvals_required"].as_i64(), Some(2), "{m}");
    let one = api.ok("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None, 200).await?;
    assert_eq!(one["request_state"], "PENDING_APPROVAL");
    let two = api.ok("POST", &format!("/v3/movements/{id}/approve"), &bob, None, 200).await?;
    assert_eq!(two["request_state"], "APPROVED", "{two}");

    // A book entry removed after creation: the approval is refused.
    let e = api
        .ok(
            "POST",
            "/v3/address-book",
            &api.admin_key,
            Some(json!({"name": "hot", "lane": "sim", "address": "0xB0B"})),
            201,
        )
        .await?;
    let eid = e["id"].as_str().unwrap_or_default().to_string();
    api.ok("POST", &format!("/v3/address-book/{eid}/approve"), &root2, None, 200).await?;
    let (status, m) = create(&api, &keys.requester, "pol.book", "t-2", "5", "0xb0b").await?;
    assert_eq!(status, 201, "{m}");
    api.ok(
        "POST",
        &format!("/v3/address-book/{eid}/actions/remove"),
        &root2,
        Some(json!({"reason": "compromised"})),
        200,
    )
    .await?;
    let (status, err) = api
        .call("POST", &format!("/v3/movements/{}/approve", m["id"].as_str().unwrap_or_default()), &bob, None)
        .await?;
    assert_eq!((status, err["error"]["code"].as_str()), (422, Some("ADDRESS_NOT_IN_BOOK")), "{err}");

    // A version scheduled for tomorrow, then a newer one in force today: tomorrow stays the newer.
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let later = api
        .ok("POST", "/v3/policies", &api.admin_key, Some(json!({"document": any, "effective_at": tomorrow})), 201)
        .await?;
    api.ok("POST", &format!("/v3/policies/{}/approve", later["version"]), &root2, None, 200).await?;
    let block = json!({"rules": [], "default": {"type": "block", "reason": "frozen"}});
    let newest = enact(&api, &root2, block).await?;
    // A retry of a movement created before (same key and body) answers it; a new one is blocked.
    let (status, again) = create(&api, &keys.requester, "pol.two", "t-1", "5", "0xabc").await?;
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())), "{again}");
    let (status, err) = create(&api, &keys.requester, "pol.two", "t-9", "5", "0xabc").await?;
    assert_eq!((status, err["error"]["code"].as_str()), (422, Some("POLICY_BLOCKED")), "{err}");
    let current = api.ok("GET", "/v3/policies/current", &keys.requester, None, 200).await?;
    assert_eq!(current["version"].as_i64(), Some(newest), "the newest approved version whose time has come");
    assert!(newest > first);
    let mut conn = db.pool.acquire().await?;
    let in_two_days =
        qtg_store::policy::in_force(&mut conn, Some(chrono::Utc::now() + chrono::Duration::days(2))).await?;
    let in_a_day = in_two_days.map(|v| v.version as i64).unwrap_or_default();
    drop(conn); // back to the pool, which drop_db closes
    assert_eq!(in_a_day, newest, "the version scheduled for tomorrow never comes back over the newer one");
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn book_entries_match_on_lane_network_and_memo_and_no_admin_mints_a_key_alone() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let root2 = api.key("root-2", "admin").await?;
    let book = json!({"require_address_book": true});
    install_template(&api, &keys, json!({"template_key": "b.sim", "nodes": [sim("a")], "risk_controls": book})).await?;
    let on_eth = json!({"node_key": "a", "node_kind": "action", "action_type": "transfer",
                        "executor_key": "exec.sim.transfer", "config": {"sim": {}, "network": "ETH"}});
    install_template(&api, &keys, json!({"template_key": "b.eth", "nodes": [on_eth], "risk_controls": book})).await?;

    // Before anything governs, one admin makes a key alone (MG_API_KEY_CREATION_APPROVALS=1).
    let body = json!({"principal": "temp", "roles": ["viewer"]});
    api.ok("POST", "/v3/api-keys", &api.admin_key, Some(body), 201).await?;

    let activate = |entry: Value| {
        let (api, root2) = (&api, &root2);
        async move {
            let e = api.ok("POST", "/v3/address-book", &api.admin_key, Some(entry), 201).await?;
            let path = format!("/v3/address-book/{}/approve", e["id"].as_str().unwrap_or_default());
            api.ok("POST", &path, root2, None, 200).await
        }
    };
    activate(json!({"name": "eth-only", "lane": "sim", "network": "eth", "address": "0xAAA"})).await?;
    activate(json!({"name": "desk-77", "lane": "sim", "address": "rDesk", "memo": "77"})).await?;
    activate(json!({"name": "evm-lane", "lane": "evm", "address": "0xCCC"})).await?;
    // The same address with another memo is another entry.
    activate(json!({"name": "desk-78", "lane": "sim", "address": "rDesk", "memo": "78"})).await?;
    let (status, err) = api
        .call(
            "POST",
            "/v3/address-book",
            &api.admin_key,
            Some(json!({"name": "m", "lane": "sim", "address": "r",
                                                                      "memo": "7\u{200B}7"})),
        )
        .await?;
    assert_eq!(status, 400, "a memo with a hidden character: {err}");

    let try_create = |template: &'static str, idem: &'static str, intent: Value| {
        let api = &api;
        let key = keys.requester.clone();
        async move {
            let body = json!({"template_key": template, "idempotency_key": idem, "intent": intent});
            api.call("POST", "/v3/movements", &key, Some(body)).await
        }
    };
    let pay = |to: &str, extra: Value| {
        let mut i = json!({"asset": "USDC", "amount": "5", "destination": to});
        if let (Some(o), Some(x)) = (i.as_object_mut(), extra.as_object()) {
            o.extend(x.clone());
        }
        i
    };
    let cases = [
        ("b.sim", "n-1", pay("0xaaa", json!({"network": "ETH"})), 201, "network named by the intent, any case"),
        ("b.sim", "n-2", pay("0xAAA", json!({"network": "TRX"})), 422, "another network"),
        ("b.sim", "n-3", pay("0xAAA", json!({})), 422, "no network where the entry names one"),
        ("b.eth", "n-4", pay("0xAAA", json!({})), 201, "the network of the paying node"),
        ("b.sim", "m-1", pay("rDesk", json!({"memo": "77"})), 201, "its memo"),
        ("b.sim", "m-2", pay("rDesk", json!({"memo": "78"})), 201, "the other entry's memo"),
        ("b.sim", "m-3", pay("rDesk", json!({"memo": "79"})), 422, "a memo no entry has"),
        ("b.sim", "m-4", pay("rDesk", json!({})), 422, "no memo where every entry has one"),
        (
            "b.sim",
            "m-5",
            json!({"asset": "USDC", "amount": "5", "destination": {"address": "rDesk", "tag": "77"}}),
            201,
            "the destination object's tag",
        ),
        ("b.sim", "l-1", pay("0xCCC", json!({})), 422, "an entry of another lane"),
    ];
    for (template, idem, intent, expected, why) in cases {
        let (status, body) = try_create(template, idem, intent).await?;
        assert_eq!(status, expected, "{why}: {body}");
        if expected == 422 {
            assert_eq!(body["error"]["code"], "ADDRESS_NOT_IN_BOOK", "{why}: {body}");
        }
    }

    // Now that the book governs, no admin makes a key alone — not for a new principal, not for
    // an existing one.
    for principal in ["mallory", "root-2", "alice"] {
        let body = json!({"principal": principal, "roles": ["admin"]});
        let request = api.ok("POST", "/v3/api-keys", &api.admin_key, Some(body), 202).await?;
        assert!(request.get("secret").is_none(), "a request carries no secret: {request}");
        let path = format!("/v3/api-key-requests/{}/approve", request["id"].as_str().unwrap_or_default());
        let (status, err) = api.call("POST", &path, &api.admin_key, None).await?;
        assert_eq!((status, err["error"]["code"].as_str()), (403, Some("SELF_APPROVAL")), "{err}");
        if principal == "mallory" {
            let done = api.ok("POST", &path, &root2, None, 201).await?;
            assert!(done["key"]["secret"].as_str().is_some_and(|s| s.starts_with("qtg_")), "{done}");
        }
    }
    let why: Vec<Option<String>> =
        sqlx::query_scalar("SELECT data->>'two_admins' FROM audit_outbox WHERE action = 'api_key.request'")
            .fetch_all(&db.pool)
            .await?;
    assert_eq!(why, vec![Some("a policy or the address book is in force".to_string()); 3], "audited with why");
    // A new bootstrap secret in the deployment's environment is no second admin either.
    let secret = "a-new-bootstrap-secret-0001";
    let other = Api::start(&db.url, &[("MG_API_BOOTSTRAP_ADMIN_KEY", secret)]).await?;
    let (status, _) = other.call("GET", "/v3/api-keys", secret, None).await?;
    assert_eq!(status, 401, "{}", other.proc.log());
    assert!(other.proc.log().contains("not registered"), "{}", other.proc.log());
    drop((api, other));
    db.drop_db().await;
    Ok(())
}
